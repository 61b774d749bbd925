"""Nothing lost, nothing half-written (issue 30) for PREP_DIR, on real data: a failed or killed
decontaminate leaves the previous PREP_DIR byte for byte or the complete new one; bad task data and
output paths are one line; one writer at a time. Helpers and the small real index: test_faults.py.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest
from test_faults import assert_one_line_error, cli, make_corpus, make_index_a, run_cli, snapshot, spawn

from tcqa_data.outputs import output_lock


# ---- PREP_DIR: a failed or killed rerun leaves it as it was --------------------------------------
@pytest.fixture(scope="module")
def index_a(wiki_sample, tmp_path_factory) -> Path:
    """The small real index of test_faults.py (12 wiki articles, every file kind)."""
    return make_index_a(make_corpus(wiki_sample, tmp_path_factory.mktemp("prep_faults")))


@pytest.fixture(scope="module")
def bench(mc_taco_dev, squad_validation, tmp_path_factory) -> dict[str, Path]:
    """MC-TACO dev rows (40 and 60: two different runs), 20 based-squad rows, and the same 20 with one
    record missing its ``value`` field."""
    root = tmp_path_factory.mktemp("bench")
    rows = mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)
    out = {"mc40": root / "mc40.tsv", "mc60": root / "mc60.tsv", "squad": root / "squad.jsonl",
           "squad_bad": root / "squad_bad.jsonl"}
    out["mc40"].write_text("".join(rows[:40]), encoding="utf-8")
    out["mc60"].write_text("".join(rows[:60]), encoding="utf-8")
    recs = [json.loads(line) for line in squad_validation.read_text(encoding="utf-8").splitlines()[:20]]
    out["squad"].write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    del recs[7]["value"]
    out["squad_bad"].write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return out


def _prep_args(index: Path, out: Path, mc: Path, squad: Path | None = None) -> list:
    tasks = "mc_taco" + (",squad_completion" if squad else "")
    files = ["--data-files", f"mc_taco:validation={mc}"]
    if squad:
        files += ["--data-files", f"squad_completion:validation={squad}"]
    return ["decontaminate", index, "--tasks", tasks, *files, "--out", out, "-q"]


def test_failed_decontaminate_rerun_leaves_the_prep_dir_as_it_was(index_a, bench, tmp_path, monkeypatch,
                                                                   capsys):
    prep = tmp_path / "prep"
    code, err = cli(_prep_args(index_a, prep, bench["mc40"], bench["squad"]), monkeypatch, capsys)
    assert code == 0, err
    (prep / "eval").mkdir()  # an evaluate result inside PREP_DIR (its default place) is kept too
    (prep / "eval" / "kept.txt").write_text("results")
    before = snapshot(prep)
    # mc_taco changes (60 rows), squad's file is bad: the run fails after mc_taco is processed
    code, err = cli(_prep_args(index_a, prep, bench["mc60"], bench["squad_bad"]), monkeypatch, capsys)
    assert_one_line_error(code, err, "squad_bad.jsonl", "value")
    assert snapshot(prep) == before
    # the good rerun replaces it whole (issue 40): results of the previous data go with it
    code, err = cli(_prep_args(index_a, prep, bench["mc60"], bench["squad"]), monkeypatch, capsys)
    assert code == 0, err
    m = json.loads((prep / "prep_manifest.json").read_text())
    assert m["tasks"]["mc_taco"]["splits"]["validation"]["docs"] == 60
    assert not (prep / "eval").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tcqa-staging-")]


def test_decontaminate_killed_is_the_previous_prep_dir_or_the_new_one(index_a, bench, tmp_path):
    prep, ref = tmp_path / "prep", tmp_path / "ref"
    assert run_cli(_prep_args(index_a, prep, bench["mc40"])).returncode == 0
    t0 = time.time()
    assert run_cli(_prep_args(index_a, ref, bench["mc60"])).returncode == 0
    took = time.time() - t0
    before, after = snapshot(prep), snapshot(ref)
    assert before != after
    killed = run_cli(_prep_args(index_a, prep, bench["mc60"]), env={"TCQA_FAULT_AT": "output-commit"})
    assert killed.returncode == -signal.SIGKILL
    assert snapshot(prep) == before
    rng = random.Random(31)
    for _ in range(2):
        proc = spawn(_prep_args(index_a, prep, bench["mc60"]))
        time.sleep(rng.uniform(0.5, took))
        proc.kill()
        proc.communicate()
        assert snapshot(prep) in (before, after)
    assert run_cli(_prep_args(index_a, prep, bench["mc60"])).returncode == 0
    assert snapshot(prep) == after
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tcqa-staging-")]


# ---- task data and output paths -------------------------------------------------------------------
def test_bad_task_data_and_output_paths_are_one_line(index_a, bench, tmp_path, monkeypatch, capsys):
    rows = bench["mc40"].read_text(encoding="utf-8").splitlines(keepends=True)
    for label in ("2", "-1", "maybe"):
        bad = tmp_path / f"label{label}.tsv"
        fields = rows[5].rstrip("\n").split("\t")
        fields[3] = label
        bad.write_text("".join(rows[:5]) + "\t".join(fields) + "\n", encoding="utf-8")
        code, err = cli(_prep_args(index_a, tmp_path / "p", bad), monkeypatch, capsys)
        assert_one_line_error(code, err, f"{bad.name}:6", repr(label), "yes")
    code, err = cli(["decontaminate", index_a, "--tasks", "mc_taco", "--data-files",
                     f"mc_taco:tset={bench['mc40']}", "--out", tmp_path / "p", "-q"], monkeypatch, capsys)
    assert_one_line_error(code, err, "'tset'", "validation", "test")
    code, err = cli(_prep_args(index_a, tmp_path / "p", tmp_path), monkeypatch, capsys)
    assert_one_line_error(code, err, "is a folder")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):
        code, err = cli(_prep_args(index_a, out, bench["mc40"]), monkeypatch, capsys)
        assert_one_line_error(code, err, str(a_file))
        code, err = cli(["evaluate", tmp_path, "--model", "none", "--out", out], monkeypatch, capsys)
        assert_one_line_error(code, err, str(a_file))
    assert not (tmp_path / "p").exists()
    before = snapshot(index_a)
    for out in (index_a, index_a / "prep", index_a.parent):  # PREP_DIR is committed whole
        code, err = cli(_prep_args(index_a, out, bench["mc40"]), monkeypatch, capsys)
        assert_one_line_error(code, err, "the index", "outside it")
    assert snapshot(index_a) == before
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        code, err = cli(_prep_args(index_a, ro, bench["mc40"]), monkeypatch, capsys)
        assert_one_line_error(code, err, "permission denied")


def test_damage_that_keeps_the_size_and_breaks_a_read_is_found_by_name(index_a, bench, tmp_path, monkeypatch,
                                                                       capsys):
    """A byte flipped in an .npy header keeps the file's size (so opening the index passes) but
    breaks numpy's read: decontaminate's error is the full check's one line, not numpy's traceback."""
    copy = tmp_path / "idx"
    shutil.copytree(index_a, copy)
    victim = copy / "ngrams" / "n13" / "00003.keys.npy"
    data = bytearray(victim.read_bytes())
    data[20] ^= 0x55  # inside the header's dict literal
    victim.write_bytes(bytes(data))
    code, err = cli(_prep_args(copy, tmp_path / "prep", bench["mc40"]), monkeypatch, capsys)
    assert_one_line_error(code, err, str(victim), "checksum")
    assert not (tmp_path / "prep").exists()


def test_second_decontaminate_is_refused_naming_the_holder(index_a, bench, tmp_path, monkeypatch, capsys):
    prep = tmp_path / "prep"
    with output_lock(prep, "test"):
        code, err = cli(_prep_args(index_a, prep, bench["mc40"]), monkeypatch, capsys)
        assert_one_line_error(code, err, f"pid {os.getpid()}", str(prep))
    assert not prep.exists()
