"""Nothing lost, nothing half-written (issue 30), on real data, for the index (PREP_DIR:
test_faults_prep.py): killed writers leave the previous index or the complete new one, a damaged
index is one ``Error:`` line, bad inputs are refused by name before anything is written, one
writer at a time, Ctrl-C is one line.

Kills are real SIGKILLs: at named points of a commit (``TCQA_FAULT_AT``, ``outputs.fault_point``)
and at seeded random times of a running command. Corpora are slices of the wiki sample, so each
build takes seconds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tcqa_data.cli import main
from tcqa_data.decontam.build import build_index
from tcqa_data.outputs import output_lock

REPO = Path(__file__).resolve().parents[1]
BUILD = {"num_buckets": 8, "quiet": True, "workers": 1}
CLI_BUILD = ["--num-buckets", "8", "--workers", "1", "-q"]
VOLATILE = ("build", "files", "manifest_xxh3")  # times; the file list is compared file by file


# ---- helpers ------------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, byte for byte (an index's manifest without its build times).
    An index's ``_work/`` is left out: the scratch of a build in progress, kept so that a rerun
    resumes it, which no reader of the index opens."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.relative_to(folder).parts[0] != "_work":
            data = p.read_bytes()
            if p.name == "manifest.json" and p.parent == folder:
                m = json.loads(data)
                data = json.dumps({k: v for k, v in m.items() if k not in VOLATILE}, sort_keys=True).encode()
            out[p.relative_to(folder).as_posix()] = data
    return out


def cli(args: list, monkeypatch, capsys) -> tuple[int, str]:
    """``tcqa-data ARGS`` in-process through the real entry point; (exit status, stderr without
    progress lines). An exception that escapes main() fails the test (it would be a traceback)."""
    monkeypatch.setattr(sys, "argv", ["tcqa-data", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("[progress]"))
    return (0 if exc.value.code is None else int(exc.value.code)), err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


def spawn(args: list, env: dict | None = None, **kw) -> subprocess.Popen:
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "tcqa_data", *map(str, args)], env=full_env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run_cli(args: list, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = spawn(args, env)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# ---- real data ----------------------------------------------------------------------------------
def make_corpus(wiki_sample: Path, root: Path) -> dict[str, Path]:
    """Two real JSONL inputs of 12 wiki articles each (a sorts before b), in folders of their own."""
    lines = wiki_sample.read_text(encoding="utf-8").splitlines(keepends=True)[:24]
    parts = {}
    for name, chunk in (("a", lines[:12]), ("b", lines[12:])):
        (root / "in" / name).mkdir(parents=True)
        parts[name] = root / "in" / name / f"{name}.jsonl"
        parts[name].write_text("".join(chunk), encoding="utf-8")
    parts["root"] = root
    return parts


def make_index_a(corpus: dict[str, Path]) -> Path:
    """The index of a (MinHash and text store on: every file kind)."""
    out = corpus["root"] / "idx_a"
    build_index([str(corpus["a"])], out, **BUILD)
    return out


@pytest.fixture(scope="module")
def corpus(wiki_sample, tmp_path_factory) -> dict[str, Path]:
    return make_corpus(wiki_sample, tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def index_a(corpus) -> Path:
    return make_index_a(corpus)


@pytest.fixture(scope="module")
def index_ab(corpus, index_a) -> Path:
    """a, then b appended: the complete next generation an interrupted append must reach."""
    out = corpus["root"] / "idx_ab"
    shutil.copytree(index_a, out)
    build_index([str(corpus["b"])], out, append=True, **BUILD)
    return out


# ---- a damaged index is one line ------------------------------------------------------------
def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 2)])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


DAMAGE = {"truncated": _truncate, "deleted": Path.unlink, "emptied": lambda p: p.write_bytes(b"")}
FILE_KINDS = ["ngrams/n13/00003.keys.npy", "ngrams/n13/00005.docs.npy", "ngrams/n13/00001.dir.npy",
              "docs.parquet", "minhash/band_cells.npy", "minhash/doc_windows.npy", "minhash/params.json",
              "textstore/meta.json", "textstore/*.offsets.npy", "textstore/*.cells.npy"]


def _one(index: Path, pattern: str) -> Path:
    found = sorted(index.glob(pattern))
    assert found, pattern
    return found[0]


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_each_damaged_file_kind_is_one_line_naming_it(index_a, tmp_path, monkeypatch, capsys, kind):
    for how, damage in DAMAGE.items():
        copy = tmp_path / how
        shutil.copytree(index_a, copy)
        victim = _one(copy, kind)
        damage(victim)
        for args in (["index-info", copy, "-q"], ["index-corpus", index_a.parent / "in" / "a", "--out", copy,
                                                  "--append", *CLI_BUILD]):
            code, err = cli(args, monkeypatch, capsys)
            assert_one_line_error(code, err, str(victim), "--overwrite")
    # the same size, other bytes: only --verify reads every byte
    copy = tmp_path / "flipped"
    shutil.copytree(index_a, copy)
    victim = _one(copy, kind)
    _flip(victim)
    code, err = cli(["index-info", copy, "--verify", "-q"], monkeypatch, capsys)
    assert_one_line_error(code, err, str(victim), "checksum")


def test_extra_file_and_intact_index(index_a, tmp_path, monkeypatch, capsys):
    code, err = cli(["index-info", index_a, "--verify"], monkeypatch, capsys)
    assert code == 0 and "verified" in err
    copy = tmp_path / "extra"
    shutil.copytree(index_a, copy)
    (copy / "ngrams" / "n13" / "00099.keys.npy").write_bytes(b"stray")
    code, err = cli(["index-info", copy, "-q"], monkeypatch, capsys)
    assert_one_line_error(code, err, "00099.keys.npy", "extra")


MANIFEST_DAMAGE = {
    "not JSON": lambda p: p.write_text('{"kind": "tcqa-ngram-index",'),
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe{}"),
    "a list": lambda p: p.write_text("[]"),
    "num_buckets edited": lambda p: p.write_text(json.dumps(dict(json.loads(p.read_text()), num_buckets=16))),
    "hash seed edited": lambda p: p.write_text(json.dumps(
        dict(json.loads(p.read_text()), hash=dict(json.loads(p.read_text())["hash"], seed=5)))),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
    "its checksum removed, num_buckets edited": lambda p: p.write_text(json.dumps(
        {**{k: v for k, v in json.loads(p.read_text()).items() if k != "manifest_xxh3"}, "num_buckets": 16})),
    "an object without the fields": lambda p: p.write_text('{"kind": "tcqa-ngram-index"}'),
}


@pytest.mark.parametrize("how", list(MANIFEST_DAMAGE))
def test_damaged_manifest_is_one_line_in_every_command(index_a, corpus, tmp_path, monkeypatch, capsys, how,
                                                       mc_taco_dev):
    copy = tmp_path / "idx"
    shutil.copytree(index_a, copy)
    MANIFEST_DAMAGE[how](copy / "manifest.json")
    data = tmp_path / "dev.tsv"
    data.write_text("".join(mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)[:40]))
    for args in (["index-info", copy, "-q"],
                 ["index-corpus", corpus["a"], "--out", copy, *CLI_BUILD],
                 ["index-corpus", corpus["b"], "--out", copy, "--append", *CLI_BUILD],
                 ["decontaminate", copy, "--tasks", "mc_taco", "--data-files", f"mc_taco:validation={data}",
                  "--out", tmp_path / "prep", "-q"]):
        code, err = cli(args, monkeypatch, capsys)
        assert_one_line_error(code, err, "manifest.json")
    assert not (tmp_path / "prep").exists()
    # --overwrite replaces a damaged index
    code, err = cli(["index-corpus", corpus["a"], "--out", copy, "--overwrite", *CLI_BUILD], monkeypatch,
                    capsys)
    assert code == 0, err
    assert snapshot(copy) == snapshot(index_a)


# ---- kills: the previous generation or the complete new one -----------------------------------
APPEND_POINTS = ["index-staged", "index-text-store", "index-sealed", "exchanged"]


@pytest.mark.parametrize("point", APPEND_POINTS)
def test_append_killed_at_a_commit_point_keeps_the_previous_generation(corpus, index_a, index_ab,
                                                                       tmp_path, point):
    out = tmp_path / "idx"
    shutil.copytree(index_a, out)
    before = snapshot(index_a)
    args = ["index-corpus", corpus["b"], "--out", out, "--append", *CLI_BUILD]
    killed = run_cli(args, env={"TCQA_FAULT_AT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    now = snapshot(out)
    if point == "exchanged":  # swapped in, the old one not yet removed: the new generation
        assert now == snapshot(index_ab)
    else:
        assert now == before  # the previous generation, byte for byte, and readable
        assert run_cli(["index-info", out, "-q"]).returncode == 0
    again = run_cli(args)
    assert again.returncode == 0, again.stderr
    assert snapshot(out) == snapshot(index_ab)
    assert run_cli(["index-info", out, "--verify", "-q"]).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no leftovers


def test_append_killed_at_random_times_is_the_previous_or_the_new_one(corpus, index_a, index_ab, tmp_path):
    before, after = snapshot(index_a), snapshot(index_ab)
    args = ["index-corpus", corpus["b"], "--out", None, "--append", *CLI_BUILD]
    t0 = time.time()
    probe = tmp_path / "probe"
    shutil.copytree(index_a, probe)
    assert run_cli([a if a is not None else probe for a in args]).returncode == 0
    took = time.time() - t0
    rng = random.Random(30)
    for i in range(5):
        out = tmp_path / f"idx{i}"
        shutil.copytree(index_a, out)
        proc = spawn([a if a is not None else out for a in args])
        time.sleep(rng.uniform(0.3, took))
        proc.kill()
        proc.communicate()
        assert snapshot(out) in (before, after)
        assert run_cli([a if a is not None else out for a in args]).returncode == 0
        assert snapshot(out) == after


def test_fresh_build_killed_at_random_times_resumes_byte_identical(corpus, index_a, tmp_path):
    ref = snapshot(index_a)
    rng = random.Random(32)
    for i in range(4):
        out = tmp_path / f"idx{i}"
        args = ["index-corpus", corpus["a"], "--out", out, *CLI_BUILD]
        proc = spawn(args)
        time.sleep(rng.uniform(0.3, 2.5))
        proc.kill()
        proc.communicate()
        assert not (out / "manifest.json").exists() or snapshot(out) == ref  # no index, or the whole one
        assert run_cli(args).returncode == 0
        assert snapshot(out) == ref


@pytest.mark.parametrize("point", ["index-text-store", "index-sealed"])
def test_fresh_build_killed_in_its_commit_resumes_byte_identical(corpus, index_a, tmp_path, point):
    out = tmp_path / "idx"
    args = ["index-corpus", corpus["a"], "--out", out, *CLI_BUILD]
    assert run_cli(args, env={"TCQA_FAULT_AT": point}).returncode == -signal.SIGKILL
    assert not (out / "manifest.json").exists()
    info = run_cli(["index-info", out])
    assert info.returncode == 2 and "incomplete" in info.stderr and "Traceback" not in info.stderr
    assert run_cli(args).returncode == 0
    assert snapshot(out) == snapshot(index_a)


def test_failed_overwrite_keeps_the_index(corpus, index_a, tmp_path, monkeypatch, capsys):
    out = tmp_path / "idx"
    shutil.copytree(index_a, out)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 3}\n')
    code, err = cli(["index-corpus", bad, "--out", out, "--overwrite", *CLI_BUILD], monkeypatch, capsys)
    assert code == 2 and "bad.jsonl:2" in err
    assert snapshot(out) == snapshot(index_a)


# ---- one writer at a time ---------------------------------------------------------------------
def test_second_writer_is_refused_naming_the_holder(corpus, index_a, tmp_path, monkeypatch, capsys):
    out = tmp_path / "idx"
    shutil.copytree(index_a, out)
    with output_lock(out, "test"):
        code, err = cli(["index-corpus", corpus["b"], "--out", out, "--append", *CLI_BUILD], monkeypatch,
                        capsys)
        assert_one_line_error(code, err, f"pid {os.getpid()}")
    assert snapshot(out) == snapshot(index_a)
    # released with its holder: the append runs now
    code, err = cli(["index-corpus", corpus["b"], "--out", out, "--append", *CLI_BUILD], monkeypatch, capsys)
    assert code == 0, err


# ---- inputs -------------------------------------------------------------------------------------
def test_fifo_is_refused_by_name_without_hanging(corpus, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(corpus["a"], folder / "a.jsonl")
    fifo = folder / "p.jsonl"
    os.mkfifo(fifo)
    for spec in (folder, fifo):
        r = run_cli(["index-corpus", spec, "--out", tmp_path / "idx", *CLI_BUILD], timeout=120)
        assert r.returncode == 2 and "p.jsonl" in r.stderr and "FIFO" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "idx").exists()


def test_files_no_reader_takes_are_listed_and_warned(corpus, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(corpus["a"], folder / "a.jsonl")
    others = ["A.JSONL", "c.csv"]
    # .json is JSON lines, and a .jsonl.bz2 whose bytes are plain text is read as what it is
    for name in [*others, "b.json", "d.jsonl.bz2"]:
        (folder / name).write_text(json.dumps({"text": f"x {name}"}) + "\n")
    for i, spec in enumerate((folder, str(folder / "*"))):
        out = tmp_path / f"idx{i}"
        code, err = cli(["index-corpus", spec, "--out", out, "--no-minhash", "--num-buckets", "8",
                         "--workers", "1"], monkeypatch, capsys)
        assert code == 0, err
        for name in others:
            assert f"Warning: {folder / name} was not indexed" in err
        summary = err.strip().splitlines()[-1]
        assert summary.startswith("indexed ") and "not indexed (2 file(s) no reader takes)" in summary
        m = json.loads((out / "manifest.json").read_text())
        assert sorted(Path(s["path"]).name for s in m["skipped_inputs"]) == sorted(others)
        assert [Path(e["path"]).name for e in m["inputs"]] == ["a.jsonl", "b.json", "d.jsonl.bz2"]


def test_append_of_a_changed_file_is_refused(corpus, tmp_path, monkeypatch, capsys):
    grown = tmp_path / "g.jsonl"
    lines = corpus["a"].read_text(encoding="utf-8").splitlines(keepends=True)
    grown.write_text("".join(lines[:4]), encoding="utf-8")
    out = tmp_path / "idx"
    build_index([str(grown)], out, minhash=False, **BUILD)
    before = snapshot(out)
    grown.write_text("".join(lines[:8]), encoding="utf-8")  # grew in place
    code, err = cli(["index-corpus", grown, "--out", out, "--append", "--no-minhash", "--num-buckets", "8",
                     "--workers", "1"], monkeypatch, capsys)
    assert_one_line_error(code, err, str(grown), "other content", "--overwrite", "now)")
    assert "{" not in err
    assert snapshot(out) == before


def test_output_inside_or_holding_an_input_is_refused(corpus, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(corpus["a"], folder / "a.jsonl")
    listing = sorted(p.name for p in folder.iterdir())
    for spec, out in ((folder, folder), (folder, folder / "idx"), (folder / "a.jsonl", folder),
                      (folder, tmp_path), (folder / "a.jsonl", tmp_path)):
        code, err = cli(["index-corpus", spec, "--out", out, *CLI_BUILD], monkeypatch, capsys)
        assert_one_line_error(code, err, "outside the inputs")
        assert sorted(p.name for p in folder.iterdir()) == listing


# ---- Ctrl-C -------------------------------------------------------------------------------------
def test_ctrl_c_is_one_line_and_the_rerun_finishes(corpus, index_a, tmp_path):
    out = tmp_path / "idx"
    args = ["index-corpus", corpus["a"], "--out", out, "--num-buckets", "8", "--workers", "2"]
    proc = spawn(args, start_new_session=True)  # its own process group, as a terminal's job
    deadline = time.time() + 120
    while not (out / "_work" / "maps").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.2)  # the map workers are running
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: every process of the group
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the build finished before Ctrl-C reached it")
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[progress]")]
    assert lines == ["interrupted; rerun the same command to resume"], err
    for _ in range(50):  # the workers were terminated: gone within moments
        workers = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout
        if not workers.strip():
            break
        time.sleep(0.1)
    assert not workers.strip(), f"worker processes left running: {workers}"
    assert run_cli([*args, "-q"]).returncode == 0
    assert snapshot(out) == snapshot(index_a)


def test_a_folder_that_is_not_an_index_is_never_replaced(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        code, err = cli(["index-corpus", corpus["a"], "--out", out, *CLI_BUILD, *extra], monkeypatch, capsys)
        assert_one_line_error(code, err, "notes.txt", "new or empty folder")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_two_builds_into_one_index_the_second_is_refused_at_once(corpus, index_a, index_ab, tmp_path):
    out = tmp_path / "idx"
    shutil.copytree(index_a, out)
    args = ["index-corpus", corpus["b"], "--out", out, "--append", *CLI_BUILD]
    first = spawn(args)
    deadline = time.time() + 120
    while not (out / "_work").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.01)
    second = run_cli(args)
    # the first still held the build when the second had finished: it was running and had not
    # committed (its work folder is there); a first that had committed but was still exiting (a
    # loaded machine) may have let the second find the index already whole
    overlapped = first.poll() is None and (out / "_work").exists()
    first.communicate(timeout=300)
    assert first.returncode == 0
    if overlapped or second.returncode != 0:
        assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
    assert snapshot(out) == snapshot(index_ab)
    assert not (out / "_work").exists()


def test_a_rerun_with_another_text_store_mode_is_a_new_sealed_generation(corpus, tmp_path, monkeypatch,
                                                                          capsys):
    from tcqa_data.decontam.textstore.store import TextStore

    out = tmp_path / "idx"
    build_index([str(corpus["a"])], out, minhash=False, text_store="none", **BUILD)
    assert not (out / "textstore").exists()
    before = snapshot(out)
    killed = run_cli(["index-corpus", corpus["a"], "--out", out, "--no-minhash", *CLI_BUILD],
                     env={"TCQA_FAULT_AT": "index-sealed"})
    assert killed.returncode == -signal.SIGKILL and snapshot(out) == before
    code, err = cli(["index-corpus", corpus["a"], "--out", out, "--no-minhash", "--text-store", "copy",
                     *CLI_BUILD], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads((out / "textstore" / "meta.json").read_text())["mode"] == "copy"
    code, err = cli(["index-info", out, "--verify"], monkeypatch, capsys)
    assert code == 0 and "verified" in err
    assert TextStore.open(out).texts([0])[0] == json.loads(corpus["a"].read_text().splitlines()[0])["text"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
