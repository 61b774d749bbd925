"""Execution engines: local processes and Ray give the same ordered results; faults are clear."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import private_ray

from tcqa_data.engines import (
    LocalEngine,
    RayEngine,
    check_writable_dir,
    local_output_dir,
    make_engine,
)
from tcqa_data.errors import ConfigError, InputError, TcqaError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Ray is optional, and imported only where used: spawned local workers import this module too.
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install 'tcqa-data[ray]')")


# ---- task functions: top level, so worker processes import them by name ---------------------


def square_later(i: int, delay: float) -> tuple[int, int]:
    time.sleep(delay)  # later tasks finish first, so completion order differs from submission
    return i, i * i


def fail_on(i: int, bad: int) -> int:
    if i == bad:
        raise InputError("bad row", path="corpus.jsonl", line=i, field="text")
    return i


def write_into(folder: str) -> None:
    Path(folder, "out.bin").write_bytes(b"x")


def wait_to_be_killed(i: int, log_dir: str, hold: float) -> int:
    """Task 0's first attempt records its pid and waits to be killed; a retry just runs."""
    log = Path(log_dir)
    first = not any(log.glob(f"{i}.*"))
    (log / f"{i}.{os.getpid()}").write_text("")
    if i == 0 and first:
        deadline = time.time() + hold
        while time.time() < deadline:
            time.sleep(0.05)
    return i * 10


def kill_first_attempt(log_dir: Path, killed: list[int], timeout: float = 60) -> threading.Thread:
    """Kill the process that ran task 0 first, as soon as it has written its pid."""

    def run() -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = sorted(log_dir.glob("0.*"))
            if found:
                pid = int(found[0].name.split(".")[1])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.02)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


@pytest.fixture
def readonly_dir(tmp_path: Path):
    """A folder nobody can create files in, also when the tests run as root."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK):  # root ignores permission bits: make the folder immutable
        immutable = shutil.which("chattr") is not None and subprocess.run(
            ["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        if not immutable:
            folder.chmod(0o755)
            pytest.skip("cannot make a read-only folder as this user (root without chattr +i)")
    yield folder
    if immutable:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance (2 CPUs) for this module; RayEngine reuses it and leaves it up.

    Workers import this test module by name, so they get its folder on their path.
    """
    with private_ray():
        yield


@pytest.fixture(scope="module")
def local2():
    """Two spawned worker processes, shared by this module's tests (each spawn costs seconds)."""
    with LocalEngine(2) as eng:
        yield eng


CALLS = [{"i": i, "delay": 0.05 * (5 - i)} for i in range(6)]
EXPECTED = [(i, i * i) for i in range(6)]


# ---- local engine ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_local_results_in_submission_order(workers: int, local2: LocalEngine) -> None:
    seen: list[int] = []
    eng = local2 if workers == 2 else LocalEngine(1)
    out = eng.map(square_later, CALLS, desc="square", on_done=lambda i, r: seen.append(i))
    assert out == EXPECTED
    assert sorted(seen) == list(range(6))


def test_local_shared_arguments(local2: LocalEngine) -> None:
    out = local2.map(square_later, [{"i": i} for i in range(3)], shared={"delay": 0.0})
    assert out == [(0, 0), (1, 1), (2, 4)]


@pytest.mark.parametrize("workers", [1, 2])
def test_local_task_error_is_raised_with_its_message(workers: int, local2: LocalEngine) -> None:
    eng = local2 if workers == 2 else LocalEngine(1)
    with pytest.raises(InputError, match=r"corpus.jsonl:3: bad row"):
        eng.map(fail_on, [{"i": i, "bad": 3} for i in range(5)])


def test_local_unwritable_file_names_the_path(readonly_dir: Path, local2: LocalEngine) -> None:
    with pytest.raises(TcqaError, match=str(readonly_dir / "out.bin")):
        local2.map(write_into, [{"folder": str(readonly_dir)}, {"folder": str(readonly_dir)}])


def test_local_killed_worker_is_a_clear_error(tmp_path: Path) -> None:
    killed: list[int] = []
    killer = kill_first_attempt(tmp_path, killed)
    with LocalEngine(2) as eng, pytest.raises(TcqaError, match="worker process died"):
        eng.map(wait_to_be_killed, [{"i": i, "log_dir": str(tmp_path), "hold": 60} for i in range(3)])
    killer.join()
    assert killed


def test_lambdas_and_nested_functions_are_refused() -> None:
    def nested(i: int) -> int:
        return i

    with LocalEngine(1) as eng:
        for fn in (lambda i: i, nested):
            with pytest.raises(TypeError, match="top-level function"):
                eng.map(fn, [{"i": 1}])


def test_make_engine_choices() -> None:
    assert isinstance(make_engine("local", 2), LocalEngine)
    eng = make_engine("ray", 2)
    assert isinstance(eng, RayEngine) and eng.num_cpus == 2 and eng.address is None
    eng = make_engine("ray", 2, "auto")
    assert eng.address == "auto" and eng.num_cpus is None
    with pytest.raises(ConfigError, match="unknown engine 'spark'"):
        make_engine("spark")
    with pytest.raises(ConfigError, match="--ray-address needs --engine ray"):
        make_engine("local", 2, "auto")
    with pytest.raises(ConfigError, match="only sizes a local Ray instance"):
        RayEngine(address="auto", num_cpus=4)


# ---- output paths ---------------------------------------------------------------------------


def test_object_storage_output_is_refused_with_the_reason() -> None:
    with pytest.raises(TcqaError, match=r"s3://bucket/index: the index must be on a file system"):
        local_output_dir("s3://bucket/index")
    assert local_output_dir("file:///data/index") == Path("/data/index")
    assert local_output_dir("rel/index") == Path("rel/index")


def test_readonly_output_folder_names_the_path(readonly_dir: Path) -> None:
    target = readonly_dir / "index"
    with pytest.raises(TcqaError, match=f"cannot write the output folder {target}"):
        check_writable_dir(target)
    with LocalEngine(1) as eng, pytest.raises(TcqaError, match=str(target)):
        eng.check_shared_paths(target)


# ---- Ray --------------------------------------------------------------------------------------


def test_engines_module_does_not_import_ray_and_missing_ray_is_explained() -> None:
    proc = run_python(
        "import sys\n"
        "import tcqa_data.cli, tcqa_data.decontam.build\n"
        "import tcqa_data.engines as e\n"
        "assert 'ray' not in sys.modules, 'ray imported eagerly'\n"
        "sys.modules['ray'] = None  # as if the extra were not installed\n"
        "from tcqa_data.errors import TcqaError\n"
        "try:\n"
        "    e.RayEngine().start()\n"
        "except TcqaError as exc:\n"
        "    print('ERR', exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert "ERR the ray engine needs Ray: install the ray extra: pip install 'tcqa-data[ray]'" in proc.stdout


@needs_ray
@pytest.mark.ray
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_unreachable_ray_address_names_it(scheme: str) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"{scheme}127.0.0.1:{port}"
    proc = run_python(
        "from tcqa_data.engines import RayEngine\n"
        "from tcqa_data.errors import TcqaError\n"
        "try:\n"
        f"    RayEngine(address={address!r}).start()\n"
        "except TcqaError as exc:\n"
        "    print('ERR', exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert f"ERR cannot reach the Ray cluster at {address}" in proc.stdout


@needs_ray
@pytest.mark.ray
@pytest.mark.slow
def test_ray_engine_starts_and_stops_its_own_local_instance(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"12345")
    proc = run_python(
        "import os, ray\n"
        "from tcqa_data.engines import RayEngine\n"
        "with RayEngine(num_cpus=1) as eng:\n"
        f"    print('SIZES', eng.map(os.path.getsize, [{{'filename': {str(tmp_path / 'a.txt')!r}}}]))\n"
        "    print('CPUS', eng.parallelism)\n"
        f"    eng.check_shared_paths({str(tmp_path / 'idx')!r}, [{str(tmp_path / 'a.txt')!r}])\n"
        "print('UP', ray.is_initialized())\n")
    assert proc.returncode == 0, proc.stderr
    assert "SIZES [5]" in proc.stdout and "CPUS 1" in proc.stdout and "UP False" in proc.stdout


@pytest.mark.ray
def test_ray_gives_the_same_ordered_results_as_local(ray_cluster, local2: LocalEngine) -> None:
    seen: list[int] = []
    eng = RayEngine()
    out = eng.map(square_later, CALLS, desc="square", on_done=lambda i, r: seen.append(i))
    assert out == EXPECTED
    assert sorted(seen) == list(range(6))
    assert local2.map(square_later, CALLS) == out
    assert eng.map(square_later, [{"i": i} for i in range(3)], shared={"delay": 0.0}) == EXPECTED[:3]
    eng.close()
    import ray

    assert ray.is_initialized()  # not ours to stop


@pytest.mark.ray
def test_ray_task_error_is_raised_with_its_message(ray_cluster) -> None:
    with pytest.raises(InputError, match=r"corpus.jsonl:3: bad row"):
        RayEngine().map(fail_on, [{"i": i, "bad": 3} for i in range(5)])


@pytest.mark.ray
def test_ray_killed_worker_task_is_retried(ray_cluster, tmp_path: Path) -> None:
    killed: list[int] = []
    killer = kill_first_attempt(tmp_path, killed)
    calls = [{"i": i, "log_dir": str(tmp_path), "hold": 60} for i in range(4)]
    out = RayEngine(max_retries=2).map(wait_to_be_killed, calls, desc="killme")
    killer.join()
    assert out == [0, 10, 20, 30]
    attempts = sorted(int(p.name.split(".")[1]) for p in tmp_path.glob("0.*"))
    assert len(killed) == 1 and killed[0] in attempts and len(attempts) == 2


@pytest.mark.ray
def test_ray_checks_paths_on_every_node(ray_cluster, tmp_path: Path, readonly_dir: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a"}\n')
    eng = RayEngine()
    eng.check_shared_paths(tmp_path / "index", [str(corpus)])  # all is well: no error
    assert not list((tmp_path / "index").iterdir())  # the probes cleaned up after themselves
    with pytest.raises(TcqaError, match=r"cannot see 1 input file\(s\), e\.g\. .*missing\.jsonl"):
        eng.check_shared_paths(tmp_path / "index", [str(corpus), str(tmp_path / "missing.jsonl")])
    with pytest.raises(TcqaError, match=f"cannot write the output folder {readonly_dir / 'index'}"):
        eng.check_shared_paths(readonly_dir / "index")


# ---- the index build on both engines ------------------------------------------------------

TIMING_FIELDS = ("started", "finished", "seconds", "last_run_seconds")


def index_files(index: Path) -> dict[str, bytes]:
    """Every file under an index folder; the manifest without its timing fields."""
    files = {}
    for p in sorted(index.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(index).as_posix()
        if rel == "manifest.json":
            m = json.loads(p.read_text())
            for key in TIMING_FIELDS:
                m["build"].pop(key)
            m.pop("manifest_xxh3")  # the manifest's own checksum covers the times too
            files[rel] = json.dumps(m, sort_keys=True).encode()
        else:
            files[rel] = p.read_bytes()
    return files


def assert_identical(a: Path, b: Path) -> None:
    fa, fb = index_files(a), index_files(b)
    assert sorted(fa) == sorted(fb)
    assert [k for k in fa if fa[k] != fb[k]] == []
    assert "manifest.json" in fa and any(k.endswith(".keys.npy") for k in fa)


@pytest.fixture(scope="module")
def wiki_corpus(wiki_sample, tmp_path_factory) -> list[str]:
    """Three real JSONL inputs of 30 articles each."""
    lines = wiki_sample.read_text(encoding="utf-8").splitlines(keepends=True)[:90]
    folder = tmp_path_factory.mktemp("corpus")
    paths = []
    for k, name in enumerate("abc"):
        (folder / f"{name}.jsonl").write_text("".join(lines[30 * k:30 * (k + 1)]), encoding="utf-8")
        paths.append(str(folder / f"{name}.jsonl"))
    return paths


@pytest.mark.ray
def test_cli_builds_the_same_index_with_local_and_ray(ray_cluster, wiki_corpus, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tcqa_data.cli import app

    runner = CliRunner()
    for engine in ("local", "ray"):
        res = runner.invoke(app, ["index-corpus", *wiki_corpus, "--out", str(tmp_path / engine),
                                  "--engine", engine, "--workers", "2", "--quiet"])
        assert res.exit_code == 0, res.output
    assert_identical(tmp_path / "local", tmp_path / "ray")


def test_build_on_a_local_engine_object_equals_the_default_pool(wiki_corpus, local2: LocalEngine,
                                                               tmp_path: Path, monkeypatch) -> None:
    """The engine path (checksum, split, map, reduce and the text store as engine tasks) without Ray."""
    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.textstore import build as ts_build

    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)  # these few runs are merged too

    build_index(wiki_corpus, tmp_path / "pool", workers=2, minhash=False, quiet=True)
    build_index(wiki_corpus, tmp_path / "engine", engine=local2, shard_bytes=200_000, minhash=False,
                quiet=True)
    assert_identical(tmp_path / "pool", tmp_path / "engine")
    # the inputs' anchors merged into one table, its key-range parts written by the engine's tasks
    meta = json.loads((tmp_path / "engine" / "textstore" / "meta.json").read_text())
    assert len(meta["anchors"]["inputs"]) == len(wiki_corpus) and meta["anchors"]["parts"]


def test_two_level_reduces_on_an_engine_equal_one_level(wiki_corpus, local2: LocalEngine,
                                                         tmp_path: Path, monkeypatch) -> None:
    """With more runs than GROUP_RUNS (n-gram and MinHash), the build merges run groups in tasks
    of their own (each bucket's, each band's) before the buckets and bands, and with more windows
    than RANGE_WINDOWS each band's key ranges apart: the same index as the one-level merges
    (default pool)."""
    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.minhash import merge as mh_merge
    from tcqa_data.decontam.ngrams import reduce as nred

    build_index(wiki_corpus, tmp_path / "one", workers=2, quiet=True, run_pairs=30_000, batch_chars=50_000)
    monkeypatch.setattr(mh_merge, "GROUP_RUNS", 2)
    monkeypatch.setattr(mh_merge, "RANGE_WINDOWS", 1000)
    monkeypatch.setattr(nred, "GROUP_RUNS", 2)
    steps: dict[str, int] = {}
    run_tasks = local2.map

    def counting_map(fn, calls, **kw):
        steps[kw.get("desc", "")] = steps.get(kw.get("desc", ""), 0) + len(calls)
        return run_tasks(fn, calls, **kw)

    monkeypatch.setattr(local2, "map", counting_map)
    build_index(wiki_corpus, tmp_path / "two", engine=local2, quiet=True, run_pairs=30_000,
                batch_chars=50_000)
    assert_identical(tmp_path / "one", tmp_path / "two")
    bands = json.loads((tmp_path / "two" / "minhash" / "params.json").read_text())["params"]["bands"]
    assert steps["index-minhash-groups"] == 2 * bands  # 3 runs (one per input) in 2 groups, per band
    assert steps["index-minhash-reduce"] == 1 + bands
    # over 2,000 windows: each band's key ranges merged apart (a power of two of them), then packed
    ranges = steps["index-minhash-ranges"] // bands
    assert ranges >= 2 and ranges & (ranges - 1) == 0 and steps["index-minhash-ranges"] == ranges * bands
    # batches of 50 k chars, runs of 30 k pairs: several n-gram runs per input, so at least 3
    # groups of 2, each of 64 buckets
    assert steps["index-reduce-groups"] >= 3 * 64 and steps["index-reduce-groups"] % 64 == 0
    assert steps["index-reduce"] == 64


class WorkerKiller(threading.Thread):
    """Watch this test's Ray worker processes; SIGKILL the first one running a task whose name
    starts with ``prefix`` (Ray titles a busy worker ``ray::<task name>``). Records every task
    name it saw."""

    def __init__(self, prefix: str, ready=lambda: True, timeout: float = 120) -> None:
        super().__init__(daemon=True)
        self.prefix, self.ready, self.timeout = f"ray::{prefix}", ready, timeout
        self.seen: set[str] = set()
        self.killed: list[int] = []
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        import psutil

        deadline = time.time() + self.timeout
        while not self.stop.is_set() and time.time() < deadline:
            for proc in psutil.Process().children(recursive=True):
                try:
                    cmdline = proc.cmdline()  # once: a worker may exit between two reads
                except psutil.Error:
                    continue
                title = cmdline[0] if cmdline else ""
                if title.startswith("ray::index-"):
                    self.seen.add(title)
                if not self.killed and title.startswith(self.prefix) and self.ready():
                    os.kill(proc.pid, signal.SIGKILL)
                    self.killed.append(proc.pid)
            time.sleep(0.005)


@pytest.fixture(scope="module")
def big_file_and_local_index(wiki_sample, tmp_path_factory) -> tuple[Path, Path]:
    """The whole wiki sample as one input, and its n-gram index built locally."""
    from tcqa_data.decontam.build import build_index

    out = tmp_path_factory.mktemp("local") / "index"
    build_index([str(wiki_sample)], out, workers=2, minhash=False, num_buckets=2, quiet=True)
    return wiki_sample, out


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("phase", ["map", "reduce"])
def test_ray_build_survives_a_killed_worker(ray_cluster, big_file_and_local_index, tmp_path: Path,
                                            phase: str) -> None:
    """One 20 MB file split into 4 MB byte ranges; a worker is killed mid-task in the map or the
    reduce phase; Ray reruns the task and the index equals the local build (one shard) byte for
    byte, with no leftover of the killed task."""
    from tcqa_data.decontam.build import build_index

    corpus, local = big_file_and_local_index
    out = tmp_path / "ray"
    # In the reduce phase, wait until a bucket file is being written: the killed task leaves its
    # temporary file behind, which must not end up in the index.
    writing = lambda: any((out / "_work" / "stage").rglob(".*.tmp"))  # noqa: E731
    killer = WorkerKiller(f"index-{phase}[", ready=writing if phase == "reduce" else lambda: True)
    try:
        build_index([str(corpus)], out, engine="ray", minhash=False, num_buckets=2,
                    shard_bytes=4_000_000, quiet=True)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed, f"no {phase} task was seen running: nothing was killed"
    assert {f"ray::index-map[{i}]" for i in range(1, 5)} <= killer.seen  # the file was split
    assert_identical(local, out)


@pytest.mark.ray
@pytest.mark.slow
def test_ray_build_resumes_after_the_driver_dies(ray_cluster, big_file_and_local_index,
                                                 tmp_path: Path) -> None:
    """kill -9 the driver (and the Ray instance it started) once two map shards are done; the
    index does not look complete, and a rerun finishes it, equal to the local build."""
    from tcqa_data.decontam.build import build_index

    corpus, local = big_file_and_local_index
    out = tmp_path / "ray"
    args = dict(engine="ray", minhash=False, num_buckets=2, shard_bytes=4_000_000, quiet=True)
    code = ("from tcqa_data.decontam.build import build_index\n"
            f"build_index([{str(corpus)!r}], {str(out)!r}, workers=1, **{args!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    maps = out / "_work" / "maps"
    try:
        deadline = time.time() + 120
        while len(list(maps.glob("*/done.json"))) < 2:
            assert proc.poll() is None, "the build ended before its driver could be killed"
            assert time.time() < deadline, "no map shard finished in time"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the driver and its Ray processes
        proc.wait()
    assert not (out / "manifest.json").exists()
    build_index([str(corpus)], out, **args)
    assert_identical(local, out)


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> str:
    path = tmp_path / "tiny.jsonl"
    path.write_text('{"text": "one two three four five six seven eight nine ten eleven twelve thirteen"}\n')
    return str(path)


def test_build_refuses_object_storage_and_bad_engine_options(tiny_corpus: str, tmp_path: Path) -> None:
    from tcqa_data.decontam.build import build_index

    with pytest.raises(TcqaError, match=r"s3://bucket/idx: the index must be on a file system"):
        build_index([tiny_corpus], "s3://bucket/idx", quiet=True)
    with pytest.raises(ConfigError, match="--ray-address needs --engine ray"):
        build_index([tiny_corpus], tmp_path / "i", ray_address="auto", quiet=True)
    with pytest.raises(ConfigError, match="unknown engine 'spark'"):
        build_index([tiny_corpus], tmp_path / "i", engine="spark", quiet=True)


def test_build_into_a_readonly_folder_names_it(tiny_corpus: str, readonly_dir: Path) -> None:
    from tcqa_data.decontam.build import build_index

    for engine in ("local", LocalEngine(1)):
        with pytest.raises(TcqaError, match=f"cannot write the output folder {readonly_dir / 'idx'}"):
            build_index([tiny_corpus], readonly_dir / "idx", engine=engine, minhash=False, quiet=True)


@pytest.mark.ray
def test_ray_build_into_a_readonly_folder_names_it(ray_cluster, tiny_corpus: str, readonly_dir: Path) -> None:
    from tcqa_data.decontam.build import build_index

    with pytest.raises(TcqaError, match=f"cannot write the output folder {readonly_dir / 'idx'}"):
        build_index([tiny_corpus], readonly_dir / "idx", engine="ray", minhash=False, quiet=True)


def test_cli_without_ray_says_which_extra_to_install(tiny_corpus: str, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    proc = run_python(
        "import sys\n"
        "sys.modules['ray'] = None  # as if the extra were not installed\n"
        "from tcqa_data.cli import main\n"
        f"sys.argv = ['tcqa-data', 'index-corpus', {tiny_corpus!r}, '--out', {str(out)!r}, "
        "'--engine', 'ray', '--quiet', '--no-minhash']\n"
        "main()\n")
    assert proc.returncode == 2, proc.stderr
    assert "Error: the ray engine needs Ray: install the ray extra: pip install 'tcqa-data[ray]'" \
        in proc.stderr
    assert not (out / "manifest.json").exists()
