"""`analyze` on a real prepared folder (real MC-TACO / SQuAD slices decontaminated against the real
wiki sample index), with per-doc outputs written by evaluate's own writer from seeded predictions
(no model here; tests/test_analysis_lm_eval.py runs a model and lm-eval itself).

Checked: sweeps against the reference metric functions on independently built doc subsets, the
rule's row against evaluate's table, Zn against a brute-force simulation, Llama 2's token share
against the evidence, deterministic outputs, and refusals of bad input with nothing written."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from analysis_fixtures import build_prep
from conftest import SHARED_DATA

from tcqa_data.analysis import analyze
from tcqa_data.analysis.llama2 import ZnReference
from tcqa_data.errors import TcqaError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.tables import task_metrics
from tcqa_data.prep.prepared import load_task

BOOT, SEED = 200, 7


@pytest.fixture(scope="module")
def prep(wiki_index, mc_taco_dev, squad_validation, tmp_path_factory):
    return build_prep(wiki_index, SHARED_DATA, tmp_path_factory.mktemp("analysis"))


def seeded_outputs(prep: Path, task: str) -> tuple[object, list[dict]]:
    """A deterministic 'model': right on 60% of clean docs and 85% of dirty ones."""
    data = load_task(prep, task, "validation")
    rng = np.random.default_rng(11)
    right = rng.random(len(data.docs)) < np.where(data.clean, 0.6, 0.85)
    if data.spec.output_type == "multiple_choice":
        out = []
        for d, r in zip(data.docs, right, strict=True):
            g = data.spec.target_index(d)
            out.append({"gold": g, "pred": g if r else 1 - g, "loglikelihoods": [0.0, 0.0],
                        "is_greedy": [bool(r), bool(r)]})
        return data, out
    return data, [{"generation": data.spec.target(d).strip() if r else "nothing",
                   "target": data.spec.target(d).strip(), "contains": int(r)}
                  for d, r in zip(data.docs, right, strict=True)]


def write_eval_dir(prep: Path, out: Path, tasks=("mc_taco", "squad_completion"), drop_docs=(),
                   clean_only: bool = False) -> Path:
    """An evaluate output folder written by evaluate's own writer (results.json, samples.jsonl)."""
    from tcqa_data.eval.results import write_outputs

    results = {"model": {"name": "seeded", "source": "seeded", "device": "cpu", "dtype": "float32"},
               "bootstrap": {"samples": BOOT, "seed": SEED}, "clean_only": clean_only, "tasks": {},
               "prep_dir": str(prep)}
    samples = []
    for task in tasks:
        data, per_doc = seeded_outputs(prep, task)
        entry = task_metrics(data.spec, data.docs, per_doc, data.clean, BOOT, SEED)
        entry.update({"split": data.split, "output_type": data.spec.output_type, "source": str(data.path)})
        results["tasks"][task] = entry
        for d, c, o in zip(data.docs, data.clean, per_doc, strict=True):
            if (task, int(d["doc_id"])) not in drop_docs:
                samples.append({"task": task, "doc_id": int(d["doc_id"]), "group_id": int(d["group_id"]),
                                "subset": "clean" if c else "dirty", **o})
    write_outputs(out, results, samples)
    return out


def write_lm_eval_samples(prep: Path, folder: Path, task: str = "mc_taco", name: str | None = None,
                          keep=None) -> Path:
    """A samples file in lm-eval 0.4's --log_samples format (responses logged as strings)."""
    data, per_doc = seeded_outputs(prep, task)
    name = name or f"tcqa_{task}_validation_full"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{name}_2026-01-01T00-00-00.000001.jsonl"
    lines = []
    for i, (d, o) in enumerate(zip(data.docs, per_doc, strict=True)):
        if keep is not None and not keep(i, d):
            continue
        doc = {k: v for k, v in d.items() if k not in ("doc_id", "group_id")}
        if data.spec.output_type == "multiple_choice":
            lls = [-1.0, -2.0] if o["pred"] == 0 else [-2.0, -1.0]
            resps = [[str(x), "False"] for x in lls]
            rec = {"doc_id": int(d["doc_id"]), "doc": doc, "target": str(o["gold"]),
                   "resps": [[r] for r in resps], "filtered_resps": resps, "filter": "none",
                   "acc": float(o["pred"] == o["gold"])}
        else:
            rec = {"doc_id": int(d["doc_id"]), "doc": doc, "target": o["target"],
                   "resps": [[o["generation"]]], "filtered_resps": [o["generation"]], "filter": "none"}
        lines.append(json.dumps(rec) + "\n")
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def eval_dir(prep, tmp_path_factory):
    return write_eval_dir(prep, tmp_path_factory.mktemp("eval") / "eval")


@pytest.fixture(scope="module")
def analysis(prep, eval_dir, tmp_path_factory):
    return analyze(prep, eval_dir, tmp_path_factory.mktemp("out") / "a")


def _unit_flags_reference(values, docs, threshold):
    """Group flags built independently: a group is flagged when any member's score >= threshold."""
    v = np.where(np.isfinite(values), values, -np.inf)
    flagged = {int(d["group_id"]) for d, x in zip(docs, v, strict=True) if x >= threshold}
    return np.asarray([int(d["group_id"]) in flagged for d in docs])


def _reference(metric, gold, pred, groups, mask, contains=None):
    if metric == M.LM_ACC:
        return M.accuracy(gold[mask], pred[mask])
    if metric == M.LM_F1:
        return M.pooled_f1(gold[mask], pred[mask])
    if metric == M.OFFICIAL_STRICT_ACC:
        return M.official_strict_acc(gold[mask] == 1, pred[mask] == 1, groups[mask])
    if metric == M.OFFICIAL_F1:
        return M.official_f1(gold[mask] == 1, pred[mask] == 1, groups[mask])
    return float(contains[mask].mean())


def test_sweeps_equal_reference_metrics_on_each_subset(prep, analysis):
    data, per_doc = seeded_outputs(prep, "mc_taco")
    gold = np.asarray([o["gold"] for o in per_doc])
    pred = np.asarray([o["pred"] for o in per_doc])
    groups = np.asarray([d["group_id"] for d in data.docs])
    cont = pq.read_table(data.path / "contamination.parquet")
    entry = analysis["tasks"]["mc_taco"]
    assert entry["docs"] == len(data.docs) and entry["groups"] == len(set(groups))
    checked = 0
    for score in ("longest_match", "ngram_fraction", "minhash_sim"):
        values = np.asarray(cont.column(score).to_numpy(zero_copy_only=False), dtype=float)
        sw = entry["sweeps"][score]
        assert len(sw["thresholds"]) >= (1 if score == "minhash_sim" else 2)
        for i, t in enumerate(sw["thresholds"]):
            above = _unit_flags_reference(values, data.docs, t)
            assert sw["flagged_docs"][i] == int(above.sum())
            for metric in entry["metrics"]:
                m = sw["metrics"][metric]
                full = _reference(metric, gold, pred, groups, np.ones(len(gold), bool))
                assert m["full"]["value"] == pytest.approx(full, abs=1e-12)
                if above.any():
                    assert m["above"][i]["value"] == pytest.approx(
                        _reference(metric, gold, pred, groups, above), abs=1e-12)
                if (~above).any():
                    below = _reference(metric, gold, pred, groups, ~above)
                    assert m["below"][i]["value"] == pytest.approx(below, abs=1e-12)
                    assert m["epg"][i]["value"] == pytest.approx(full - below, abs=1e-12)
                    lo, hi = m["epg"][i]["ci95"]
                    assert (lo <= hi) if lo is not None else "too few groups" in m["epg"][i]["note"]
                checked += 1
    assert checked > 20


def test_null_minhash_is_below_every_threshold(prep, analysis):
    cont = pq.read_table(prep / "mc_taco" / "validation" / "contamination.parquet")
    sim = np.asarray(cont.column("minhash_sim").to_numpy(zero_copy_only=False), dtype=float)
    no_candidate = ~np.isfinite(sim) | (sim < 0)
    assert no_candidate.any()
    sw = analysis["tasks"]["mc_taco"]["sweeps"]["minhash_sim"]
    # the lowest real similarity flags exactly the groups that have a candidate
    docs = load_task(prep, "mc_taco", "validation").docs
    t = min(x for x in sw["thresholds"] if x >= 0)
    assert sw["flagged_docs"][sw["thresholds"].index(t)] == int(
        _unit_flags_reference(np.where(no_candidate, np.nan, sim), docs, t).sum())


def test_rule_row_equals_evaluate_table_exactly(eval_dir, analysis):
    results = json.loads((eval_dir / "results.json").read_text())
    for task, entry in analysis["tasks"].items():
        ours = results["tasks"][task]
        table = entry["rule"]["table"]
        assert table["subsets"] == ours["subsets"]
        assert table["clean_minus_full"] == ours["clean_minus_full"]
        # the sweep at the rule's own threshold (any-ngram = ngram_hits >= 1) is the same split
        sw = entry["sweeps"]["ngram_hits"]
        assert sw["rule_thresholds"] == [1.0] and sw["reproduces_rule_split"] is True
        i = sw["thresholds"].index(1.0)
        for metric in entry["metrics"]:
            m = sw["metrics"][metric]
            assert m["above"][i] == ours["subsets"]["dirty"]["metrics"][metric]
            assert m["below"][i] == ours["subsets"]["clean"]["metrics"][metric]
            assert m["full"] == ours["subsets"]["full"]["metrics"][metric]
            assert m["epg"][i]["value"] == -ours["clean_minus_full"][metric]["value"]


def test_token_share_at_n_is_the_matched_word_share(prep, analysis):
    entry = analysis["tasks"]["mc_taco"]
    n = entry["llama2"]["ngram_n"]
    assert entry["llama2"]["L"][0] == n
    from tcqa_data.analysis.llama2 import token_shares

    cont = pq.read_table(prep / "mc_taco" / "validation" / "contamination.parquet")
    share = token_shares(cont, [n, 20], "janitor")
    matched = cont.column("matched_words").to_numpy() / cont.column("query_words").to_numpy()
    assert np.allclose(share[n], matched) and (share[n] > 0).any()
    longest = cont.column("longest_match").to_numpy()
    assert np.all(share[20][longest < 20] == 0) and np.all(share[20] <= share[n])
    # the four subsets partition the groups twice
    subs = {(s["L"], s["subset"]): s["groups"] for s in entry["llama2"]["subsets"]}
    for L in entry["llama2"]["L"]:
        assert subs[(L, "clean")] + subs[(L, "not_clean")] == entry["groups"]
        assert subs[(L, "not_dirty")] + subs[(L, "dirty")] == entry["groups"]


@pytest.mark.slow
def test_zn_reference_matches_brute_force_simulation(prep):
    """mu_n and sigma_n (exact and sampled) against drawing random subsets of n groups and scoring
    them with the reference metric functions."""
    data, per_doc = seeded_outputs(prep, "mc_taco")
    gold = np.asarray([o["gold"] for o in per_doc])
    pred = np.asarray([o["pred"] for o in per_doc])
    groups = np.asarray([d["group_id"] for d in data.docs])
    from tcqa_data.analysis.sweep import make_units

    u = make_units(groups)
    ref = ZnReference(u.n, samples=4000, seed=3)
    rng = np.random.default_rng(99)
    draws = 1500
    for metric, n in ((M.OFFICIAL_STRICT_ACC, 6), (M.OFFICIAL_F1, 10), (M.LM_ACC, 6), (M.LM_F1, 12)):
        stats = M.unit_stats(metric, gold, pred, u.units, u.n)
        mu, sigma, how = ref.mu_sigma(metric, stats, n)
        assert how == ("exact" if metric.startswith("official") else how) and sigma > 0
        if metric.startswith("lm_eval"):
            assert how.startswith("sampled")  # MC-TACO groups differ in size: a ratio, not a mean
        sims = []
        for _ in range(draws):
            pick = rng.choice(u.n, size=n, replace=False)
            mask = np.isin(u.units, pick)
            sims.append(_reference(metric, gold, pred, groups, mask))
        sims = np.asarray(sims)
        # Monte Carlo tolerance: 4 standard errors of the simulated mean and standard deviation
        assert mu == pytest.approx(sims.mean(), abs=4 * sims.std() / np.sqrt(draws))
        assert sigma == pytest.approx(sims.std(ddof=1), rel=4 / np.sqrt(2 * draws) + 0.02)


@pytest.mark.slow
def test_outputs_are_complete_and_deterministic(prep, eval_dir, analysis, tmp_path):
    out = Path(analysis["output_dir"])
    again = analyze(prep, eval_dir, tmp_path / "b")
    for name in ("analysis.json", "analysis.parquet", "report.md", "report.html"):
        # the reports' links are relative to where each lies: equal once those are taken out
        a, b = ((d / name).read_bytes() for d in (out, Path(again["output_dir"])))
        if name.startswith("report"):
            a, b = (re.sub(rb"href='[^']*'|\]\([^)]*\)", b"", x) for x in (a, b))
        assert a == b, name
    rows = pq.read_table(out / "analysis.parquet").to_pandas()
    assert {"rule", "sweep", "llama2"} <= set(rows.section)
    assert set(rows.task) == {"mc_taco", "squad_completion"}
    epg = rows[(rows.section == "sweep") & (rows.subset == "epg")]
    n_th = sum(len(s["thresholds"]) for s in analysis["tasks"]["mc_taco"]["sweeps"].values())
    assert len(epg[epg.task == "mc_taco"]) == n_th * 4
    md = (out / "report.md").read_text()
    assert "EPG at ngram_hits >= 1 (the rule's threshold)" in md and "Zn" in md
    # one plot per score's sweep, one of the sweeps' EPG curves per task, one of the clean / full table
    n_plots = sum(len(e["sweeps"]) + 1 for e in analysis["tasks"].values()) + 1
    assert (out / "report.html").read_text().count("<img") == n_plots


def test_report_opens_with_its_answer_and_links_resolve(prep, eval_dir, analysis):
    from tcqa_data.eval.results import verdict

    out = Path(analysis["output_dir"])
    page = (out / "report.html").read_text()
    first_screen = page[:page.index("<details")]
    # the answer before any folded detail: per task its verdict and table, and one plot
    for e in analysis["tasks"].values():
        assert html.escape(verdict(e["rule"]["table"], e["metrics"])) in first_screen
    assert first_screen.count("<table") == len(analysis["tasks"]) and first_screen.count("<img") == 1
    # relative links to the evaluation and to each prepared split's report, all resolving
    hrefs = re.findall(r"href='([^']+)'", page)
    assert hrefs and all(not h.startswith("/") and (out / h).resolve().is_file() for h in hrefs), hrefs
    targets = {(out / h).resolve() for h in hrefs}
    assert (eval_dir / "report.html").resolve() in targets
    assert (prep / "mc_taco" / "validation" / "report.html").resolve() in targets
    # the evaluation report links back to the prepared splits
    ev = re.findall(r"href='([^']+)'", (eval_dir / "report.html").read_text())
    assert ev and all((eval_dir / h).resolve().is_file() for h in ev), ev
    # every interval printed holds its estimate, or says why not
    md = (out / "report.md").read_text()
    for v, lo, hi, why in re.findall(r"([+-]?\d+\.\d+) \[([+-]?\d+\.\d+), ([+-]?\d+\.\d+)\]( \()?", md):
        assert float(lo) <= float(v) <= float(hi) or why, (v, lo, hi)
    assert "score thresholds" not in md or "Benjamini-Hochberg" in md
    # with 24 MC-TACO groups, of which few are dirty: values without intervals, and why
    assert "too few groups" in md


def test_lm_eval_samples_give_the_same_analysis(prep, analysis, tmp_path):
    files = tmp_path / "lm"
    write_lm_eval_samples(prep, files, "mc_taco")
    write_lm_eval_samples(prep, files, "squad_completion")
    theirs = analyze(prep, files, bootstrap=BOOT, seed=SEED, write=False)
    for task, entry in analysis["tasks"].items():
        a = {k: v for k, v in entry.items() if k != "source"}
        b = {k: v for k, v in theirs["tasks"][task].items() if k != "source"}
        assert a == b, task


# ---- bad input: one-line errors, nothing written ------------------------------------------------
def _refused(prep, results, out, match, **kw):
    with pytest.raises(TcqaError, match=match) as exc:
        analyze(prep, results, out, **kw)
    assert "\n" not in str(exc.value)
    assert not out.exists()


def test_missing_inputs_are_refused(prep, eval_dir, tmp_path):
    _refused(prep, tmp_path / "nope", tmp_path / "o", "do not exist")
    _refused(tmp_path / "noprep", eval_dir, tmp_path / "o", "does not exist")
    (tmp_path / "empty").mkdir()
    _refused(prep, tmp_path / "empty", tmp_path / "o", "neither an `evaluate` output folder")
    broken = write_eval_dir(prep, tmp_path / "broken", tasks=("mc_taco",))
    (broken / "samples.jsonl").write_text('{"task": "mc_taco", "doc_id": 0}\n{oops\n')
    _refused(prep, broken, tmp_path / "o", r"samples.jsonl:2: invalid JSON")


def test_partial_groups_and_other_data_are_refused(prep, tmp_path):
    # evaluate output missing one candidate of question group 0
    cut = write_eval_dir(prep, tmp_path / "cut", tasks=("mc_taco",), drop_docs={("mc_taco", 1)})
    _refused(prep, cut, tmp_path / "o", "question group 0 is partial")
    # an lm-eval --limit run
    limited = write_lm_eval_samples(prep, tmp_path / "lim", keep=lambda i, d: i < 20)
    _refused(prep, limited, tmp_path / "o", r"--limit run")
    # a cut group in the middle
    gap = write_lm_eval_samples(prep, tmp_path / "gap", keep=lambda i, d: i != 40)
    _refused(prep, gap, tmp_path / "o", "partial")
    # docs of another split/data under the same ids: the content check names the field
    other = write_lm_eval_samples(prep, tmp_path / "other", keep=lambda i, d: True)
    lines = other.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["doc"]["answer"] = "a different answer"
    lines[3] = json.dumps(rec)
    other.write_text("\n".join(lines) + "\n")
    _refused(prep, other, tmp_path / "o", r":4: doc_id 3: .* differs .*\(field 'answer'\)")
    # the same file appended twice
    twice = write_lm_eval_samples(prep, tmp_path / "twice")
    twice.write_text(twice.read_text() * 2)
    _refused(prep, twice, tmp_path / "o", "appears twice")


def test_samples_of_another_task_are_refused(prep, tmp_path):
    # squad docs under MC-TACO's exported task name
    wrong = write_lm_eval_samples(prep, tmp_path / "w", "squad_completion",
                                  name="tcqa_mc_taco_validation_full")
    _refused(prep, wrong, tmp_path / "o", "no field 'sentence'.*another task")
    unknown = write_lm_eval_samples(prep, tmp_path / "u", "mc_taco", name="hellaswag")
    _refused(prep, unknown, tmp_path / "o", "lm-eval task 'hellaswag', which is not prepared")
    # beside samples of a prepared task, the unknown one is left out and named, not fatal
    write_lm_eval_samples(prep, tmp_path / "u", "mc_taco")
    res = analyze(prep, tmp_path / "u", write=False)
    assert list(res["tasks"]) == ["mc_taco"] and list(res["skipped_samples"]) == [str(unknown)]
    clean = write_lm_eval_samples(prep, tmp_path / "c", "mc_taco", name="tcqa_mc_taco_validation_clean")
    _refused(prep, clean, tmp_path / "o", "samples of the clean split")
    clean_only = write_eval_dir(prep, tmp_path / "co", tasks=("mc_taco",), clean_only=True)
    _refused(prep, clean_only, tmp_path / "o", "--clean-only")


def test_empty_split_is_refused(prep, tmp_path):
    import shutil

    from tcqa_data.io_utils import write_parquet_atomic
    from tcqa_data.prep.prepared import data_digests

    empty = tmp_path / "prep"
    shutil.copytree(prep, empty)
    d = empty / "mc_taco" / "validation"
    for name in ("full", "clean", "dirty", "contamination"):
        t = pq.read_table(d / f"{name}.parquet")
        write_parquet_atomic(d / f"{name}.parquet", t.slice(0, 0))
    # as a decontaminate that found an empty split writes it: the data digests record these files
    manifest = json.loads((empty / "prep_manifest.json").read_text())
    manifest["data_sha256"] = data_digests(empty)
    (empty / "prep_manifest.json").write_text(json.dumps(manifest))
    samples = tmp_path / "s"
    samples.mkdir()
    (samples / "samples_tcqa_mc_taco_validation_full_2026-01-01T00-00-00.000001.jsonl").write_text("")
    _refused(empty, samples, tmp_path / "o", "holds no docs")


def test_input_vs_input_plus_label(prep, eval_dir, wiki_index, tmp_path):
    """SQuAD answers are spans of their passage: a passage found in the corpus carries its answer
    next to it. MC-TACO's candidate answers are not in its query; most are not beside it either."""
    res = analyze(prep, eval_dir, index_dir=wiki_index, write=False)
    squad = res["tasks"]["squad_completion"]["labels"]
    assert squad["label_fields"] == ["value"]
    dirty = int(pq.read_table(prep / "squad_completion" / "validation" / "contamination.parquet")
                .column("doc_dirty").to_numpy().sum())
    assert dirty > 0 and squad["docs_input_label"] + squad["docs_input"] == dirty
    assert squad["docs_input_label"] > 0
    mc = res["tasks"]["mc_taco"]["labels"]
    assert mc["label_fields"] == ["answer"]
    by = {s["subset"]: s for s in mc["subsets"]}
    assert sum(s["groups"] for s in by.values()) == res["tasks"]["mc_taco"]["groups"]
    assert by["input"]["groups"] + by["input+label"]["groups"] == \
        res["tasks"]["mc_taco"]["rule"]["table"]["subsets"]["dirty"]["groups"]
    # without the index the table is skipped with the reason, the rest still runs
    assert "skipped" in analyze(prep, eval_dir, write=False)["tasks"]["mc_taco"]["labels"]


def test_analyze_killed_or_failed_leaves_the_previous_analysis(prep, eval_dir, tmp_path):
    """The analysis folder is committed whole (outputs.staged_output): a run killed just before its
    commit (SIGKILL at the hook) leaves the previous folder byte for byte; the rerun replaces it."""
    import os
    import signal
    import subprocess
    import sys

    from test_faults import snapshot

    out = tmp_path / "a"
    args = [sys.executable, "-m", "tcqa_data", "analyze", str(prep), "--results", str(eval_dir), "--out",
            str(out), "-q"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    assert subprocess.run([*args, "--bootstrap", "50"], env=env, capture_output=True).returncode == 0
    before = snapshot(out)
    killed = subprocess.run([*args, "--bootstrap", "60"], env=dict(env, TCQA_FAULT_AT="output-commit"),
                            capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    assert snapshot(out) == before
    import random
    import time

    rng = random.Random(30)
    for _ in range(2):  # killed at seeded random times: the previous folder or the complete new one
        proc = subprocess.Popen([*args, "--bootstrap", "60"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 6.0))
        proc.kill()
        proc.wait()
        now = snapshot(out)
        assert now == before or (sorted(now) == sorted(before)
                                 and json.loads(now["analysis.json"])["bootstrap"]["samples"] == 60)
    assert subprocess.run([*args, "--bootstrap", "60"], env=env, capture_output=True).returncode == 0
    assert json.loads((out / "analysis.json").read_text())["bootstrap"]["samples"] == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
