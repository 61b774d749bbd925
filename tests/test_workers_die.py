"""Workers die with their parent (issue 40, item 6): a kill -9 or SIGTERM of a command running
``--workers 2`` leaves no worker process and no held lock, and the rerun finishes.

The probe: after kill -9 of ``index-corpus --workers 2`` the forked workers kept the inherited lock
(every rerun refused, naming the dead parent); after kill -9 or SIGTERM of ``decontaminate`` /
``purify --workers 2``, three processes (~460 MB) still ran 52 minutes later. Real subprocesses,
real signals; every process of a run is found by a tag in its environment (workers inherit it).
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest
from test_faults import make_corpus, run_cli, spawn

from tcqa_data.outputs import output_lock

TAG = "TCQA_TEST_RUN_TAG"


@pytest.fixture(scope="module")
def corpus(wiki_sample, tmp_path_factory) -> dict[str, Path]:
    return make_corpus(wiki_sample, tmp_path_factory.mktemp("workers"))


@pytest.fixture(scope="module")
def mc40(mc_taco_dev, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("workers_bench") / "mc40.tsv"
    path.write_text("".join(mc_taco_dev.read_text(encoding="utf-8").splitlines(keepends=True)[:40]),
                    encoding="utf-8")
    return path


def tagged(tag: str) -> list[psutil.Process]:
    """Every live process of the run tagged ``tag`` (the command and whatever it started)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def none_left(tag: str, within: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_when_workers_run(args: list, sig: int, out: Path) -> str:
    """Start ``tcqa-data ARGS``; as soon as it has a worker process, send ``sig`` to the command
    alone (not its group). Returns the run's tag."""
    tag = uuid.uuid4().hex
    proc = spawn(args, env={TAG: tag})
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not parent.children() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, f"finished before it started a worker: {proc.communicate()}"
    time.sleep(0.3)  # the workers are started and at work (they hold what the parent held)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    return tag


def assert_nothing_held(tag: str, out: Path) -> None:
    left = none_left(tag)
    assert not left, [(p.pid, p.cmdline()) for p in left]
    with output_lock(out, "test"):  # no process holds the output's lock
        pass


def test_index_corpus_workers_die_with_it_and_the_rerun_resumes(corpus, tmp_path):
    """kill -9: its forked workers held the inherited lock, refusing every rerun."""
    out = tmp_path / "idx"
    args = ["index-corpus", corpus["a"], corpus["b"], "--out", out, "--num-buckets", "8", "--workers", "2",
            "-q"]
    assert_nothing_held(kill_when_workers_run(args, signal.SIGKILL, out), out)
    rerun = run_cli(args)
    assert rerun.returncode == 0, rerun.stderr
    assert (out / "manifest.json").is_file()


@pytest.mark.parametrize("command, sig", [("purify", signal.SIGKILL), ("decontaminate", signal.SIGTERM)])
def test_stream_workers_die_with_their_command(command, sig, corpus, mc40, tmp_path):
    """purify and decontaminate (stream mode) on two local worker processes (spawned: they
    share no lock, but ran on for the better part of an hour)."""
    out = tmp_path / "out"
    files = ["--tasks", "mc_taco", "--data-files", f"mc_taco:validation={mc40}", "--out", out,
             "--workers", "2", "-q"]
    args = (["purify", corpus["a"], corpus["b"], *files] if command == "purify"
            else ["decontaminate", "--corpus", corpus["a"], "--corpus", corpus["b"], *files])
    assert_nothing_held(kill_when_workers_run(args, sig, out), out)
    rerun = run_cli(args)
    assert rerun.returncode == 0, rerun.stderr
