"""A test that needs ../shared/data skips without it, except under CI=true, where the run fails: CI
must not pass on skipped tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("ci", "outcome"),
                         [("true", "fail"), (None, "skip"), ("false", "skip"), ("1", "skip")])
def test_missing_shared_data_skips_or_fails_under_ci(monkeypatch, tmp_path, ci, outcome):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "shared" / "data")
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if outcome == "fail" else pytest.skip.Exception
    with pytest.raises(expected) as exc:
        conftest.shared_file("corpus/wiki_sample.jsonl")
    assert "needs ../shared/data/corpus/wiki_sample.jsonl" in str(exc.value)
    assert ("CI=true" in str(exc.value)) == (outcome == "fail")
    # present: the path, whatever CI says
    (tmp_path / "shared" / "data" / "corpus").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "corpus" / "wiki_sample.jsonl").write_text("{}\n")
    assert conftest.shared_file("corpus/wiki_sample.jsonl").read_text() == "{}\n"


_NEEDS_DATA = '''
def test_reads_the_wiki_sample(wiki_sample):
    assert wiki_sample.stat().st_size > 0


def test_needs_nothing():
    assert True
'''


def _run_fake_repo(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """pytest on a repository whose ../shared/data is absent: this conftest and two tests."""
    tests = tmp_path / "repo" / "tests"
    if not tests.exists():
        tests.mkdir(parents=True)
        shutil.copy(HERE / "conftest.py", tests / "conftest.py")
        (tests / "test_data.py").write_text(_NEEDS_DATA)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests)],
                          cwd=tmp_path / "repo", env=env, capture_output=True, text=True, timeout=120)


def test_a_run_without_shared_data_fails_under_ci_and_skips_otherwise(tmp_path):
    assert not (tmp_path / "shared").exists()
    plain = _run_fake_repo(tmp_path, None)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "1 passed, 1 skipped" in plain.stdout
    assert "needs ../shared/data/corpus/wiki_sample.jsonl" in plain.stdout
    assert "1 tests skipped for want of ../shared/data" in plain.stdout.strip().splitlines()[-1], plain.stdout
    ci = _run_fake_repo(tmp_path, "true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "1 passed, 1 error" in ci.stdout and "skipped" not in ci.stdout
    assert "CI=true, so missing data fails the run" in ci.stdout
