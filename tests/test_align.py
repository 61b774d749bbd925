"""Edited contamination: corpus text store, alignment scores, rule terms (issue 9), on real data."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.detect.align import AlignParams, align_tokens, contaminated_spans
from tcqa_data.decontam.detect.evidence import IndexEvidence
from tcqa_data.decontam.detect.rules import Rule
from tcqa_data.decontam.detect.score import QueryDoc, score_docs
from tcqa_data.decontam.index_files import reseal
from tcqa_data.decontam.textstore.build import build_text_store
from tcqa_data.decontam.textstore.store import TextStore, has_text_store
from tcqa_data.errors import ConfigError, IndexMismatchError, TcqaError

HOST = 7  # index of the host article in the slice


def _wiki(wiki_sample, k: int) -> list[dict]:
    with open(wiki_sample, encoding="utf-8") as fh:
        return [json.loads(next(fh)) for _ in range(k)]


def _write_jsonl(path, docs, opener=open) -> None:
    with opener(path, "wt", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"title": d["title"], "text": d["text"]}, ensure_ascii=False) + "\n")


# ---- text store ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet", "jsonl-copy"])
def test_textstore_round_trips_doc_text(wiki_sample, tmp_path, fmt):
    docs = _wiki(wiki_sample, 40)
    docs[3]["text"] = "   "  # an empty doc is skipped by the index: ordinals must still line up
    kept = [d for i, d in enumerate(docs) if i != 3]
    if fmt.startswith("jsonl"):
        path = tmp_path / ("c.jsonl.gz" if fmt == "jsonl.gz" else "c.jsonl")
        _write_jsonl(path, docs, gzip.open if fmt == "jsonl.gz" else open)
    else:
        path = tmp_path / "c.parquet"
        table = pa.table({"title": [d["title"] for d in docs], "text": [d["text"] for d in docs]})
        pq.write_table(table, path, row_group_size=16)
    mode = "copy" if fmt == "jsonl-copy" else "auto"
    build_index([str(path)], tmp_path / "idx", id_field="title", minhash=False, quiet=True, workers=1,
                text_store=mode)
    meta = json.loads((tmp_path / "idx" / "textstore" / "meta.json").read_text())
    (kind,) = {e["kind"] for e in meta["inputs"].values()}
    assert kind == {"jsonl": "offsets", "parquet": "rows"}.get(fmt, "copy")
    store = TextStore.open(tmp_path / "idx")
    store.prefetch([])  # read-ahead hints: any ordinals, past the last doc too, change nothing
    store.prefetch([38, 38, 0, -1, 10_000])
    order = [38, 0, 17, 5, 5, 20]
    assert store.texts(order) == [kept[i]["text"] for i in order]
    assert store.texts(range(len(kept))) == [d["text"] for d in kept]


def test_textstore_refuses_changed_corpus_and_missing_store(wiki_sample, tmp_path):
    path = tmp_path / "c.jsonl"
    _write_jsonl(path, _wiki(wiki_sample, 5))
    build_index([str(path)], tmp_path / "idx", id_field="title", minhash=False, quiet=True, workers=1)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n")
    with pytest.raises(TcqaError, match="changed since it was indexed"):
        TextStore.open(tmp_path / "idx").texts([0])
    build_index([str(path)], tmp_path / "none", minhash=False, quiet=True, workers=1, text_store="none")
    assert not has_text_store(tmp_path / "none")
    with pytest.raises(TcqaError, match="no text store"):
        TextStore.open(tmp_path / "none")
    with pytest.raises(ConfigError, match="--text-store"):
        build_text_store(tmp_path / "none", "sometimes")


def test_rerun_completes_an_interrupted_text_store_and_append_keeps_entries(wiki_sample, tmp_path,
                                                                            monkeypatch):
    from tcqa_data.decontam.textstore import build as ts_build

    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)  # the append merges the two inputs' runs
    docs = _wiki(wiki_sample, 12)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    _write_jsonl(a, docs[:6])
    _write_jsonl(b, docs[6:], gzip.open)
    idx = tmp_path / "idx"
    import tcqa_data.decontam.build.index as build_mod

    def interrupted(*args) -> None:
        raise KeyboardInterrupt  # stopped during the text store pass, which runs before the commit

    with monkeypatch.context() as m:
        m.setattr(build_mod, "_finish_text_store", interrupted)
        with pytest.raises(KeyboardInterrupt):
            build_index([str(a)], idx, minhash=False, quiet=True, workers=1)
    assert not (idx / "manifest.json").exists()  # nothing committed: no index that looks complete
    build_index([str(a)], idx, minhash=False, quiet=True, workers=1)
    first = json.loads((idx / "textstore" / "meta.json").read_text())
    build_index([str(b)], idx, minhash=False, quiet=True, workers=1, append=True)
    meta = json.loads((idx / "textstore" / "meta.json").read_text())
    # the first input's entry is kept; its anchor runs are now in the merged table of both inputs

    def own(rec: dict) -> dict:
        return {k: v for k, v in rec.items() if k not in ("anchors", "anchor_chance_match_rate")}

    assert len(meta["inputs"]) == 2
    assert all(own(meta["inputs"][k]) == own(v) for k, v in first["inputs"].items())
    assert len(meta["anchors"]["inputs"]) == 2 and all(not r["anchors"] for r in meta["inputs"].values())
    assert TextStore.open(idx).texts(range(12)) == [d["text"] for d in docs]
    files = {f.name: f.read_bytes() for f in (idx / "textstore").iterdir() if f.name != "meta.json"}
    for f in (idx / "textstore").iterdir():
        f.unlink()
    rebuilt = build_text_store(idx, workers=2)  # one process per input, then per part: same files
    assert rebuilt["inputs"] == meta["inputs"] and rebuilt["anchors"] == meta["anchors"]
    assert {f.name: f.read_bytes() for f in (idx / "textstore").iterdir() if f.name != "meta.json"} == files


# ---- the alignment rule --------------------------------------------------------------------------
def test_contaminated_spans_follow_min_len_and_mismatch_budget():
    eq = np.array([True] * 6 + [False] + [True] * 5 + [False] * 5 + [True] * 12)
    # 11 equal tokens around one mismatch: one span; then 5 mismatches in a row break the budget of 4
    assert contaminated_spans(eq, 10, 4) == [(0, 12), (17, 29)]
    assert contaminated_spans(eq, 12, 4) == [(17, 29)]
    assert contaminated_spans(eq, 10, 0) == [(17, 29)]
    assert contaminated_spans(eq, 10, 5) == [(0, 29)]


def test_align_tokens_counts_edits_of_real_text(wiki_sample):
    text = _wiki(wiki_sample, 1)[0]["text"].lower().split()[:40]
    edited = list(text)
    del edited[5]  # 1 deleted
    edited[12] = "zebra"  # 1 replaced
    edited[20], edited[21] = edited[21], edited[20]  # a swap: 2 columns
    edited.insert(30, "quietly")  # 1 inserted
    fa = align_tokens(text, ["noise"] * 7 + edited + ["noise"] * 7, AlignParams())
    assert fa.covered.all()
    assert fa.mismatches == 5
    assert fa.doc_token_range == (7, 7 + len(edited))
    fa = align_tokens(text, edited, AlignParams(min_len=10, max_mismatches=1))
    assert 0 < fa.covered.sum() < len(text)


def test_default_min_len_covers_a_ten_word_sentence_with_one_edit(wiki_sample):
    # a 10-word sentence that lost one word keeps 9 equal words in a row: enough by default
    sentence = _wiki(wiki_sample, 1)[0]["text"].lower().split()[:10]
    edited = ["noise"] * 5 + sentence[:4] + sentence[5:] + ["noise"] * 5
    fa = align_tokens(sentence, edited, AlignParams())
    assert fa.covered.all() and fa.mismatches == 1  # the dropped word lies inside the match
    assert not align_tokens(sentence, edited, AlignParams(min_len=10)).covered.any()


# ---- end to end on the wiki sample with an injected edited passage ------------------------------
# A real MC-TACO test sentence (22 words); its source passage is edited inside a wiki article.
SENTENCE = ("These small, dark Melanesians are related in type to Australian aborigines and are confined "
            "today to the forests of the northern highlands.")


def _edited_sentence() -> str:
    w = SENTENCE.split()
    w[2] = "newly"  # replace "dark"
    del w[11]  # delete "and"
    w[15], w[16] = w[16], w[15]  # swap "the forests"
    return " ".join(w)


@pytest.fixture(scope="module")
def mc_taco_rows(mc_taco_test):
    with open(mc_taco_test, encoding="utf-8") as fh:
        rows = fh.read().splitlines(keepends=True)
    mine = [r for r in rows if r.split("\t")[0] == SENTENCE]
    assert mine, "the MC-TACO test split holds the sentence"
    return rows[:60] + mine


@pytest.fixture(scope="module")
def edited_index(wiki_sample, tmp_path_factory):
    docs = _wiki(wiki_sample, 60)
    host = docs[HOST]["text"]
    cut = host.find(". ", len(host) // 2) + 2
    docs[HOST]["text"] = host[:cut] + _edited_sentence() + " " + host[cut:]
    root = tmp_path_factory.mktemp("edited")
    path = root / "corpus.jsonl"
    _write_jsonl(path, docs)
    idx = root / "idx"
    # 13-grams only and no MinHash: the candidate must come from the text store's anchors
    build_index([str(path)], idx, id_field="title", minhash=False, quiet=True, workers=1)
    return idx, docs


def test_anchors_find_every_doc_sharing_six_words(edited_index):
    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.textstore.anchor_index import AnchorIndex

    idx, docs = edited_index
    anchors = AnchorIndex(idx)
    rng = np.random.default_rng(0)
    queries, owners = [], []
    for i in range(0, len(docs), 3):
        toks = tokenize(docs[i]["text"])
        start = int(rng.integers(0, len(toks) - 6))
        queries.append("zzq " + " ".join(toks[start:start + 6]) + " qqz")  # 6 shared words, padded
        owners.append(i)
    found = anchors.candidates(queries, top=64, min_shared=1)
    assert all(i in got for i, got in zip(owners, found, strict=True))
    assert anchors.candidates(["completely unrelated words nobody ever wrote down here"], top=8) == [[]]
    # a doc sharing a single kept 4-gram is no strong candidate at min_shared=2, only a weak one
    strong, weak = anchors.candidate_tiers(queries, top=64, min_shared=2, weak_top=64)
    assert all(i in s + w for i, s, w in zip(owners, strong, weak, strict=True))
    assert all(not set(s) & set(w) for s, w in zip(strong, weak, strict=True))
    assert any(i in w and i not in s for i, s, w in zip(owners, strong, weak, strict=True))
    capped = anchors.candidate_tiers(queries, top=64, min_shared=2, weak_top=1)[1]
    assert all(w[:1] == c for w, c in zip(weak, capped, strict=True))


@pytest.mark.parametrize("merged", [True, False])
def test_anchor_kgram_in_more_than_max_df_docs_across_inputs_is_ignored(tmp_path, monkeypatch, merged):
    """A kept 4-gram counts as evidence while at most ANCHOR_MAX_DF docs hold it, summed over every
    input's runs (or in the merged table); once a query k-gram passes that, later runs no longer
    look it up (same result)."""
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes
    from tcqa_data.decontam.textstore import build as ts_build
    from tcqa_data.decontam.textstore.anchor_index import AnchorIndex
    from tcqa_data.decontam.textstore.anchors import ANCHOR_MAX_DF, winnow

    if not merged:  # per-input runs, as an index of 2**32 docs or more keeps them
        monkeypatch.setattr(ts_build, "MERGED_MAX_DOCS", 0)
    else:  # these 3 runs are merged (by default a store keeps fewer than ANCHOR_MERGE_RUNS runs)
        monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)

    rng = np.random.default_rng(0)
    vocab = [f"w{i}x" for i in range(20_000)]
    at_max = "amber basalt cobalt dune ember fjord garnet harbor"  # in exactly ANCHOR_MAX_DF docs
    over = "indigo jasper kelp lagoon marble nectar onyx pebble"  # in ANCHOR_MAX_DF + 7, most early
    assert ANCHOR_MAX_DF == 64
    n_at = (22, 21, 21)
    n_over = (33, 33, 5)
    paths = []
    for f in range(3):
        docs = []
        for i in range(40):
            parts = [" ".join(rng.choice(vocab, 30))]
            for phrase, counts in ((at_max, n_at), (over, n_over)):
                if i < counts[f]:
                    parts += [phrase, " ".join(rng.choice(vocab, 30))]
            docs.append({"title": f"f{f}d{i}", "text": " ".join(parts)})
        paths.append(tmp_path / f"part{f}.jsonl")
        _write_jsonl(paths[-1], docs)
    idx = tmp_path / "idx"
    build_index([str(p) for p in paths], idx, id_field="title", minhash=False, quiet=True, workers=1)
    anchors = AnchorIndex(idx)
    assert len(anchors.runs) == (1 if merged else 3)
    # reference: each doc's kept k-grams; a query k-gram counts if 1..ANCHOR_MAX_DF docs keep it
    kept: dict[int, set[int]] = {}
    for f, p in enumerate(paths):
        texts = [json.loads(line)["text"] for line in p.read_text().splitlines()]
        h, d = winnow(texts, anchors.scheme, anchors.seed)
        for hh, dd in zip(h.tolist(), d.tolist(), strict=True):
            kept.setdefault(hh, set()).add(40 * f + dd)
    strong, weak = anchors.candidate_tiers([at_max, over], top=200, min_shared=2, weak_top=200)
    crossed = 0
    for q, phrase in enumerate((at_max, over)):
        qh = {int(x) >> 32 for x in batch_ngram_hashes([phrase], [4], anchors.scheme, anchors.seed)[4][0]}
        dfs = [len(kept.get(x, ())) for x in qh]
        want = sorted({o for x in qh if 0 < len(kept.get(x, ())) <= ANCHOR_MAX_DF for o in kept[x]})
        assert sorted(strong[q] + weak[q]) == want
        crossed += max(dfs) > ANCHOR_MAX_DF
    assert max(len(kept.get(int(x) >> 32, ())) for x in batch_ngram_hashes(
        [at_max], [4], anchors.scheme, anchors.seed)[4][0]) == ANCHOR_MAX_DF  # counted, at the limit
    assert crossed == 1  # the other phrase's common k-grams passed the limit (after two inputs)


def test_doc_text_token_tests_equal_isin():
    """Alignment's per-doc token tests (distinct ids, searched) equal np.isin both ways."""
    from tcqa_data.decontam.detect.align import _doc_text

    rng = np.random.default_rng(3)
    words = [f"t{i}" for i in range(40)]
    for n in (0, 1, 9, 400):
        doc = _doc_text(" ".join(rng.choice(words, n)), "janitor")
        assert len(doc.tokens) == n
        for m in (0, 5, 60):
            f_ids = np.fromiter((hash(w) for w in rng.choice(words + ["absent"], m)), dtype=np.int64, count=m)
            assert np.array_equal(doc.holds(f_ids), np.isin(doc.ids, f_ids))
            assert doc.shared_tokens(f_ids) == int(np.isin(f_ids, doc.ids).sum())
        if n:
            _, counts = np.unique(doc.ids, return_counts=True)
            assert np.isclose(doc.weight.sum(), len(counts))  # 1 / count per token: 1 per distinct word


def test_anchor_tables_are_packed_and_version2_stores_still_read(edited_index, tmp_path):
    """Anchors are packed tables (about 16 + log2(docs) + 2 bits per entry, not 64); a store of
    version 2 (one uint64 ``hash << 32 | doc`` per entry) gives the same candidates."""
    import shutil

    from tcqa_data.decontam.core import packed
    from tcqa_data.decontam.textstore.anchor_index import AnchorIndex
    from tcqa_data.decontam.textstore.store import store_summary

    idx, docs = edited_index
    old = tmp_path / "idx"
    shutil.copytree(idx, old)
    meta = json.loads((old / "textstore" / "meta.json").read_text())
    (rec,) = meta["inputs"].values()
    summary = store_summary(old)
    assert summary["anchor_entries"] == sum(r["entries"] for r in rec["anchors"]) > 10_000
    assert summary["bytes"]["anchors"] < summary["anchor_entries"] * 4  # uint64 entries were 8 B
    assert summary["anchor_chance_match_rate"] == summary["anchor_entries"] / 2**32
    names = []
    for run in rec["anchors"]:
        cells = np.load(old / "textstore" / f"{run['name']}.cells.npy")
        words = np.load(old / "textstore" / f"{run['name']}.words.npy")
        k, d = packed.decode_range(cells, words, 0, len(cells) - 1, run["dir_bits"], run["id_bits"])
        assert len(k) == run["entries"]
        name = f"{run['name']}.npy"
        np.save(old / "textstore" / name, (k << np.uint64(32)) | d.astype(np.uint64))
        names.append(name)
    rec["anchors"] = names
    meta["version"] = 2
    (old / "textstore" / "meta.json").write_text(json.dumps(meta))
    reseal(old)  # an older store written in on purpose: the manifest records it
    own_docs = [i for i in range(0, len(docs), 5) if len(docs[i]["text"].split()) > 60]
    queries = [" ".join(docs[i]["text"].split()[40:52]) for i in own_docs]
    queries.append("nothing like this is in the corpus")
    got = AnchorIndex(old).candidate_tiers(queries, 16, 2, 8)
    assert got == AnchorIndex(idx).candidate_tiers(queries, 16, 2, 8)
    own = [i in strong + weak for i, strong, weak in zip(own_docs, *got, strict=False)]
    assert len(own) >= 8 and all(own) and got[0][-1] == got[1][-1] == []  # each query finds its own doc


def test_edited_passage_is_aligned_with_span_share_and_field(edited_index, mc_taco_rows):
    from tcqa_data.decontam.core.normalize import tokenize

    idx, docs = edited_index
    question = next(r.split("\t")[1] for r in mc_taco_rows if r.startswith(SENTENCE))
    query = f"{question} {SENTENCE}"
    q = QueryDoc(query, {"question": question, "sentence": SENTENCE})
    never = mc_taco_rows[0].split("\t")
    clean = QueryDoc(f"{never[1]} {never[0]}", {"question": never[1], "sentence": never[0]})
    cols = score_docs([q, clean], IndexEvidence.open(idx), 13)
    assert cols["ngram_hits"][0] == 0  # no intact 13-gram survives the edits: any-ngram misses it
    assert cols["aligned_share"][0] == pytest.approx(len(tokenize(SENTENCE)) / len(tokenize(query)))
    assert cols["aligned_field_share"][0] == 1.0
    assert cols["aligned_field"][0] == "sentence"
    assert cols["aligned_ref"][0] == docs[HOST]["title"]
    assert cols["aligned_mismatches"][0] == 4  # replaced 1, deleted 1, swapped 2
    start, end = cols["aligned_span"][0]
    text = docs[HOST]["text"]
    assert text[start:end] == _edited_sentence().rstrip(".")
    assert cols["aligned_text"][0] == text[start:end]
    marked = {cols["aligned_text"][0][s:e] for s, e in cols["aligned_text_marks"][0]}
    assert "newly" in marked
    (qs,) = cols["aligned_query_spans"][0]
    assert query[qs[0]:qs[1]] == SENTENCE.rstrip(".")
    assert cols["aligned_share"][1] == 0.0 and cols["aligned_ref"][1] is None

    rules = {r: Rule.parse(r).evaluate(cols)[0].tolist() for r in
             ("any-ngram", "aligned>=0.5", "aligned-field>=0.9", "any-ngram|aligned>=0.5", "aligned>=0.9")}
    assert rules == {"any-ngram": [False, False], "aligned>=0.5": [True, False],
                     "aligned-field>=0.9": [True, False], "any-ngram|aligned>=0.5": [True, False],
                     "aligned>=0.9": [False, False]}


def test_decontaminate_flags_edited_source_and_reports_the_span(edited_index, mc_taco_rows, tmp_path):
    import pyarrow.parquet as pq

    from tcqa_data.prep.pipeline import decontaminate

    idx, _ = edited_index
    tsv = tmp_path / "test_slice.tsv"
    tsv.write_text("".join(mc_taco_rows), encoding="utf-8")
    files = {"mc_taco": {"test": str(tsv)}}
    decontaminate(idx, ["mc_taco"], tmp_path / "default", data_files=files, quiet=True)
    decontaminate(idx, ["mc_taco"], tmp_path / "aligned", rule="any-ngram|aligned>=0.5", data_files=files,
                  quiet=True)
    default = pq.read_table(tmp_path / "default" / "mc_taco" / "test" / "contamination.parquet").to_pydict()
    aligned = pq.read_table(tmp_path / "aligned" / "mc_taco" / "test" / "contamination.parquet").to_pydict()
    mine = [r.split("\t")[0] == SENTENCE for r in mc_taco_rows]
    assert not any(default["dirty"])  # the default any-ngram rule cannot see the edited copy
    assert aligned["dirty"] == mine
    assert all(aligned["aligned_field"][i] == "sentence" for i, m in enumerate(mine) if m)
    report = (tmp_path / "aligned" / "mc_taco" / "test" / "report.md").read_text(encoding="utf-8")
    assert "**newly**" in report  # the corpus span is shown with its mismatched words marked
    # both shares, each named, in percent: `aligned>=` tests the query's, `aligned-field>=` the field's
    rep = json.loads((tmp_path / "aligned" / "mc_taco" / "test" / "report.json").read_text(encoding="utf-8"))
    top = next(t for t in rep["top_contaminated"] if t.get("aligned_text"))
    assert f"{top['aligned_share'] * 100:.1f}% of the query" in report
    assert f"{top['aligned_field_share'] * 100:.1f}% of field {top['aligned_field']}" in report
    page = (tmp_path / "aligned" / "mc_taco" / "test" / "report.html").read_text(encoding="utf-8")
    assert "<mark>newly</mark>" in page


def test_alignment_needs_a_text_store_and_rule_errors_are_clear(mc_taco_rows, tmp_path):
    from tcqa_data.prep.pipeline import decontaminate

    for bad, why in (("aligned", "cannot parse"), ("aligned>=2", r"in \[0, 1\]"),
                     ("aligned-fields>=0.5", "cannot parse"), ("aligned>=0.5|", "cannot parse")):
        with pytest.raises(ConfigError, match=why):
            Rule.parse(bad)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": SENTENCE}) + "\n", encoding="utf-8")
    bare = tmp_path / "bare"
    build_index([str(corpus)], bare, minhash=False, quiet=True, workers=1, text_store="none")
    tsv = tmp_path / "t.tsv"
    tsv.write_text("".join(mc_taco_rows[:5]), encoding="utf-8")
    with pytest.raises(IndexMismatchError, match="no text store"):
        decontaminate(bare, ["mc_taco"], tmp_path / "prep", rule="aligned>=0.5",
                      data_files={"mc_taco": {"test": str(tsv)}}, quiet=True)


def test_index_info_shows_minhash_and_text_store_storage(wiki_sample, tmp_path, monkeypatch, capsys):
    """index-info prints the sizes and computed chance rates of the lossy parts: MinHash band
    tables verified against the text store (format 3), and the text store's packed anchors."""
    import sys

    from tcqa_data.cli import main

    path = tmp_path / "c.jsonl"
    _write_jsonl(path, _wiki(wiki_sample, 12))
    build_index([str(path)], tmp_path / "idx", quiet=True, workers=1)
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr(sys, "argv", ["tcqa-data", "index-info", str(tmp_path / "idx")])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr().out
    assert exc.value.code in (0, None)
    assert "format 3: band tables of 32-bit band keys -> docs" in out
    assert "chance candidate docs per query window" in out and "recomputed from the text store" in out
    assert "band_entries_*.npy" in out
    store = next(line for line in out.splitlines() if line.startswith("│ text store"))
    assert "anchors" in store and "chance match" in store and "per query k-gram" in store
    assert not (tmp_path / "idx" / "minhash" / "signatures.npy").exists()
