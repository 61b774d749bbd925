"""tcqa_data.outputs: which names may become folders, paths that cannot lead out, model folder names,
folders committed whole, and the checksums of the code a folder ships."""

from __future__ import annotations

import os
import re

import pytest

from tcqa_data import outputs
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.outputs import (
    STAGING_PREFIX,
    check_name,
    code_changes,
    code_digests,
    name_problem,
    relative_inside,
    resolve_inside,
    safe_model_dirname,
    staged,
)

BAD_NAMES = ["../../escaped", "..", ".", "", "   ", "/abs/path", "a/b", "a\\b", "C:\\x", "C:x", "x\x00y",
             "é" * 128]
GOOD_NAMES = ["test", "validation", "tcqa_test_pick", "a..b", "dev.v2", "...", "train[:10%]", "é" * 127]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_that_could_leave_or_break_a_folder_are_refused(name):
    assert name_problem(name) is not None
    with pytest.raises(ConfigError) as ei:
        check_name(name, "split name", "--data-files")
    msg = str(ei.value)
    assert "\n" not in msg and f"split name {name!r} from --data-files is not a valid folder name" in msg


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_plain_folder_names_pass(name):
    assert name_problem(name) is None and check_name(name, "task name", "x") == name


def test_non_string_names_are_refused():
    assert "not a string" in name_problem(3)
    assert "not a string" in name_problem(None)


def test_resolve_inside_returns_the_plain_join_and_refuses_what_leads_out(tmp_path):
    root = tmp_path / "out"
    (root / "task").mkdir(parents=True)
    # the plain join, not the resolved path: paths print and are recorded as given
    assert resolve_inside(root, "task", "test") == root / "task" / "test"
    assert resolve_inside(root) == root
    for parts in (("..", "x"), ("task", "..", "..", "x"), (str(tmp_path / "elsewhere"),)):
        with pytest.raises(TcqaError, match="leads outside the output folder"):
            resolve_inside(root, *parts, what="split folder")
    # a link inside the folder that points out of it is refused as well
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "link")
    with pytest.raises(TcqaError, match="split folder 'link/test' leads outside"):
        resolve_inside(root, "link", "test", what="split folder")


def test_relative_inside_takes_only_relative_paths_inside(tmp_path):
    root = tmp_path / "prep"
    (root / "t" / "s" / "lm_eval").mkdir(parents=True)
    assert relative_inside(root, "t/s/lm_eval", "include_path") == root / "t/s/lm_eval"
    for bad in (str(tmp_path), "/etc", "../prep/t", "t/../../x", "C:\\x", "", None, 3):
        with pytest.raises(TcqaError, match="include_path") as ei:
            relative_inside(root, bad, "include_path")
        assert "\n" not in str(ei.value)
    os.symlink(tmp_path, root / "up")
    with pytest.raises(TcqaError, match="leads outside"):
        relative_inside(root, "up/other", "include_path")


def _old_default_name(model_name: str) -> str:
    """eval.runner.default_output's folder name before tcqa_data.outputs (kept for ordinary names)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("_") or "model"


def test_model_folder_names_are_one_safe_folder_and_unchanged_for_ordinary_names():
    for name in ("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M", "smollm2-135m-gguf", "model.Q4_1",
                 "my model (v2)", "org/name", "a..b", "", "___"):
        assert safe_model_dirname(name) == _old_default_name(name), name
    assert safe_model_dirname("..") == "model" and safe_model_dirname(".") == "model"
    assert safe_model_dirname("/abs/path") == "abs_path"
    assert safe_model_dirname("../..") == ".._.."  # one folder name, not a path: no separator left
    long_a, long_b = "m" * 300 + "a", "m" * 300 + "b"
    assert len(safe_model_dirname(long_a)) <= outputs.MAX_NAME_BYTES
    assert safe_model_dirname(long_a) != safe_model_dirname(long_b)
    assert safe_model_dirname(long_a) == safe_model_dirname(long_a)
    for name in ("..", ".", "/abs/path", "../..", "org/name", long_a, "x\x00y", "C:\\models\\m"):
        assert name_problem(safe_model_dirname(name)) is None, name


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "two-renames"])
def test_staged_folder_replaces_the_previous_one_whole(tmp_path, monkeypatch, exchange):
    if not exchange:  # the path taken where the kernel or file system cannot exchange two folders
        monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    final = tmp_path / "prep" / "task" / "test"
    with staged(final) as stage:  # a first commit: nothing to replace
        assert stage.parent == final.parent and stage.name.startswith(STAGING_PREFIX)
        (stage / "full.parquet").write_bytes(b"first")
        (stage / "old_only.txt").write_text("stale")
        assert not final.exists()  # nothing visible before the commit
    assert _tree(final) == {"full.parquet": b"first", "old_only.txt": b"stale"}
    with staged(final) as stage:
        (stage / "full.parquet").write_bytes(b"second")
        (stage / "lm_eval").mkdir()
        (stage / "lm_eval" / "x.py").write_text("pass\n")
        assert _tree(final)["full.parquet"] == b"first"  # the previous output, until the commit
    assert _tree(final) == {"full.parquet": b"second", "lm_eval/x.py": b"pass\n"}
    assert sorted(p.name for p in final.parent.iterdir()) == ["test"]  # no staging or retired folder left


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "two-renames"])
def test_staging_folder_in_an_outer_folder(tmp_path, monkeypatch, exchange):
    """``within``: the staging folder sits in the output folder, not among the final folder's siblings."""
    if not exchange:
        monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    out = tmp_path / "prep"
    final = out / "task" / "test"
    for content in (b"first", b"second"):
        with staged(final, within=out) as stage:
            assert stage.parent == out and stage.name.startswith(STAGING_PREFIX)
            (stage / "full.parquet").write_bytes(content)
            assert sorted(p.name for p in out.iterdir()) == sorted(["task", stage.name])
        assert _tree(out) == {"task/test/full.parquet": content}
    assert sorted(p.name for p in out.iterdir()) == ["task"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failed_run_leaves_the_previous_folder_as_it_was(tmp_path, exc):
    final = tmp_path / "out" / "test"
    final.mkdir(parents=True)
    (final / "full.parquet").write_bytes(b"good")
    with pytest.raises(type(exc)), staged(final) as stage:
        (stage / "full.parquet").write_bytes(b"half")
        raise exc
    assert _tree(final) == {"full.parquet": b"good"}
    assert sorted(p.name for p in final.parent.iterdir()) == ["test"]


def test_a_file_where_the_folder_goes_is_refused_before_writing(tmp_path):
    final = tmp_path / "test"
    final.write_text("a file")
    with pytest.raises(TcqaError, match="exists and is not a folder"), staged(final):
        pytest.fail("the body must not run")
    assert final.read_text() == "a file" and sorted(p.name for p in tmp_path.iterdir()) == ["test"]


def test_code_digests_name_every_changed_missing_or_added_file(tmp_path):
    d = tmp_path / "lm_eval"
    d.mkdir()
    (d / "tcqa_dataset.py").write_text("x = 1\n")
    (d / "task.yaml").write_text("task: t\n")
    (d / "data.parquet").write_bytes(b"not code")
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "tcqa_dataset.cpython-311.pyc").write_bytes(b"\0")
    recorded = code_digests(d)
    assert sorted(recorded) == ["task.yaml", "tcqa_dataset.py"]
    assert code_changes(d, recorded) == []
    (d / "tcqa_dataset.py").write_text("x = 2\n")
    (d / "task.yaml").unlink()
    (d / "helper.py").write_text("import os\n")
    assert code_changes(d, recorded) == ["helper.py was added", "task.yaml is missing",
                                         "tcqa_dataset.py was modified"]


# ---- one writer, whole folders (issue 30) ------------------------------------------------------
def test_a_second_writer_is_refused_with_the_holders_pid_until_it_lets_go(tmp_path):
    from tcqa_data.outputs import output_lock

    out = tmp_path / "out"
    with output_lock(out, "cmd"):
        holder = rf"being written by another tcqa-data process \(pid {os.getpid()}"
        with pytest.raises(TcqaError, match=holder):
            with output_lock(out, "cmd"):
                pass
    with output_lock(out, "cmd"):  # released
        pass
    assert not out.exists()  # the lock lives beside the folder, never in it


def test_staged_output_commits_whole_keeps_what_it_did_not_write_and_fails_clean(tmp_path):
    from tcqa_data.outputs import staged_output

    out = tmp_path / "prep"
    with staged_output(out, "cmd") as stage:  # cmd's own folder (its owner marker)
        (stage / "eval").mkdir()
        (stage / "eval" / "kept.txt").write_text("kept")
        (stage / "task.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with staged_output(out, "cmd") as stage:
            (stage / "task.txt").write_text("half")
            raise RuntimeError("failed midway")
    assert (out / "task.txt").read_text() == "old"
    with staged_output(out, "cmd") as stage:
        (stage / "task.txt").write_text("new")
    assert (out / "task.txt").read_text() == "new" and (out / "eval" / "kept.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prep"]


def test_stale_staging_of_this_output_only_is_removed(tmp_path):
    from tcqa_data.outputs import STAGING_PREFIX, next_generation_dir, remove_stale_staging

    out = tmp_path / "idx"
    stale = [tmp_path / f"{STAGING_PREFIX}idx-123-0123abcd", next_generation_dir(out)]
    others = [tmp_path / f"{STAGING_PREFIX}idx-2-456-0123abcd", tmp_path / "idx-123-0123abcd"]
    for p in stale + others:
        p.mkdir()
    remove_stale_staging(out, keep=None)
    assert [p.exists() for p in stale] == [False, False]
    assert all(p.exists() for p in others)  # idx-2's staging is not idx's


def test_an_output_apart_from_what_it_reads(tmp_path):
    from tcqa_data.outputs import check_apart

    index = tmp_path / "idx"
    index.mkdir()
    for out in (index, index / "prep", tmp_path):
        with pytest.raises(TcqaError, match="outside it"):
            check_apart(out, index, "index", "--out")
    check_apart(tmp_path / "prep", index, "index", "--out")
