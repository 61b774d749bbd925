"""The error rates of the MinHash index's lossy parts, measured on a real index the way the n-gram
keys' false-positive rate is (tests/test_ngram_index.py): random queries against the band tables
(32-bit band keys) and real query windows against stored 16-bit signature values, compared with
what `tcqa-data index-info` prints."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tcqa_data.cli import app
from tcqa_data.decontam.minhash import MinHashIndex, shingles, signatures, split_windows

ARTICLES = 500  # indexed: the first 500 wiki articles (about 67,000 windows)
HELD_OUT = range(1000, 1012)  # query articles, not in the index
QUERIES = 1_000_000


def _cli(args: list[str]) -> str:
    res = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    return res.stdout


def _printed(out: str, pattern: str) -> Decimal:
    m = re.search(pattern, out)
    assert m, f"{pattern!r} not in index-info's output:\n{out}"
    return Decimal(m[1])


def _half_unit(value: Decimal) -> float:
    """Half a unit in the last printed digit: how far the printed figure may be from the exact one."""
    return 0.5 * 10.0 ** value.as_tuple().exponent  # type: ignore[operator]


@pytest.fixture(scope="module")
def index(wiki_sample, tmp_path_factory) -> dict[str, Any]:
    """A MinHash index with stored 16-bit signatures (`--text-store none`), built by the CLI, and
    the figures index-info prints for it."""
    root = tmp_path_factory.mktemp("mh_rates")
    lines = wiki_sample.read_text(encoding="utf-8").splitlines()
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(lines[:ARTICLES]) + "\n", encoding="utf-8")
    _cli(["index-corpus", str(corpus), "--out", str(root / "idx"), "--text-store", "none", "--workers", "1",
          "--quiet"])
    out = _cli(["index-info", str(root / "idx")])
    return {
        "root": root / "idx",
        "texts": [json.loads(line)["text"] for line in lines[:ARTICLES]],
        "held_out": [json.loads(lines[i])["text"] for i in HELD_OUT],
        "chance_candidates": _printed(out, r"([0-9.e+-]+) chance candidate docs per query window"),
        "bias": _printed(out, r"similarity estimate bias <= ([0-9.e+-]+)"),
        "out": out,
    }


def test_band_key_chance_candidates_measured_with_random_queries(index):
    """1 M random query signatures through ``MinHashIndex.query`` (as decontaminate queries): the
    queries that meet a candidate doc are the chance candidates of 32-bit band keys. Their number
    is what the band tables predict (each band's (key, doc) entries / 2**32) and at most what
    index-info prints (bands x windows / 2**32: overlapping windows of a doc share band keys, so
    the tables hold fewer entries than windows)."""
    idx = MinHashIndex.open(index["root"])
    p = idx.params
    assert idx.storage["band_key_bits"] == 32 and p.verify == "signatures"
    printed = float(index["chance_candidates"])
    recorded = idx.storage["chance_candidates_per_query"]
    assert recorded == pytest.approx(p.bands * idx.n_windows / 2.0 ** 32, rel=1e-12)
    assert abs(printed - recorded) <= _half_unit(index["chance_candidates"])
    entries = idx.band_cells[:, -1].astype(np.int64)  # per band: its distinct (band key, doc) pairs
    per_query = float(entries.sum()) / 2.0 ** 32
    assert 0.85 * recorded < per_query <= recorded

    rng = np.random.default_rng(29)
    hits = 0
    for _ in range(QUERIES // 50_000):
        sims, windows = idx.query(rng.integers(0, 2**32, (50_000, p.num_perm), dtype=np.uint32))
        hits += int((windows >= 0).sum())
        assert sims.max() < 0.2  # random signatures match no window; candidates are verified away
    expected = per_query * QUERIES  # about 360; Poisson: 4 sigma is about 76
    assert 100 < expected < 2000
    assert abs(hits - expected) < 4 * expected ** 0.5 + 1, (hits, expected, recorded * QUERIES)
    assert hits < printed * QUERIES + 4 * (printed * QUERIES) ** 0.5


def _windows(texts: list[str], params) -> list[str]:
    return [w for t in texts for w in split_windows(t, params) if shingles(w, params)]


def test_16_bit_signature_values_collide_at_the_printed_rate(index):
    """Real query windows (held-out articles) against indexed windows: where the exact 32-bit
    values differ, the stored low 16 bits agree by chance with probability 2**-16 -- the bias of
    the similarity estimate that index-info prints -- measured over about 5.7e8 value pairs."""
    idx = MinHashIndex.open(index["root"])
    p = idx.params
    assert idx.storage["signature_bits"] == 16
    docs = list(range(0, ARTICLES, 20))  # 25 indexed articles
    stored = np.concatenate(idx.doc_signatures(docs))
    exact = signatures(_windows([index["texts"][d] for d in docs], p), p)
    # the stored values are the low 16 bits of the windows' exact signatures
    assert stored.dtype == np.uint16 and stored.shape == exact.shape
    np.testing.assert_array_equal(stored, (exact & 0xFFFF).astype(np.uint16))
    query = signatures(_windows(index["held_out"], p), p)
    q16 = (query & 0xFFFF).astype(np.uint16)
    assert len(query) * len(exact) * p.num_perm > 2e8

    equal16 = equal32 = 0
    for a in range(0, len(query), 64):
        e32 = query[a:a + 64, None, :] == exact[None, :, :]
        e16 = q16[a:a + 64, None, :] == stored[None, :, :]
        assert not (e32 & ~e16).any()
        equal32 += int(e32.sum())
        equal16 += int(e16.sum())
    values = len(query) * len(exact) * p.num_perm
    chance = equal16 - equal32  # low 16 bits equal, 32-bit values not
    trials = values - equal32
    rate = idx.storage["signature_value_collision_rate"]
    assert rate == 2.0 ** -16 == idx.storage["similarity_estimate_max_bias"]
    expected = trials * rate  # about 8,700; 4 sigma is about 4%
    assert abs(chance - expected) < 4 * expected ** 0.5, (chance, expected)
    # the similarity estimate's mean excess over the exact one, per window pair: what index-info bounds
    bias = chance / values
    printed = index["bias"]
    assert abs(float(printed) - rate) <= _half_unit(printed)
    assert bias <= float(printed) + _half_unit(printed) + 4 * expected ** 0.5 / values
