"""A full disk is one line and costs nothing (issue 40, item 5): a real file system (a small tmpfs,
mounted here) filled to a seeded random level before each run of a writing command, so that the
run fails at a different point each time, or finishes. Either the new output is committed
whole, or the command fails with one ``Error:`` line naming the path, leaves the previous output
byte for byte, and leaves no staging folder, work area or lock behind.

A tmpfs is the real mechanism (ENOSPC from the kernel, at whatever write hits the limit), not a
simulated error; mounting needs root, which CI has (the suite runs as root there). Elsewhere the
test is skipped. Inputs live outside the small disk; the outputs, their staging and work areas on it.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from test_faults import cli, make_corpus, make_index_a, snapshot

CLI_BUILD = ["--num-buckets", "8", "--workers", "1", "-q"]
ROUNDS = 3  # fill levels per command (2 for those that load a model)


def _mount_tmpfs(mnt: Path) -> None:
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], capture_output=True).returncode == 0
    if not mounted:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: the full-disk test must mount its tmpfs")
        pytest.skip("mounting a tmpfs needs root")


@pytest.fixture
def disk(tmp_path_factory):
    """A small tmpfs of its own per test (files a test's readers still hold open would keep it busy)."""
    mnt = tmp_path_factory.mktemp("disk")
    _mount_tmpfs(mnt)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture(scope="module")
def data(wiki_sample, mc_taco_dev, tmp_path_factory) -> dict[str, Path]:
    corpus = make_corpus(wiki_sample, tmp_path_factory.mktemp("disk_inputs"))
    rows = mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)
    for n in (40, 60):
        corpus[f"mc{n}"] = corpus["root"] / f"mc{n}.tsv"
        corpus[f"mc{n}"].write_text("".join(rows[:n]), encoding="utf-8")
    corpus["index_a"] = make_index_a(corpus)
    return corpus


def _fill(disk: Path, leave: int) -> Path:
    """A file taking all the free space of ``disk`` but ``leave`` bytes."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    size = max(0, st.f_bavail * st.f_frsize - leave)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if size:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return filler


def _size(folder: Path) -> int:
    """Bytes ``folder``'s files take on a tmpfs (whole pages)."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in folder.rglob("*") if p.is_file())


COMMANDS = {
    # name: (the previous output's args, the rerun's args); OUT is the output folder
    "index-corpus": (lambda d, out: ["index-corpus", d["a"], "--out", out, *CLI_BUILD],
                     lambda d, out: ["index-corpus", d["b"], "--out", out, "--append", *CLI_BUILD]),
    "decontaminate": (lambda d, out: ["decontaminate", d["index_a"], "--tasks", "mc_taco", "--data-files",
                                      f"mc_taco:validation={d['mc40']}", "--out", out, "-q"],
                      lambda d, out: ["decontaminate", d["index_a"], "--tasks", "mc_taco", "--data-files",
                                      f"mc_taco:validation={d['mc60']}", "--out", out, "-q"]),
    "purify": (lambda d, out: ["purify", d["a"], "--tasks", "mc_taco", "--data-files",
                               f"mc_taco:validation={d['mc40']}", "--out", out, "-q"],
               lambda d, out: ["purify", d["a"], d["b"], "--tasks", "mc_taco", "--data-files",
                               f"mc_taco:validation={d['mc60']}", "--out", out, "-q"]),
    # a tiny random model on a PREP_DIR of 40 MC-TACO rows (model_data)
    "evaluate": (lambda d, out: ["evaluate", d["prep"], "--model", d["model"], "--device", "cpu",
                                 "--limit-groups", "2", "--no-memorization", "--out", out, "-q"],
                 lambda d, out: ["evaluate", d["prep"], "--model", d["model"], "--device", "cpu",
                                 "--limit-groups", "3", "--no-memorization", "--out", out, "-q"]),
    "analyze": (lambda d, out: ["analyze", d["prep"], "--results", d["eval2"], "--bootstrap", "200",
                                "--out", out, "-q"],
                lambda d, out: ["analyze", d["prep"], "--results", d["eval3"], "--bootstrap", "200",
                                "--out", out, "-q"]),
}


@pytest.fixture(scope="module")
def model_data(data, tiny_model, tmp_path_factory) -> dict[str, Path]:
    """``data`` with a PREP_DIR, the tiny model and two evaluate results of it (2 and 3 groups)."""
    from tcqa_data.eval.runner import evaluate
    from tcqa_data.prep.pipeline import decontaminate

    root = tmp_path_factory.mktemp("disk_model")
    out = {**data, "prep": root / "prep", "model": tiny_model}
    decontaminate(data["index_a"], ["mc_taco"], out["prep"],
                  data_files={"mc_taco": {"validation": data["mc40"]}}, quiet=True)
    for n in (2, 3):
        out[f"eval{n}"] = root / f"eval{n}"
        evaluate(out["prep"], str(tiny_model), device="cpu", limit_groups=n, output=out[f"eval{n}"],
                 bootstrap=200, memorization=False, quiet=True)
    return out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_full_disk_keeps_the_previous_output_byte_for_byte(command, disk, request, tmp_path, monkeypatch,
                                                             capsys):
    data = request.getfixturevalue("model_data" if command in ("evaluate", "analyze") else "data")
    first, rerun = COMMANDS[command]
    pristine = tmp_path / "pristine"
    code, err = cli(first(data, pristine), monkeypatch, capsys)
    assert code == 0, err
    before = snapshot(pristine)
    need = 2 * _size(pristine)  # about the new output and its staging or work area
    rng = random.Random(f"{command}-40")
    outcomes = []
    for round_ in range(2 if "model" in data else ROUNDS):
        out = disk / "out"
        shutil.copytree(pristine, out, symlinks=True)
        # the first round has no space at all; the others fail at a random point, or finish
        filler = _fill(disk, rng.randrange(0, need) if round_ else 0)
        try:
            code, err = cli(rerun(data, out), monkeypatch, capsys)
        finally:
            filler.unlink()
        outcomes.append(code)
        leftovers = sorted(p.name for p in disk.iterdir() if p.name != "out")
        assert leftovers == [], leftovers  # no staging folder, work area or lock beside it
        if code == 0:
            assert snapshot(out) != before  # the new output, committed whole
        else:
            assert code == 2 and err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
            assert "Traceback" not in err and ("No space left" in err or "space" in err), err
            assert snapshot(out) == before
            assert not (out / "_work").exists()  # the work area went too: it kept the disk full
        shutil.rmtree(out)
    assert outcomes[0] == 2, outcomes


def test_a_read_only_disk_and_unwritable_names_are_one_line(disk, data, tmp_path, monkeypatch, capsys):
    """EROFS, a file name that is not UTF-8 and an output name past 255 bytes: one line each,
    nothing written."""
    out = disk / "out"
    code, err = cli(COMMANDS["decontaminate"][0](data, out), monkeypatch, capsys)
    assert code == 0, err
    before = snapshot(out)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    try:
        code, err = cli(COMMANDS["decontaminate"][1](data, out), monkeypatch, capsys)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    assert code == 2 and err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
    assert "read-only file system" in err.lower() and str(disk) in err
    assert snapshot(out) == before and sorted(p.name for p in disk.iterdir()) == ["out"]
    shutil.rmtree(out)

    undecodable = tmp_path / "in"
    undecodable.mkdir()
    shutil.copy(data["a"], undecodable / os.fsdecode(b"caf\xe9.jsonl"))
    for args, needle in (
            (["index-corpus", undecodable, "--out", disk / "idx", *CLI_BUILD], "caf\\udce9.jsonl"),
            (["index-corpus", data["a"], "--out", disk / ("x" * 300), *CLI_BUILD], "shorter")):
        code, err = cli(args, monkeypatch, capsys)
        assert code == 2 and err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
        assert needle in err, err
    assert list(disk.iterdir()) == []


@pytest.mark.parametrize("command", ["index-corpus", "decontaminate"])
def test_too_many_open_files_is_one_line_and_keeps_the_previous_output(command, data, tmp_path, monkeypatch,
                                                                        capsys):
    """EMFILE from the kernel (a real RLIMIT_NOFILE of 10 in the child): index-corpus --append hits it
    while writing its n-gram files, decontaminate while mapping the index. One line naming the path,
    the previous output byte for byte, nothing new beside it, and a rerun with the usual limit works."""
    import resource

    from test_faults import spawn

    first, rerun = COMMANDS[command]
    out = tmp_path / "out"
    code, err = cli(first(data, out), monkeypatch, capsys)
    assert code == 0, err
    before, beside = snapshot(out), sorted(p.name for p in tmp_path.iterdir())

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (10, 10))

    proc = spawn(rerun(data, out), preexec_fn=few_files)
    _, err = proc.communicate(timeout=300)
    err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("[progress]"))
    assert proc.returncode == 2 and err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "open files" in err.lower() and str(tmp_path.parent) in err, err
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == beside
    code, err = cli(rerun(data, out), monkeypatch, capsys)  # nothing held: it runs (index-corpus resumes)
    assert code == 0, err
    assert snapshot(out) != before
