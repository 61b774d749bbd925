"""Query side of the text store and MinHash verification run work in threads: the same results as
one thread doing it in order (anchor runs looked up ahead of the one counted; candidate batches
signed ahead of the one compared)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.core import packed
from tcqa_data.decontam.textstore import anchor_index as ts_index
from tcqa_data.decontam.textstore import anchors as ts_anchors
from tcqa_data.decontam.textstore.store import TextStore


def _sequential_tiers(anchors, texts, top, min_shared, weak_top):
    """HEAD's candidate_tiers loop: runs in order, each looking up only the k-grams still live."""
    from tcqa_data.decontam.core.arrays import sorted_unique
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes

    flat, owner = batch_ngram_hashes(list(texts), [ts_anchors.ANCHOR_K], anchors.scheme,
                                     anchors.seed)[ts_anchors.ANCHOR_K]
    keys = sorted_unique((np.asarray(flat, dtype=np.uint64) >> np.uint64(32) << np.uint64(32))
                         | np.asarray(owner, dtype=np.uint64))
    uh = np.unique(keys >> np.uint64(32))
    df = np.zeros(len(uh), dtype=np.int64)
    hits = []
    live = np.arange(len(uh))
    for (cells, words, dir_bits, id_bits, _, _), doc_offset in anchors.runs:
        if not len(live):
            break
        k, d = packed.lookup(cells, words, uh[live], dir_bits, id_bits, ts_anchors.ANCHOR_MAX_DF + 1)
        kk, run_df = np.unique(k, return_counts=True)
        df[live[kk]] += run_df
        keep = np.repeat(run_df, run_df) <= ts_anchors.ANCHOR_MAX_DF
        hits.append((live[k[keep]], d[keep] + doc_offset))
        if len(kk) and (df[live[kk]] > ts_anchors.ANCHOR_MAX_DF).any():
            live = live[df[live] <= ts_anchors.ANCHOR_MAX_DF]
    return df, hits


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory):
    """Six inputs sharing phrases, some of them in more than ANCHOR_MAX_DF docs after a few inputs;
    their anchors kept as per-input runs (not merged: as if the index had 2**32 docs or more)."""
    from tcqa_data.decontam.textstore import build as ts_build

    rng = np.random.default_rng(5)
    vocab = [f"v{i}y" for i in range(5000)]
    phrases = [" ".join(rng.choice(vocab, 8)) for _ in range(12)]
    root = tmp_path_factory.mktemp("runs")
    paths = []
    for f in range(6):
        docs = []
        for i in range(60):
            parts = [" ".join(rng.choice(vocab, 25))]
            for j, ph in enumerate(phrases):
                if rng.random() < (0.1 + 0.08 * j):
                    parts += [ph, " ".join(rng.choice(vocab, 10))]
            docs.append({"title": f"f{f}d{i}", "text": " ".join(parts)})
        paths.append(root / f"p{f}.jsonl")
        paths[-1].write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    idx = root / "idx"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ts_build, "MERGED_MAX_DOCS", 0)
        build_index([str(p) for p in paths], idx, id_field="title", minhash=True, quiet=True, workers=1)
    queries = [ph + " " + " ".join(rng.choice(vocab, 6)) for ph in phrases] + \
        [" ".join(rng.choice(vocab, 12)) for _ in range(20)]
    texts = [json.loads(line)["text"] for p in paths for line in p.read_text().splitlines()]
    return idx, queries + texts[::17]


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_anchor_runs_ahead_give_the_same_candidates(many_runs, monkeypatch, threads):
    idx, queries = many_runs
    anchors = ts_index.AnchorIndex(idx)
    assert len(anchors.runs) == 6
    df, hits = _sequential_tiers(anchors, queries, 8, 2, 2)
    assert (df > ts_anchors.ANCHOR_MAX_DF).any() \
        and ((df > 0) & (df <= ts_anchors.ANCHOR_MAX_DF)).any()  # both kinds
    monkeypatch.setattr(ts_index, "_ANCHOR_THREADS", 1)  # no run looked up ahead: the sequential loop
    ref = anchors.candidate_tiers(queries, 8, 2, 2)
    monkeypatch.setattr(ts_index, "_ANCHOR_THREADS", threads)
    assert anchors.candidate_tiers(queries, 8, 2, 2) == ref
    assert any(ref[0]) and any(ref[1])
    # the counted hits equal the sequential loop's: hits and docs per k-gram
    seq = {(int(k), int(d)) for kk, dd in hits for k, d in zip(kk, dd, strict=True)
           if 0 < df[k] <= ts_anchors.ANCHOR_MAX_DF}
    assert seq


def test_verification_threads_give_the_same_matches(many_runs, monkeypatch):
    """Candidate batches signed by threads with their own text stores (and all texts requested at
    once) equal the batches signed in order from a caller's doc_texts."""
    from tcqa_data.decontam.minhash import MinHashIndex, signatures
    from tcqa_data.decontam.minhash import query as mq

    idx, queries = many_runs
    mh = MinHashIndex.open(idx)
    sigs = signatures(queries, mh.params)
    monkeypatch.setattr(mq, "_VERIFY_DOCS", 3)  # many batches
    store = TextStore.open(idx)
    calls = []

    def texts(docs):
        calls.append(len(docs))
        return store.texts(docs)

    seq = MinHashIndex.open(idx, doc_texts=texts).query(sigs)
    assert len(calls) > 3  # in order, one call per batch
    threaded = mh.query(sigs)
    assert mh._store is not None
    for a, b in zip(seq, threaded, strict=True):
        assert np.array_equal(a, b)
    assert (threaded[1] >= 0).sum() >= 8
    mh.prefetch(sigs)  # requests pages only
    assert all(np.array_equal(a, b) for a, b in zip(mh.query(sigs), threaded, strict=True))
