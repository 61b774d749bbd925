"""The quick start on a machine that has none of ../shared/data (issue 31).

What a fresh install needs ships with the package: the demo corpus (tcqa_data/data/demo) and NLTK's
English Punkt tables (tcqa_data/data/nltk_data). MC-TACO loads from the hub's Parquet conversion
(datasets >= 4 refuses its loading script), mapped to the docs its release TSV gives; without the
hub, decontaminate says in one line how to pass local files. The hub itself cannot be reached
here: the MC-TACO mapping is tested on a local folder laid out as the conversion branch is.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import REPO_ROOT, SHARED_DATA

import tcqa_data.data
from tcqa_data.prep.benchmarks import load_split
from tcqa_data.prep.taskspec import TaskSpec

README = REPO_ROOT / "README.md"
PUNKT_FILES = ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab")


def _fresh_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user: no NLTK_DATA, an empty home and hub cache, the hub off."""
    # other test modules switch the hub off for their process (HF_DATASETS_OFFLINE ...): a new user
    # has none of that
    env = {k: v for k, v in os.environ.items()
           if k not in ("NLTK_DATA", "PYTHONPATH", "HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE",
                        "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    (tmp / "home").mkdir(exist_ok=True)
    env.update(HOME=str(tmp / "home"), HF_HOME=str(tmp / "hf"), HF_HUB_OFFLINE="1", **extra)
    return env


# ---- Punkt ------------------------------------------------------------------------------------
def test_shipped_punkt_tables_are_nltks_english_tables():
    shipped = Path(tcqa_data.data.NLTK_DATA) / "tokenizers" / "punkt_tab"
    assert (shipped / "LICENSE.txt").read_text().lstrip().startswith("Apache License")
    assert "Apache" in (shipped / "NOTICE.md").read_text()
    source = SHARED_DATA / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    if not source.is_dir():
        pytest.skip("needs ../shared/data/nltk_data (NLTK's files, to compare)")
    for name in PUNKT_FILES:
        assert (shipped / "english" / name).read_bytes() == (source / name).read_bytes(), name


def test_punkt_without_nltk_data_uses_the_shipped_tables_and_nltk_data_wins(tmp_path):
    # NLTK_DATA holding other tables (one abbreviation added) is searched before the shipped ones
    own = tmp_path / "own_nltk_data" / "tokenizers" / "punkt_tab" / "english"
    own.mkdir(parents=True)
    shipped = Path(tcqa_data.data.NLTK_DATA) / "tokenizers" / "punkt_tab" / "english"
    for name in PUNKT_FILES:
        shutil.copyfile(shipped / name, own / name)
    with open(own / "abbrev_types.txt", "a", encoding="utf-8") as fh:
        fh.write("\nzzq")  # the file ends without a newline
    code = (
        "import sys\n"
        "from tcqa_data.decontam.minhash import windows as w\n"
        "files = w._punkt_tables()\n"  # read without importing NLTK (the build workers' way)
        "assert 'nltk' not in sys.modules\n"
        "tok = w._punkt()\n"
        "print('zzq' in files[0], 'zzq' in tok._params.abbrev_types)\n"
        "print(tok.tokenize('It was near Dr. Smith Jr. of St. Louis. Then it rained.'))\n"
        "import nltk.data\n"
        "print(nltk.data.find('tokenizers/punkt_tab/english/'))\n"
    )
    for nltk_data, expect in ((None, "False False"), (own.parents[2], "True True")):
        env = _fresh_env(tmp_path)
        if nltk_data is not None:
            env["NLTK_DATA"] = str(nltk_data)
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == expect
        assert lines[1] == "['It was near Dr. Smith Jr. of St. Louis.', 'Then it rained.']"
        found = Path(lines[2])
        assert found.is_relative_to(own) if nltk_data else found.is_relative_to(tcqa_data.data.NLTK_DATA)


# ---- the demo corpus --------------------------------------------------------------------------
def test_index_corpus_without_inputs_names_demo(tmp_path, monkeypatch, capsys):
    from tcqa_data.cli import main

    monkeypatch.setattr(sys, "argv", ["tcqa-data", "index-corpus", "--out", str(tmp_path / "idx")])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("Error: no corpus to index") and "--demo" in err
    assert not (tmp_path / "idx").exists()


def _demo_lines() -> list[bytes]:
    raw = zstandard.ZstdDecompressor().decompress(Path(tcqa_data.data.demo_corpus_path()).read_bytes())
    return raw.splitlines(keepends=True)


def test_demo_corpus_is_small_licensed_and_rebuilt_by_its_script(wiki_sample):
    path = Path(tcqa_data.data.demo_corpus_path())
    assert path.stat().st_size <= 2_000_000
    notes = (path.parent / "README.md").read_text(encoding="utf-8")
    for words in ("CC BY-SA 3.0", "GFDL", "Wikipedia", "scripts/build_demo_corpus.py"):
        assert words in notes
    content = b"".join(_demo_lines())
    assert hashlib.sha256(content).hexdigest() in notes  # the README describes this very file
    assert f"{len(content):,} bytes" in notes

    spec = importlib.util.spec_from_file_location("build_demo_corpus",
                                                  REPO_ROOT / "scripts" / "build_demo_corpus.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.select_lines(wiki_sample) == _demo_lines()  # rebuilt from the sample, line for line
    sample_lines = set(wiki_sample.read_bytes().splitlines(keepends=True))
    assert all(line in sample_lines for line in _demo_lines())  # real articles, unchanged
    assert f"{len(_demo_lines())} English Wikipedia articles" in notes


# ---- MC-TACO from the hub's Parquet conversion ------------------------------------------------
def test_mc_taco_hub_parquet_conversion_gives_the_tsv_docs(mc_taco_test, tmp_path, monkeypatch):
    """The hub's conversion (branch refs/convert/parquet of CogComp/mc_taco) holds what the loading
    script made of the release TSV: the same columns, ClassLabel codes for label (names no, yes)
    and category. Such a file, laid out as on that branch, loads as the TSV does."""
    import datasets

    with open(mc_taco_test, encoding="utf-8", newline="") as fh:
        # the script's reader (csv defaults): the same fields as ours on this file
        rows = list(csv.reader(fh, delimiter="\t"))
    names = ["sentence", "question", "answer", "label", "category"]
    features = datasets.Features({
        "sentence": datasets.Value("string"), "question": datasets.Value("string"),
        "answer": datasets.Value("string"), "label": datasets.ClassLabel(names=["no", "yes"]),
        "category": datasets.ClassLabel(names=["Event Duration", "Event Ordering", "Frequency",
                                               "Typical Time", "Stationarity"]),
    })
    hub = tmp_path / "mc_taco_hub"
    parquet = hub / "plain_text" / "test" / "0000.parquet"
    parquet.parent.mkdir(parents=True)
    datasets.Dataset.from_dict({n: [r[i] for r in rows] for i, n in enumerate(names)},
                               features=features).to_parquet(str(parquet))
    schema = pq.read_schema(parquet)
    assert schema.field("label").type == "int64" and b"huggingface" in schema.metadata  # codes + features

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # no network here; a local folder
    spec = TaskSpec.resolve("mc_taco")
    assert spec.dataset_kwargs == {"revision": "refs/convert/parquet"}
    as_hub = TaskSpec.from_dict({**spec.to_dict(), "dataset_path": str(hub), "dataset_aliases": []})
    from_hub = load_split(as_hub, "test")
    from_tsv = load_split(spec, "test", mc_taco_test)
    assert from_hub.source.startswith("hub:")
    assert from_hub.table.schema == from_tsv.table.schema
    assert from_hub.table.to_pylist() == from_tsv.table.to_pylist()  # fields, labels 1/0, order
    assert from_tsv.table.column("label").to_pylist()[:4] == [0, 0, 0, 1]


# ---- the quick start in a fresh checkout ------------------------------------------------------
def _decontaminate_lines(stdout: str) -> list[str]:
    """``TASK/SPLIT: ... untestable`` summary lines, without the output folder they end with."""
    return [line.split(" -> ")[0] for line in stdout.splitlines() if re.match(r"^\w+/\w+: ", line)]


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[progress]")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


def test_quick_start_steps_in_a_fresh_checkout(tmp_path, mc_taco_test, squad_validation, tiny_model):
    # the checkout alone: no ../shared/data beside it, no .venv; numba's caches travel (the same
    # sources, mtimes kept), so the kernels load instead of compiling again
    fresh = tmp_path / "fresh"
    checkout = fresh / "tcqa-data"
    # without the files another pytest-xdist worker may be writing at this moment (a .pyc, or a numba
    # cache file, each written under a temporary name and then renamed)
    shutil.copytree(REPO_ROOT / "tcqa_data", checkout / "tcqa_data",
                    ignore=shutil.ignore_patterns("*.pyc", "*.pyc.*", "*.tmp.*"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, checkout / name)
    assert not (checkout.parent / "shared").exists()
    bench = fresh / "bench"  # the test's own copies of the benchmark files
    bench.mkdir()
    shutil.copyfile(mc_taco_test, bench / "test_9442.tsv")
    shutil.copyfile(squad_validation, bench / "validation.jsonl")
    env = _fresh_env(tmp_path, PYTHONPATH=str(checkout))

    def tcqa(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tcqa_data", *args], cwd=checkout,
                              env={**env, **extra_env}, capture_output=True, text=True, timeout=600)

    # 1. index-corpus --demo, with MinHash (Punkt from the package)
    proc = tcqa("index-corpus", "--demo", "--id-field", "title", "--out", "idx", "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    manifest = (checkout / "idx" / "manifest.json").read_text()
    assert '"minhash": {' in manifest
    inputs = [line for line in manifest.splitlines() if "wiki_demo.jsonl.zst" in line]
    assert inputs and str(checkout) in inputs[0]  # the copy's own package data

    # 2. decontaminate with local files: the README's demo table
    proc = tcqa("decontaminate", "idx", "--tasks", "mc_taco,squad_completion", "--splits", "test,validation",
                "--data-files", f"mc_taco:test={bench / 'test_9442.tsv'}",
                "--data-files", f"squad_completion:validation={bench / 'validation.jsonl'}", "--out", "prep")
    assert proc.returncode == 0, proc.stderr
    got = _decontaminate_lines(proc.stdout)
    assert got == ["mc_taco/test: 76/1332 groups dirty, 520/9442 docs dirty, 0 untestable",
                   "squad_completion/validation: 273/10570 groups dirty, 273/10570 docs dirty, 0 untestable"]
    readme = README.read_text(encoding="utf-8")
    for line in got:
        assert line in readme, f"the README's demo table lacks {line!r}"

    # 3. evaluate a tiny sample (a tiny random model: the steps, not the scores)
    proc = tcqa("evaluate", "prep", "--model", str(tiny_model), "--device", "cpu", "--sample-groups", "4",
                "--out", "eval", "--quiet")
    assert proc.returncode == 0, proc.stderr
    results = (checkout / "eval" / "results.json").read_text()
    assert '"mc_taco"' in results and '"squad_completion"' in results

    # 4. without --data-files and without the hub: one line that says what works offline
    line = _one_error_line(tcqa("decontaminate", "idx", "--tasks", "mc_taco", "--splits", "test",
                                "--out", "prep2"))
    assert "'mc_taco'" in line and "HF_HUB_OFFLINE" in line
    assert "--data-files mc_taco:test=PATH/test_9442.tsv" in line
    # no network (a hub address where nothing listens): the same, at once, without datasets' retries
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        line = _one_error_line(tcqa("decontaminate", "idx", "--tasks", "squad_completion", "--out", "prep3",
                                    HF_HUB_OFFLINE="0", HF_ENDPOINT=endpoint))
    assert "'squad_completion'" in line and "unreachable" in line
    assert "--data-files squad_completion:validation=PATH/validation.jsonl" in line
    assert not (checkout / "prep2").exists() and not (checkout / "prep3").exists()
