"""Every output is owned, and no link is followed into what it does not own (issue 40, item 2).

The probe's cases on real data (12 wiki articles, MC-TACO dev rows): a link planted at a lock, at
an index's next generation or at a default output folder; a command pointed at another command's
folder or at someone's files (directly and through a symlinked ``--out``); task and split names
that collide with PREP_DIR's own files; a rerun into a PREP_DIR that held other tasks. Each is one
``Error:`` line, nothing lost, nothing written or followed outside.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from test_faults import assert_one_line_error, cli, make_corpus, make_index_a, snapshot

from tcqa_data.errors import TcqaError
from tcqa_data.outputs import (
    OWNER_MARKER,
    check_name,
    lock_path,
    next_generation_dir,
    output_lock,
    read_owner,
    staged_output,
)

BUILTIN_TASKS = Path(__file__).resolve().parents[1] / "tcqa_data" / "prep" / "tasks"

CLI_BUILD = ["--num-buckets", "8", "--workers", "1", "-q"]


@pytest.fixture(scope="module")
def corpus(wiki_sample, tmp_path_factory) -> dict[str, Path]:
    return make_corpus(wiki_sample, tmp_path_factory.mktemp("own"))


@pytest.fixture(scope="module")
def index_a(corpus) -> Path:
    return make_index_a(corpus)


@pytest.fixture(scope="module")
def bench(mc_taco_dev, tmp_path_factory) -> dict[str, Path]:
    """MC-TACO dev rows: 40 and 60 (two different runs)."""
    root = tmp_path_factory.mktemp("own_bench")
    rows = mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)
    out = {"mc40": root / "mc40.tsv", "mc60": root / "mc60.tsv"}
    out["mc40"].write_text("".join(rows[:40]), encoding="utf-8")
    out["mc60"].write_text("".join(rows[:60]), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def kept_prep(index_a, bench, tmp_path_factory) -> Path:
    """A PREP_DIR (MC-TACO, 40 rows) that refused runs must leave as it is."""
    from tcqa_data.prep.pipeline import decontaminate

    prep = tmp_path_factory.mktemp("kept") / "prep"
    decontaminate(index_a, ["mc_taco"], prep, data_files={"mc_taco": {"validation": bench["mc40"]}},
                  quiet=True)
    return prep


def prep_args(index: Path, out: Path, mc: Path, task: str | Path = "mc_taco") -> list:
    return ["decontaminate", index, "--tasks", task, "--data-files", f"{task}:validation={mc}", "--out", out,
            "-q"]


def purify_args(corpus: dict[str, Path], mc: Path, out: Path) -> list:
    return ["purify", corpus["a"], "--tasks", "mc_taco", "--data-files", f"mc_taco:validation={mc}",
            "--out", out, "-q"]


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---- links where tcqa-data expects its own files -------------------------------------------------
@pytest.mark.parametrize("command", ["index-corpus", "decontaminate", "purify"])
def test_a_link_at_the_lock_is_refused_and_its_target_untouched(command, corpus, index_a, bench, tmp_path,
                                                                monkeypatch, capsys):
    victim, dangling = tmp_path / "victim.txt", tmp_path / "created.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    args = {"index-corpus": ["index-corpus", corpus["a"], "--out", out, *CLI_BUILD],
            "decontaminate": prep_args(index_a, out, bench["mc40"]),
            "purify": purify_args(corpus, bench["mc40"], out)}[command]
    for target in (victim, dangling):
        lock_path(out).symlink_to(target)
        code, err = cli(args, monkeypatch, capsys)
        assert_one_line_error(code, err, str(lock_path(out)), "symbolic link")
        lock_path(out).unlink()
    assert victim.read_text() == "precious\n" and not dangling.exists()
    assert listing(tmp_path) == ["victim.txt"]  # no output, no staging, no lock


def test_a_lock_file_that_is_someone_s_file_is_not_truncated(tmp_path):
    out = tmp_path / "out"
    mine = tmp_path / "mine.txt"
    mine.write_text("my notes\n")
    os.link(mine, lock_path(out))  # a hard link: the same file under the lock's name
    with pytest.raises(TcqaError, match="hard links"):
        with output_lock(out, "test"):
            pass
    os.unlink(lock_path(out))
    lock_path(out).write_text("not a pid, my data\n")
    with pytest.raises(TcqaError, match="other data than a lock"):
        with output_lock(out, "test"):
            pass
    assert mine.read_text() == "my notes\n" and lock_path(out).read_text() == "not a pid, my data\n"


def test_a_link_at_the_next_generation_is_refused_and_the_index_kept(corpus, index_a, tmp_path, monkeypatch,
                                                                      capsys):
    """The probe: index-corpus --append wrote the new generation into the link's target, replaced
    the index with a link to it, and --verify passed."""
    import shutil

    idx, elsewhere = tmp_path / "idx", tmp_path / "elsewhere"
    shutil.copytree(index_a, idx)
    elsewhere.mkdir()
    before = snapshot(idx)
    next_generation_dir(idx).symlink_to(elsewhere)
    code, err = cli(["index-corpus", corpus["b"], "--out", idx, "--append", *CLI_BUILD], monkeypatch, capsys)
    assert_one_line_error(code, err, str(next_generation_dir(idx)), "symbolic link")
    assert not idx.is_symlink() and snapshot(idx) == before and listing(elsewhere) == []
    next_generation_dir(idx).unlink()
    code, err = cli(["index-corpus", corpus["b"], "--out", idx, "--append", *CLI_BUILD], monkeypatch, capsys)
    assert code == 0, err
    assert read_owner(idx) == {"command": "index-corpus", "format": "tcqa-index/1"}
    code, err = cli(["index-info", idx, "--verify"], monkeypatch, capsys)
    assert code == 0, err  # the marker is no extra file of the sealed index


def test_a_link_at_a_default_output_folder_is_refused(tmp_path):
    """RESULTS/analysis and PREP_DIR/eval/<model>: folders the command names itself, which a link
    planted there once led outside (and replaced a mode-700 folder with a mode-755 one)."""
    from tcqa_data.eval.runner import OutputClaim, default_output

    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (outside / "private.txt").write_text("mine")
    results = tmp_path / "results"
    results.mkdir()
    (results / "analysis").symlink_to(outside)
    with pytest.raises(TcqaError, match="symbolic link"):
        with staged_output(results / "analysis", "analyze", follow_link=False):
            pass
    prep = tmp_path / "prep"
    (prep / "eval").mkdir(parents=True)
    default_output(prep, "org/model").symlink_to(outside)
    with OutputClaim(None, prep) as claim, pytest.raises(TcqaError, match="symbolic link"):
        claim(default_output(prep, "org/model"))
    (prep / "eval").rename(prep / "eval.old")
    (prep / "eval").symlink_to(outside)  # PREP_DIR/eval itself: checked before the model loads
    with pytest.raises(TcqaError, match="symbolic link"):
        OutputClaim(None, prep).__enter__()
    assert listing(outside) == ["private.txt"] and stat.S_IMODE(outside.stat().st_mode) == 0o700


@pytest.mark.parametrize("planted", ["foreign folder", "link"])
def test_evaluate_default_folder_is_checked_before_the_model_loads(kept_prep, tmp_path, monkeypatch, capsys,
                                                                  planted):
    """PREP_DIR/eval/<model> was claimed only once the model had loaded (its name came from the loaded
    model): minutes of loading before a refusal. The name comes from the --model argument now."""
    import tcqa_data.eval.runner as runner
    from tcqa_data.eval.models import model_name

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before its output folder was checked")

    monkeypatch.setattr(runner, "load_model", no_load)
    model = tmp_path / "models" / "org-model-7b"
    model.mkdir(parents=True)
    prep = tmp_path / "prep"
    shutil.copytree(kept_prep, prep)
    (prep / "eval").mkdir(exist_ok=True)
    default = runner.default_output(prep, model_name(str(model)))
    assert default == prep / "eval" / "org-model-7b"
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (outside / "private.txt").write_text("mine")
    if planted == "link":
        default.symlink_to(outside)
    else:
        default.mkdir()
        (default / "notes.txt").write_text("someone's")
    before = snapshot(tmp_path)
    code, err = cli(["evaluate", prep, "--model", model, "--device", "cpu", "-q"], monkeypatch, capsys)
    assert_one_line_error(code, err, str(default), "symbolic link" if planted == "link" else "notes.txt")
    assert snapshot(tmp_path) == before and stat.S_IMODE(outside.stat().st_mode) == 0o700


def test_a_replaced_folder_keeps_its_mode(tmp_path):
    out = tmp_path / "out"
    with staged_output(out, "analyze") as stage:
        (stage / "analysis.json").write_text("{}")
    out.chmod(0o700)
    with staged_output(out, "analyze") as stage:
        (stage / "analysis.json").write_text('{"n": 2}')
    assert stat.S_IMODE(out.stat().st_mode) == 0o700 and (out / "analysis.json").read_text() == '{"n": 2}'


# ---- a command writes only into what it wrote ----------------------------------------------------
def test_purify_never_replaces_someone_else_s_folder(corpus, bench, tmp_path, monkeypatch, capsys):
    """The probe: purify --out DIR deleted the folder's files, through a symlinked --out too."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "link").symlink_to(mine)
    before = snapshot(tmp_path)
    for out in (mine, tmp_path / "link"):
        code, err = cli(purify_args(corpus, bench["mc40"], out), monkeypatch, capsys)
        assert_one_line_error(code, err, "thesis.tex", "was not written by purify")
    assert snapshot(tmp_path) == before and listing(tmp_path) == ["link", "mine"]
    # its own output, through the link: replaced (the link stays, the target is written)
    (mine / "thesis.tex").unlink()
    code, err = cli(purify_args(corpus, bench["mc40"], tmp_path / "link"), monkeypatch, capsys)
    assert code == 0, err
    assert (tmp_path / "link").is_symlink() and read_owner(mine)["command"] == "purify"
    code, err = cli(purify_args(corpus, bench["mc60"], tmp_path / "link"), monkeypatch, capsys)
    assert code == 0, err
    assert listing(tmp_path) == ["link", "mine"]  # no work area, no lock, no staging left


def test_commands_never_write_into_each_other_s_folders(corpus, index_a, bench, tmp_path, monkeypatch,
                                                        capsys):
    """decontaminate --out INDEX_DIR merged a PREP_DIR into the index, and the --overwrite the
    error suggested then destroyed it; the reverse too."""
    import shutil

    other_index, prep = tmp_path / "idx2", tmp_path / "prep"
    shutil.copytree(index_a, other_index)
    code, err = cli(prep_args(index_a, prep, bench["mc40"]), monkeypatch, capsys)
    assert code == 0, err
    assert read_owner(prep) == {"command": "decontaminate", "format": "tcqa-prep-dir/1"}
    before = snapshot(tmp_path)
    code, err = cli(prep_args(index_a, other_index, bench["mc40"]), monkeypatch, capsys)
    assert_one_line_error(code, err, "holds the output of `index-corpus`")
    for extra in ([], ["--overwrite"]):
        code, err = cli(["index-corpus", corpus["a"], "--out", prep, *CLI_BUILD, *extra], monkeypatch, capsys)
        assert_one_line_error(code, err, "holds the output of `decontaminate`")
    assert snapshot(tmp_path) == before
    # an output of this version written before the marker is its command's own (migration)
    (prep / OWNER_MARKER).unlink()
    code, err = cli(prep_args(index_a, prep, bench["mc60"]), monkeypatch, capsys)
    assert code == 0, err
    assert read_owner(prep)["command"] == "decontaminate"


def test_a_rerun_replaces_the_prep_dir_whole(index_a, bench, tmp_path, monkeypatch, capsys):
    """The probe: a rerun kept the earlier run's task folders (another corpus) while the manifest
    and summary listed only the new run, and evaluate then scored the stale task."""
    text = (BUILTIN_TASKS / "mc_taco.yaml").read_text(encoding="utf-8")
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("\ntask: mc_taco\n", "\ntask: mc_taco_other\n"), encoding="utf-8")
    prep = tmp_path / "prep"
    code, err = cli(prep_args(index_a, prep, bench["mc40"], other), monkeypatch, capsys)
    assert code == 0, err
    assert (prep / "mc_taco_other").is_dir()
    code, err = cli(prep_args(index_a, prep, bench["mc60"]), monkeypatch, capsys)
    assert code == 0, err
    manifest = json.loads((prep / "prep_manifest.json").read_text())
    tasks = sorted(p.name for p in prep.iterdir() if (p / "task.yaml").is_file())
    assert tasks == sorted(manifest["tasks"]) == ["mc_taco"]


# ---- names that would collide with the folder's own files ----------------------------------------
@pytest.mark.parametrize("name, needle", [
    ("eval", "file the folder holds of its own"),
    ("prep_manifest.json", "file the folder holds of its own"),
    (".tcqa-staging-x", "starts with '.tcqa-'"),
    ("a" * 250, "longer than 255 bytes as part of the file name"),
    ("evil\u202egpj.py", "control character"),
])
def test_task_names_that_collide_or_mislead_are_refused(name, needle, index_a, bench, kept_prep, tmp_path,
                                                        monkeypatch, capsys):
    text = (BUILTIN_TASKS / "mc_taco.yaml").read_text(encoding="utf-8")
    spec = tmp_path / "task.yaml"
    spec.write_text(text.replace("\ntask: mc_taco\n", f"\ntask: {json.dumps(name)}\n"), encoding="utf-8")
    before = snapshot(kept_prep.parent)
    code, err = cli(prep_args(index_a, kept_prep, bench["mc40"], spec), monkeypatch, capsys)
    assert_one_line_error(code, err, "not a valid folder name", needle)
    assert snapshot(kept_prep.parent) == before


def test_split_names_that_collide_are_refused():
    from types import SimpleNamespace

    from tcqa_data.prep.pipeline import check_prep_names

    def job(task: str, split: str) -> SimpleNamespace:
        return SimpleNamespace(task=SimpleNamespace(task=task),
                               parts=[(SimpleNamespace(split=split), [], "test")])

    for split, needle in (("task.yaml", "of its own"), ("x\x1b[2J", "control character"),
                          ("b" * 200, "longer than 255")):
        with pytest.raises(TcqaError, match="not a valid folder name") as ei:
            check_prep_names([job("mc_taco", split)])
        assert needle in str(ei.value) and "\n" not in str(ei.value)
    check_prep_names([job("mc_taco", "validation")])
    # undecodable bytes of a file name (Python keeps them as lone surrogates)
    with pytest.raises(TcqaError, match="undecodable byte"):
        check_name(os.fsdecode(b"caf\xe9"), "split name", "--data-files")


def test_outputs_written_before_the_marker_are_recognised_by_their_own_files(tmp_path):
    """The migration: a folder of this version without a marker is its command's when it holds
    the file that command's format writes last; any other non-empty folder is refused by name."""
    from tcqa_data.outputs import ownership_problem, write_owner

    cases = {"index-corpus": "manifest.json", "decontaminate": "prep_manifest.json",
             "purify": "purify_report.json", "evaluate": "results.json", "analyze": "analysis.json"}
    for command, last in cases.items():
        folder = tmp_path / command
        folder.mkdir()
        (folder / last).write_text("{}")
        assert ownership_problem(folder, command) is None
        others = [c for c in cases if c != command and cases[c] != last]
        assert all("was not written by" in ownership_problem(folder, c) for c in others)
        write_owner(folder, command)
        assert all(f"holds the output of `{command}`" in ownership_problem(folder, c) for c in others)
    lm_eval = tmp_path / "lm_eval"
    (lm_eval / "org__model").mkdir(parents=True)
    (lm_eval / "org__model" / "results_2026-01-01T00-00-00.json").write_text("{}")
    assert ownership_problem(lm_eval, "evaluate --backend lm-eval") is None
    (lm_eval / "notes.txt").write_text("mine")
    assert "'notes.txt'" in ownership_problem(lm_eval, "evaluate --backend lm-eval")
    assert ownership_problem(tmp_path / "missing", "purify") is None
    (tmp_path / "empty").mkdir()
    assert ownership_problem(tmp_path / "empty", "purify") is None
