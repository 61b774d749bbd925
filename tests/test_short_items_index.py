"""Short benchmark items (fewer than n words) matched whole in index mode, as stream mode does.

Real data: SQuAD validation questions as a task's query (``{{question}}``: most have 8-12 words
after normalization) and MC-TACO test's queries of 8-12 words; some are pasted into a slice of
the wiki sample (verbatim, twice, re-wrapped over lines, edited by one word, and one of 7 words).
Real 8-12-word runs of the wiki articles, some in many of them, check that the text store's
anchors give every doc holding a run.
"""

from __future__ import annotations

import csv
import json
import random
import string
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tcqa_data.errors import ConfigError
from tcqa_data.prep.pipeline import decontaminate

WIKI_DOCS = 300
SQUAD_ROWS = 150
MC_TACO_ROWS = 600
TASKS = ["squad_questions", "mc_taco"]
# Janitor's words, written here from its definition (lowercase, punctuation deleted, whitespace split)
_JANITOR = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)


def _words(text: str) -> int:
    return len(text.translate(_JANITOR).split())


@pytest.fixture(scope="module")
def bench(mc_taco_test, squad_validation, tmp_path_factory) -> dict:
    """A task whose query is the SQuAD question alone (a YAML file), and MC-TACO: local slices."""
    from tcqa_data.prep.taskspec import TaskSpec

    root = tmp_path_factory.mktemp("bench")
    raw = TaskSpec.resolve("squad_completion").to_dict()
    raw.update(task="squad_questions", doc_to_decontamination_query="{{question}}", attribution_fields=[])
    spec = root / "squad_questions.yaml"
    spec.write_text(TaskSpec.from_dict(raw).to_yaml())
    sq = root / "squad_validation.jsonl"
    with open(squad_validation, encoding="utf-8") as fh:
        sq.write_text("".join(fh.readline() for _ in range(SQUAD_ROWS)), encoding="utf-8")
    mc = root / "mc_taco_test.tsv"
    with open(mc_taco_test, encoding="utf-8") as fh:
        mc.write_text("".join(fh.readline() for _ in range(MC_TACO_ROWS)), encoding="utf-8")
    questions = list(dict.fromkeys(json.loads(line)["question"] for line in sq.read_text().splitlines()))
    rows = list(csv.reader(open(mc, encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
    mc_short = [q for q in dict.fromkeys(f"{r[1]} {r[0]}" for r in rows) if 8 <= _words(q) < 13]
    return {"tasks": [str(spec), "mc_taco"],
            "data_files": {"squad_questions": {"validation": sq}, "mc_taco": {"test": mc}},
            "short": [q for q in questions if 8 <= _words(q) < 13],
            "seven": [q for q in questions if _words(q) == 7],
            "mc_short": mc_short}


@pytest.fixture(scope="module")
def corpus(wiki_sample, bench, tmp_path_factory) -> tuple[Path, dict]:
    """``WIKI_DOCS`` wiki articles, then copies of some with short items pasted in."""
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki = [json.loads(fh.readline()) for _ in range(WIKI_DOCS)]
    short = bench["short"]
    words = short[9].split()
    words[len(words) // 2] = "zebra"  # one word edited: no longer the item
    injected = {"verbatim": [short[0], short[3], bench["mc_short"][0]], "twice": [short[5]],
                "wrapped": [short[7]], "edited": [short[9]], "seven": [bench["seven"][0]]}
    pasted = {"verbatim": injected["verbatim"], "twice": injected["twice"] * 2, "edited": [" ".join(words)],
              "seven": injected["seven"],
              "wrapped": ["\n".join(" ".join(short[7].split()[i:i + 3]) for i in range(0, 20, 3))]}
    docs = [dict(w) for w in wiki]
    host = iter(wiki[::11])
    for texts in pasted.values():
        for text in texts:
            h = next(host)
            docs.append({**h, "title": h["title"] + " (copy)",
                         "text": h["text"][:700] + "\n\n" + text + " " + h["text"][700:1500]})
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path, injected


def _build(corpus_path: Path | str, out: Path, text_store: str = "auto") -> Path:
    from tcqa_data.decontam.build import build_index

    build_index([str(corpus_path)], out, ngram_sizes=(13,), minhash=False, text_store=text_store, quiet=True,
                workers=1)
    return out


@pytest.fixture(scope="module")
def index(corpus, tmp_path_factory) -> Path:
    return _build(corpus[0], tmp_path_factory.mktemp("index") / "index")


def _tables(out: Path) -> dict[str, list]:
    return {str(f.relative_to(out)): pq.read_table(f).to_pylist() for f in sorted(out.glob("*/*/*.parquet"))}


def _cont(out: Path, task: str, split: str):
    return pq.read_table(out / task / split / "contamination.parquet").to_pandas()


def _counts(out: Path) -> dict:
    man = json.loads((out / "prep_manifest.json").read_text())
    return {t: man["tasks"][t]["splits"] for t in TASKS}


@pytest.mark.parametrize(("rule", "max_corpus_freq"), [("any-ngram", None), ("ngram-fraction>=0.2", 1)])
def test_index_mode_matches_short_items_whole_as_stream_mode(corpus, bench, index, tmp_path, rule,
                                                             max_corpus_freq):
    """Every file's table and every count equal in both modes; the pasted items dirty, the edited
    one and those of 7 words (below the minimum, 8) not; an item in 2 docs is common at 1."""
    args = dict(data_files=bench["data_files"], rule=rule, max_corpus_freq=max_corpus_freq, quiet=True)
    decontaminate(index, bench["tasks"], tmp_path / "idx", **args)
    decontaminate(None, bench["tasks"], tmp_path / "stream", corpus=[str(corpus[0])], **args)
    a, b = _tables(tmp_path / "idx"), _tables(tmp_path / "stream")
    assert list(a) == list(b) and len(a) == 8
    for name in a:
        assert a[name] == b[name], name
    assert _counts(tmp_path / "idx") == _counts(tmp_path / "stream")
    man = json.loads((tmp_path / "idx" / "prep_manifest.json").read_text())
    assert man["short_min_words"] == 8 and "anchors" in man["untestable_policy"]

    sq = _cont(tmp_path / "idx", "squad_questions", "validation")
    mc = _cont(tmp_path / "idx", "mc_taco", "test")
    counts = _counts(tmp_path / "idx")["squad_questions"]["validation"]
    words = sq["query_words"]
    assert counts["short_whole_docs"] == int(((words >= 8) & (words < 13)).sum()) > 50
    assert counts["ngram_untestable_docs"] == int((words < 8).sum()) > 10
    assert (sq[words < 8]["status"] == "untestable").all() and not sq[words < 8]["dirty"].any()
    inj = corpus[1]
    found = inj["verbatim"] + inj["wrapped"] + ([] if max_corpus_freq else inj["twice"])
    for q in found:
        rows = sq[sq["query"] == q] if q in set(sq["query"]) else mc[mc["query"] == q]
        assert len(rows) and rows["doc_dirty"].all(), q
        assert (rows["longest_match"] == rows["query_words"]).all(), q
    twice = sq[sq["query"] == inj["twice"][0]].iloc[0]
    assert twice["testable"] and len(twice["matched_doc_refs"]) == (0 if max_corpus_freq else 2)
    assert twice["ngram_common"] == (1 if max_corpus_freq else 0)
    for q in inj["edited"] + inj["seven"]:
        assert not sq[sq["query"] == q]["doc_dirty"].any(), q
    # nothing else is dirty: the other short items are not in the corpus
    assert (sq["doc_dirty"] == sq["query"].isin(found)).all()


def _merged_index(corpus_path: Path, out: Path, monkeypatch) -> Path:
    """The corpus as 3 inputs whose anchors are merged into one table of several key-range parts
    (small runs and parts, as a large corpus has), beside each input's own runs otherwise."""
    from tcqa_data.decontam.textstore import anchor_merge, anchors
    from tcqa_data.decontam.textstore import build as ts_build

    for mod in (anchors, anchor_merge):
        monkeypatch.setattr(mod, "ANCHOR_RUN", 40_000)
    monkeypatch.setattr(anchors, "_ANCHOR_BATCH_CHARS", 100_000)
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)
    lines = corpus_path.read_text(encoding="utf-8").splitlines(keepends=True)
    folder = out.parent / "inputs"
    folder.mkdir()
    for i, (lo, hi) in enumerate(((0, 120), (120, 250), (250, len(lines)))):
        (folder / f"part{i}.jsonl").write_text("".join(lines[lo:hi]), encoding="utf-8")
    _build(folder, out)
    meta = json.loads((out / "textstore" / "meta.json").read_text())
    assert len(meta["anchors"]["parts"]) > 1 and not any(r["anchors"] for r in meta["inputs"].values())
    return out


@pytest.mark.parametrize("layout", ["input runs", "merged parts"])
def test_anchor_candidates_hold_every_doc_holding_a_run(corpus, bench, index, layout, tmp_path, monkeypatch):
    """Real runs of 8-12 words (in up to 11 docs) and the short items: the anchors' candidates hold
    every doc whose words hold the run (a brute-force search), and ``whole_hits`` counts exactly them,
    whether the anchors are one input's runs or a merged table's parts."""
    from collections import Counter

    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.detect.evidence import IndexEvidence

    if layout == "merged parts":
        index = _merged_index(corpus[0], tmp_path / "index", monkeypatch)
    docs = [tokenize(json.loads(line)["text"]) for line in corpus[0].read_text(encoding="utf-8").splitlines()]
    eight = Counter(g for t in docs for g in {tuple(t[i:i + 8]) for i in range(len(t) - 7)})
    runs = [" ".join(g) for g, c in eight.most_common(12)]
    rng = random.Random(7)
    for t in rng.sample([t for t in docs if len(t) > 20], 30):
        m = rng.randint(8, 12)
        i = rng.randrange(len(t) - m)
        runs.append(" ".join(t[i:i + m]))
    runs += bench["short"][:40] + bench["mc_short"]
    ev = IndexEvidence.open(index)
    assert ev.whole_problem is None
    cands = ev.anchors.holding_candidates(runs)
    by_m: dict[int, list[int]] = {}
    for j, r in enumerate(runs):
        by_m.setdefault(len(tokenize(r)), []).append(j)
    most = 0
    for m, idx in by_m.items():
        hits = ev.whole_hits([runs[j] for j in idx], m)
        for k, j in enumerate(idx):
            q = tokenize(runs[j])
            holders = [d for d, t in enumerate(docs) if any(t[i:i + m] == q for i in range(len(t) - m + 1))]
            assert set(holders) <= set(cands[j].tolist()), runs[j]
            assert hits.doc_freq[k] == len(holders) and bool(hits.found[k]) == bool(holders), runs[j]
            first = hits.docs[k][hits.docs[k] >= 0].tolist()
            assert first == holders[:len(first)] and len(first) == min(len(holders), hits.docs.shape[1])
            most = max(most, len(holders))
    assert most >= 10  # the test reached runs in many docs ("is the day of the year in the")


def test_an_index_without_usable_text_keeps_short_items_untestable_and_says_why(corpus, bench, index,
                                                                                 tmp_path):
    """No text store, a corpus file changed since the index was built, or an input whose anchors
    are gone: no guess, the short items stay untestable, and the manifest and reports say why."""
    import shutil

    from tcqa_data.decontam.index_files import reseal

    args = dict(data_files={"squad_questions": bench["data_files"]["squad_questions"]}, quiet=True)
    none = _build(corpus[0], tmp_path / "none", text_store="none")
    decontaminate(none, bench["tasks"][:1], tmp_path / "a", **args)
    copy = tmp_path / "corpus.jsonl"
    copy.write_bytes(corpus[0].read_bytes())
    stale = _build(copy, tmp_path / "stale")
    # changed since the index was built: the store checks contents (a touch alone changes nothing)
    with open(copy, "ab") as f:
        f.write(b"\n")
    decontaminate(stale, bench["tasks"][:1], tmp_path / "b", **args)
    # the input's record lists no anchor runs, though it had entries (as a merged table gone stale)
    lost = tmp_path / "lost"
    shutil.copytree(index, lost)
    meta_path = lost / "textstore" / "meta.json"
    meta = json.loads(meta_path.read_text())
    (rec,) = meta["inputs"].values()
    assert rec["anchors"] and rec["anchor_entries"] > 0
    rec["anchors"] = []
    meta_path.write_text(json.dumps(meta))
    reseal(lost)
    decontaminate(lost, bench["tasks"][:1], tmp_path / "c", **args)
    for out, why in ((tmp_path / "a", "no text store"), (tmp_path / "b", "changed since it was indexed"),
                     (tmp_path / "c", "has no anchors for input")):
        man = json.loads((out / "prep_manifest.json").read_text())
        assert man["short_min_words"] is None and why in man["untestable_policy"], man["untestable_policy"]
        report = (out / "squad_questions" / "validation" / "report.md").read_text()
        assert why in report
        cont = _cont(out, "squad_questions", "validation")
        short = cont["query_words"] < 13
        assert short.sum() > 60 and (cont[short]["status"] == "untestable").all()
        counts = man["tasks"]["squad_questions"]["splits"]["validation"]
        assert counts["short_whole_docs"] == 0 and counts["ngram_untestable_docs"] == int(short.sum())


def test_short_min_words_below_the_anchors_reach_is_refused_and_zero_turns_it_off(bench, index, tmp_path):
    args = dict(data_files={"squad_questions": bench["data_files"]["squad_questions"]}, quiet=True)
    with pytest.raises(ConfigError, match="from 6 words"):
        decontaminate(index, bench["tasks"][:1], tmp_path / "o", short_min_words=5, **args)
    assert not (tmp_path / "o").exists()
    decontaminate(index, bench["tasks"][:1], tmp_path / "off", short_min_words=0, **args)
    cont = _cont(tmp_path / "off", "squad_questions", "validation")
    assert (cont[cont["query_words"] < 13]["status"] == "untestable").all()
    decontaminate(index, bench["tasks"][:1], tmp_path / "six", short_min_words=6, **args)
    cont = _cont(tmp_path / "six", "squad_questions", "validation")
    assert cont[(cont["query_words"] >= 6) & (cont["query_words"] < 13)]["testable"].all()
