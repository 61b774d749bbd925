"""`decontaminate` end to end on the real wiki sample index: done-when checks, invariants,
determinism, reports, lm-eval export, options and bad input."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
import string
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tcqa_data.decontam.index_files import reseal
from tcqa_data.errors import ConfigError, IndexMismatchError, InputError
from tcqa_data.prep.pipeline import decontaminate
from tcqa_data.prep.task_jobs import parse_data_files

# An independent normalization for ground truth, written from the definition (ASCII lowercase,
# delete ASCII punctuation, split on whitespace), not by calling the code under test.
_TABLE = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)


def _words(text: str) -> list[str]:
    return text.translate(_TABLE).split()


@pytest.fixture(scope="module")
def prep(wiki_index, mc_taco_test, mc_taco_dev, squad_validation, tmp_path_factory):
    out = tmp_path_factory.mktemp("prep") / "out"
    summary = decontaminate(
        wiki_index, ["mc_taco", "squad_completion"], out,
        data_files={"mc_taco": {"test": mc_taco_test, "validation": mc_taco_dev},
                    "squad_completion": {"validation": squad_validation}},
        quiet=True)
    return out, summary


@pytest.fixture(scope="module")
def corpus(wiki_sample):
    """Normalized article texts (one string of words each) and their word sets."""
    texts = []
    for line in wiki_sample.read_text(encoding="utf-8").splitlines():
        texts.append(" ".join(_words(json.loads(line)["text"])))
    return texts, [set(t.split()) for t in texts]


def _read(out: Path, task: str, split: str, name: str):
    return pq.read_table(out / task / split / f"{name}.parquet").to_pandas()


def test_every_verbatim_mc_taco_sentence_group_is_dirty(prep, corpus, mc_taco_test, mc_taco_dev):
    out, _ = prep
    texts, word_sets = corpus
    checked = 0
    for split, path in (("test", mc_taco_test), ("validation", mc_taco_dev)):
        full = _read(out, "mc_taco", split, "full")
        cont = _read(out, "mc_taco", split, "contamination")
        sentences = {r[0] for r in csv.reader(open(path, encoding="utf-8"), delimiter="\t",
                                             quoting=csv.QUOTE_NONE)}
        verbatim = set()
        for s in sentences:
            w = _words(s)
            if len(w) < 13:
                continue
            needle = " " + " ".join(w) + " "
            # word sets narrow the candidates; the check itself is a substring search
            if any(set(w) <= ws and needle in f" {t} " for t, ws in zip(texts, word_sets, strict=True)):
                verbatim.add(s)
        rows = full["sentence"].isin(verbatim)
        assert rows.any()
        assert cont.loc[rows, "dirty"].all(), full.loc[rows & ~cont["dirty"], "sentence"].unique()
        # the evidence says the match came from the sentence, with a long run of matched words
        assert (cont.loc[rows, "match_field"] == "sentence").all()
        assert (cont.loc[rows, "longest_match"] >= 13).all()
        checked += len(verbatim)
    assert checked >= 20  # the README says 28 distinct sentences appear verbatim


def test_apollo_program_squad_docs_are_flagged(prep):
    out, _ = prep
    full = _read(out, "squad_completion", "validation", "full")
    cont = _read(out, "squad_completion", "validation", "contamination")
    apollo = full["title"] == "Apollo_program"
    assert apollo.sum() > 100
    assert cont.loc[apollo, "dirty"].all()
    assert (cont.loc[apollo, "match_field"] == "context").all()
    refs = {r for refs in cont.loc[apollo, "matched_doc_refs"] for r in refs}
    assert any("Apollo" in r for r in refs), refs


def test_random_other_docs_are_not_flagged(prep, corpus, wiki_sample):
    """Sampled docs with no 13-word window in the corpus (independent check) are clean, and
    sampled docs with one are dirty."""
    out, _ = prep
    texts, _ = corpus
    rng = random.Random(1234)
    sample = []  # (task, split, doc_id, set of 13-word windows)
    for task, split in (("mc_taco", "test"), ("squad_completion", "validation")):
        cont = _read(out, task, split, "contamination")
        full = _read(out, task, split, "full")
        if task == "squad_completion":
            pool = full.index[full["title"] != "Apollo_program"].tolist()
        else:
            pool = full.drop_duplicates("group_id").index.tolist()
        for i in rng.sample(pool, 150):
            w = _words(cont.at[i, "query"])
            sample.append((task, split, i, {" ".join(w[j:j + 13]) for j in range(len(w) - 12)}))
    wanted = set().union(*(s[3] for s in sample))
    seen = set()
    for t in texts:
        w = t.split()
        for j in range(len(w) - 12):
            g = " ".join(w[j:j + 13])
            if g in wanted:
                seen.add(g)
    clean_checked = 0
    for task, split, i, grams in sample:
        cont = _read(out, task, split, "contamination")
        if grams & seen:
            assert cont.at[i, "doc_dirty"], (task, i)
        else:
            assert not cont.at[i, "doc_dirty"], (task, i, cont.at[i, "query"][:200])
            if task == "squad_completion" or cont.at[i, "group_id"] not in set(
                    cont.loc[cont["doc_dirty"], "group_id"]):
                assert cont.at[i, "status"] in ("clean", "untestable")
            clean_checked += 1
    assert clean_checked >= 250


def test_invariants_and_schema(prep, mc_taco_test):
    out, summary = prep
    for task, split in (("mc_taco", "test"), ("mc_taco", "validation"), ("squad_completion", "validation")):
        full, clean, dirty = (_read(out, task, split, n) for n in ("full", "clean", "dirty"))
        cont = _read(out, task, split, "contamination")
        assert full["doc_id"].tolist() == list(range(len(full)))
        c, d = clean["doc_id"].tolist(), dirty["doc_id"].tolist()
        assert not set(c) & set(d) and sorted(c + d) == full["doc_id"].tolist()
        assert c == sorted(c) and d == sorted(d)  # original order
        assert not set(clean["group_id"]) & set(dirty["group_id"])  # no partial group
        assert list(clean.columns) == list(full.columns) == list(dirty.columns)
        assert d == cont.index[cont["dirty"]].tolist()
        # the clean rows are exactly the original rows
        assert clean.drop(columns=["doc_id", "group_id"]).equals(
            full.loc[c].drop(columns=["doc_id", "group_id"]).reset_index(drop=True))
        counts = summary["tasks"][task][split]
        assert counts["dirty_docs"] == len(d) and counts["clean_docs"] == len(c)
    full = _read(out, "mc_taco", "test", "full")
    assert list(full.columns) == ["sentence", "question", "answer", "label", "category", "doc_id", "group_id"]
    first = next(csv.reader(open(mc_taco_test, encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
    assert full.iloc[0][["sentence", "question", "answer"]].tolist() == first[:3]
    assert full["group_id"].max() + 1 == 1332
    manifest = json.loads((out / "prep_manifest.json").read_text())
    import tcqa_data

    assert manifest["format_version"] == tcqa_data.FORMAT_VERSION
    assert manifest["rule"] == "any-ngram" and manifest["normalization"] == "janitor"
    assert manifest["index"]["ngram_sizes"] == [13]
    assert manifest["tasks"]["mc_taco"]["splits"]["test"]["docs"] == 9442
    assert (out / "mc_taco" / "task.yaml").is_file()
    from tcqa_data.prep.taskspec import TaskSpec

    written = TaskSpec.from_yaml(out / "mc_taco" / "task.yaml")
    assert written.to_dict() == TaskSpec.resolve("mc_taco").to_dict()


def test_reports_state_method_and_show_evidence(prep):
    out, _ = prep
    d = out / "mc_taco" / "test"
    rep = json.loads((d / "report.json").read_text())
    m = rep["method"]
    assert m["rule"] == "any-ngram" and m["ngram"] == 13 and m["normalization"] == "janitor"
    assert m["group_policy"] == "any" and m["index"]["path"]
    assert rep["counts"]["dirty_groups"] > 0
    assert sum(rep["distributions"]["ngram_fraction"]["counts"]) == rep["counts"]["docs"] - rep["counts"][
        "ngram_untestable_docs"]
    cats = rep["by"]["category"]
    assert set(cats) == {"Event Duration", "Event Ordering", "Frequency", "Stationarity", "Typical Time"}
    top = rep["top_contaminated"][0]
    s, e = top["match_spans"][0]
    assert top["query"][s:e] and s < e
    html = (d / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3  # fraction, longest match, clean share by category
    assert "<mark>" in html and html.count("<mark>") >= len(rep["top_contaminated"])
    md = (d / "report.md").read_text()
    assert "any-ngram" in md and "**" in md and "Clean share by category" in md
    sq = json.loads((out / "squad_completion" / "validation" / "report.json").read_text())
    assert sq["field_attribution"]["context"]["matched_words"] > sq["field_attribution"]["question"][
        "matched_words"]


def test_same_inputs_give_byte_identical_outputs(wiki_index, mc_taco_dev, tmp_path):
    def snapshot(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    out = tmp_path / "out"
    args = dict(data_files={"mc_taco": {"validation": mc_taco_dev}}, quiet=True)
    decontaminate(wiki_index, ["mc_taco"], out, **args)
    first = snapshot(out)
    decontaminate(wiki_index, ["mc_taco"], out, **args)
    assert snapshot(out) == first
    assert any(k.endswith("report.html") for k in first)


def test_lm_eval_loads_the_exported_clean_split(prep):
    from lm_eval.tasks import TaskManager

    out, _ = prep
    dirs = [str(out / "mc_taco" / "test" / "lm_eval"),
            str(out / "squad_completion" / "validation" / "lm_eval")]
    tm = TaskManager(include_path=dirs, include_defaults=False)
    tasks = tm.load(["tcqa_mc_taco_test_clean", "tcqa_squad_completion_validation_clean"])["tasks"]
    mc = tasks["tcqa_mc_taco_test_clean"]
    clean = _read(out, "mc_taco", "test", "clean")
    docs = list(mc.eval_docs)
    assert len(docs) == len(clean)
    assert mc.doc_to_text(docs[0]).startswith(clean.at[0, "sentence"])
    assert mc.doc_to_target(docs[0]) == clean.at[0, "label"]
    sq = tasks["tcqa_squad_completion_validation_clean"]
    sdocs = list(sq.eval_docs)
    assert len(sdocs) == len(_read(out, "squad_completion", "validation", "clean"))
    assert all(d["title"] != "Apollo_program" for d in sdocs)
    assert sq.process_results(sdocs[0], [" " + sdocs[0]["value"].upper() + " etc"]) == {"contains": 1.0}
    assert sq.process_results(sdocs[0], ["nothing"]) == {"contains": 0.0}


def test_rule_options_and_minhash(wiki_index, mc_taco_dev, tmp_path):
    files = {"mc_taco": {"validation": mc_taco_dev}}
    base = tmp_path / "base"
    decontaminate(wiki_index, "mc_taco", base, data_files=files, quiet=True)
    b = _read(base, "mc_taco", "validation", "contamination")
    frac = tmp_path / "frac"
    decontaminate(wiki_index, "mc_taco", frac, data_files=files, rule="ngram-fraction>=0.5", quiet=True)
    f = _read(frac, "mc_taco", "validation", "contamination")
    assert (f["doc_dirty"] == (b["ngram_fraction"] >= 0.5)).all()
    assert f["doc_dirty"].sum() < b["doc_dirty"].sum()
    mh = tmp_path / "mh"
    decontaminate(wiki_index, "mc_taco", mh, data_files=files, rule="minhash>=0.8", quiet=True)
    m = _read(mh, "mc_taco", "validation", "contamination")
    # a sentence copied verbatim scores J = 1 against its own corpus window
    verbatim = b["longest_match"] >= b["query_words"] - 8
    assert verbatim.any() and (m.loc[verbatim, "minhash_sim"] >= 0.8).all()
    assert m.loc[verbatim, "doc_dirty"].all()
    assert (m["minhash_sim"].fillna(0.0) < 0.8).sum() > 0.9 * len(m)  # null: no MinHash candidate
    rep = json.loads((mh / "mc_taco" / "validation" / "report.json").read_text())
    assert rep["method"]["rule"] == "minhash>=0.8"
    # --max-corpus-freq ignores n-grams in more than K docs
    k1 = tmp_path / "k1"
    decontaminate(wiki_index, "mc_taco", k1, data_files=files, max_corpus_freq=1, quiet=True)
    k = _read(k1, "mc_taco", "validation", "contamination")
    assert (k["max_doc_freq"] <= 1).all()
    assert ((k["ngram_hits"] + k["ngram_common"]) == b["ngram_hits"]).all()
    # group policy "all" never makes more groups dirty than "any"
    al = tmp_path / "all"
    decontaminate(wiki_index, "mc_taco", al, data_files=files, group_policy="all", quiet=True)
    a = _read(al, "mc_taco", "validation", "contamination")
    assert a["dirty"].sum() <= b["dirty"].sum()


def test_auto_ngram_and_index_mismatch(wiki_index, mc_taco_dev, tmp_path):
    from tcqa_data.decontam.build import build_index

    files = {"mc_taco": {"validation": mc_taco_dev}}
    s = decontaminate(wiki_index, "mc_taco", tmp_path / "auto", data_files=files, ngram="auto", quiet=True)
    man = json.loads((tmp_path / "auto" / "prep_manifest.json").read_text())
    assert man["tasks"]["mc_taco"]["ngram"] == 13 and "auto" in man["tasks"]["mc_taco"]["ngram_choice"]
    assert s["tasks"]["mc_taco"]["validation"]["docs"] == 3783
    small = tmp_path / "idx8"
    words = "one two three four five six seven eight nine"
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": words}) + "\n")
    build_index([str(tmp_path / "c.jsonl")], small, ngram_sizes=(8,), minhash=False, quiet=True, workers=1)
    with pytest.raises(IndexMismatchError, match=r"\[8\]"):
        decontaminate(small, "mc_taco", tmp_path / "x", data_files=files, quiet=True)
    with pytest.raises(IndexMismatchError, match="normalization 'janitor'"):
        decontaminate(small, "mc_taco", tmp_path / "x", data_files=files, ngram=8, normalization="unicode",
                      quiet=True)
    with pytest.raises(IndexMismatchError, match="MinHash"):
        decontaminate(small, "mc_taco", tmp_path / "x", data_files=files, ngram=8, rule="minhash>=0.5",
                      quiet=True)
    # an index hashed by another hash function would silently match nothing: refused
    manifest = json.loads((small / "manifest.json").read_text())
    manifest["hash"]["name"] = "some-older-hash-v0"
    (small / "manifest.json").write_text(json.dumps(manifest))
    reseal(small)  # as that hash's tcqa-data would have sealed it (an unsealed edit is damage)
    with pytest.raises(IndexMismatchError, match="some-older-hash-v0"):
        decontaminate(small, "mc_taco", tmp_path / "x", data_files=files, ngram=8, quiet=True)


def test_short_queries_are_untestable_not_clean(wiki_index, tmp_path):
    path = tmp_path / "short.jsonl"
    rows = [{"text": "Apollo program", "value": "x"},
            {"text": "The Apollo program was the third United States human spaceflight program",
             "value": "y"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    # short items matched whole off: both untestable
    s = decontaminate(wiki_index, "squad_completion", tmp_path / "out", short_min_words=0,
                      data_files={"squad_completion": {"validation": path}}, quiet=True)
    counts = s["tasks"]["squad_completion"]["validation"]
    cont = _read(tmp_path / "out", "squad_completion", "validation", "contamination")
    assert cont["testable"].tolist() == [False, False]
    assert cont["status"].tolist() == ["untestable", "untestable"]
    assert counts["untestable_docs"] == 2
    rep = json.loads((tmp_path / "out" / "squad_completion" / "validation" / "report.json").read_text())
    assert rep["untestable_doc_ids"] == [0, 1]
    assert "untestable" in (tmp_path / "out" / "squad_completion" / "validation" / "report.md").read_text()
    # on (the default), matched whole from the index's text store: the article "Apollo program"
    # holds "The Apollo program, also known as Project Apollo, was the third United States human
    # spaceflight program", so the 12-word sentence is not one run of it (clean) and its first 11
    # words are; the 2-word query stays untestable
    rows.append({"text": "The Apollo program, also known as Project Apollo, was the third", "value": "z"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    s = decontaminate(wiki_index, "squad_completion", tmp_path / "on",
                      data_files={"squad_completion": {"validation": path}}, quiet=True)
    counts = s["tasks"]["squad_completion"]["validation"]
    cont = _read(tmp_path / "on", "squad_completion", "validation", "contamination")
    assert cont["testable"].tolist() == [False, True, True]
    assert cont["status"].tolist() == ["untestable", "clean", "dirty"]
    assert counts["untestable_docs"] == 1 and counts["short_whole_docs"] == 2
    assert cont["matched_doc_refs"][2].tolist() == ["Apollo program"]


def test_bad_inputs(wiki_index, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("only a sentence\tand a question\n")
    with pytest.raises(InputError, match="expected 5"):
        decontaminate(wiki_index, "mc_taco", tmp_path / "o", data_files={"mc_taco": {"test": bad}},
                      quiet=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        decontaminate(wiki_index, "squad_completion", tmp_path / "o",
                      data_files={"squad_completion": {"validation": empty}}, quiet=True)
    with pytest.raises(ConfigError, match="rule"):
        decontaminate(wiki_index, "mc_taco", tmp_path / "o", rule="fraction>0.5", quiet=True)
    with pytest.raises(ConfigError, match="--ngram"):
        decontaminate(wiki_index, "mc_taco", tmp_path / "o", ngram="big",
                      data_files={"mc_taco": {"test": bad}}, quiet=True)
    with pytest.raises(ConfigError, match="TASK:SPLIT=PATH"):
        parse_data_files(["test=x.tsv"], ["mc_taco", "squad_completion"])
    with pytest.raises(ConfigError, match="TASK:SPLIT=PATH"):  # the split is always named
        parse_data_files(["test=x.tsv"], ["mc_taco"])
    assert parse_data_files(["mc_taco:test=x.tsv"], ["mc_taco"]) == {"mc_taco": {"test": "x.tsv"}}
    from tcqa_data.errors import TcqaError

    with pytest.raises(TcqaError, match="no index"):
        decontaminate(tmp_path, "mc_taco", tmp_path / "o", quiet=True)


def test_cli(wiki_index, mc_taco_dev, tmp_path):
    from typer.testing import CliRunner

    from tcqa_data.cli import app

    runner = CliRunner()
    out = tmp_path / "cli"
    res = runner.invoke(app, ["decontaminate", str(wiki_index), "--tasks", "mc_taco", "--out", str(out),
                              "--data-files", f"mc_taco:validation={mc_taco_dev}",
                              "--rule", "any-ngram|minhash>=0.9", "--max-corpus-freq", "50"])
    assert res.exit_code == 0, res.output
    assert re.search(r"mc_taco/validation: \d+/561 groups dirty", res.output)
    man = json.loads((out / "prep_manifest.json").read_text())
    assert man["rule"] == "any-ngram|minhash>=0.9" and man["max_corpus_freq"] == 50
    cont = _read(out, "mc_taco", "validation", "contamination")
    sims = cont["minhash_sim"].dropna()  # null where MinHash found no candidate
    assert len(sims) and ((sims >= 0) & (sims <= 1)).all()


def test_a_new_benchmark_is_a_yaml_file(wiki_index, squad_validation, tmp_path):
    """A task given as a YAML path (no code), data keyed by its task name, a custom query."""
    from tcqa_data.prep.taskspec import TaskSpec

    raw = TaskSpec.resolve("squad_completion").to_dict()
    raw.update(task="my_squad", doc_to_decontamination_query="{{question}} {{context}}",
               attribution_fields=[])
    spec_path = tmp_path / "my_squad.yaml"
    spec_path.write_text(TaskSpec.from_dict(raw).to_yaml())
    rows = squad_validation.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(r) for r in rows]
    pick = ([r for r in recs if r["title"] == "Apollo_program"][:3]
            + [r for r in recs if r["title"] == "Kenya"][:3])
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in pick))
    out = tmp_path / "out"
    decontaminate(wiki_index, [str(spec_path)], out, data_files={"my_squad": {"validation": data}},
                  quiet=True)
    cont = _read(out, "my_squad", "validation", "contamination")
    assert cont["query"][0].startswith(pick[0]["question"])
    assert cont["field_names"][0].tolist() == ["question", "context"]
    assert cont["dirty"].tolist()[:3] == [True, True, True]
    assert TaskSpec.from_yaml(out / "my_squad" / "task.yaml").doc_to_decontamination_query == \
        "{{question}} {{context}}"


def test_portable_ref_rewrites_the_longest_input_path_prefix(tmp_path):
    """Corpus doc refs ``<input path>:<line>`` become ``<file name>:<line>``: the longest input path
    that starts the ref wins (paths may hold colons, and one input's path + ':' may start another's),
    and refs from an id field are left alone."""
    from tcqa_data.prep.doc_refs import portable_ref

    paths = ["/data/a.jsonl", "/data/a.jsonl:v2/b.jsonl", "c:d/e.jsonl", "hf://org/set/cfg:train"]
    (tmp_path / "manifest.json").write_text(json.dumps({"inputs": [{"path": p} for p in paths]}))
    fix = portable_ref(tmp_path)
    assert fix("/data/a.jsonl:12") == "a.jsonl:12"
    assert fix("/data/a.jsonl:v2/b.jsonl:7") == "b.jsonl:7"  # not "a.jsonl:v2/b.jsonl:7"
    assert fix("c:d/e.jsonl:3") == "e.jsonl:3"
    assert fix("hf://org/set/cfg:train:41") == "hf://org/set/cfg:train:41"  # hub ids are portable as they are
    for ref in ("Apollo program", "title: with colon", "/data/a.jsonl", "", None):
        assert fix(ref) == ref


def test_the_index_is_opened_once_for_every_split(wiki_index, mc_taco_dev, tmp_path, monkeypatch):
    """decontaminate opens INDEX_DIR once (``IndexEvidence``): the n-gram index, the MinHash
    index and the text store's anchors once for the run, whatever its splits, and a second
    run's handle gives the same files."""
    from tcqa_data.decontam.minhash import MinHashIndex
    from tcqa_data.decontam.ngrams.index import NgramIndex
    from tcqa_data.decontam.textstore.anchor_index import AnchorIndex

    rows = tmp_path / "dev.tsv"
    rows.write_text("".join(mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)[:150]),
                    encoding="utf-8")
    opened: list[str] = []
    for cls, name in ((NgramIndex, "open"), (MinHashIndex, "open")):
        real = getattr(cls, name).__func__
        monkeypatch.setattr(cls, name, classmethod(lambda c, *a, _r=real, **kw: opened.append(c.__name__)
                                                   or _r(c, *a, **kw)))
    real_init = AnchorIndex.__init__
    monkeypatch.setattr(AnchorIndex, "__init__", lambda self, *a: opened.append("AnchorIndex")
                        or real_init(self, *a))
    files = {"mc_taco": {"validation": rows, "test": rows}}
    decontaminate(wiki_index, "mc_taco", tmp_path / "out", data_files=files, rule="minhash>=0.8|aligned>=0.5",
                  quiet=True)
    assert sorted(opened) == ["AnchorIndex", "MinHashIndex", "NgramIndex"]
    one = _read(tmp_path / "out", "mc_taco", "validation", "contamination")
    assert one.equals(_read(tmp_path / "out", "mc_taco", "test", "contamination"))
