"""``tcqa-data purify`` output shards: tasks on the engine (local 1, local N, Ray: the same bytes),
resumed after ``kill -9``, and tasks named as lm-eval names them.

Real data: the stream tests' corpus (a wiki slice with MC-TACO and based-squad text injected) cut
into four inputs of three formats, and slices of the benchmarks.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import private_ray
from test_stream import bench, injected_corpus  # noqa: F401 - fixtures

from tcqa_data.errors import InputError
from tcqa_data.outputs import STAGING_PREFIX, lock_path, next_generation_dir
from tcqa_data.prep.purify import purify

TASKS = ["mc_taco", "squad_completion"]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inputs(wiki_sample, bench, tmp_path_factory) -> Path:  # noqa: F811
    """The injected corpus dealt round-robin into four inputs (each holds contaminated docs):
    two JSONL files, one gzipped JSONL and one Parquet file in a subfolder."""
    root = tmp_path_factory.mktemp("inputs")
    path, _ = injected_corpus(wiki_sample, bench, root)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.unlink()
    corpus = root / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.jsonl").write_text("".join(lines[0::4]), encoding="utf-8")
    (corpus / "b.jsonl").write_text("".join(lines[1::4]), encoding="utf-8")
    with gzip.GzipFile(corpus / "sub" / "c.jsonl.gz", "wb", mtime=0) as fh:
        fh.write("".join(lines[2::4]).encode("utf-8"))
    pq.write_table(pa.Table.from_pylist([json.loads(x) for x in lines[3::4]]), corpus / "sub" / "d.parquet",
                   row_group_size=16)  # several row groups: rewritten one at a time
    return corpus


@pytest.fixture(scope="module")
def reference(inputs, bench, tmp_path_factory) -> tuple[Path, dict]:  # noqa: F811
    """One uninterrupted run on one local worker."""
    out = tmp_path_factory.mktemp("reference") / "out"
    return out, purify([str(inputs)], TASKS, out, data_files=bench, quiet=True)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_output(out: Path, reference: Path) -> None:
    got, want = _files(out), _files(reference)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name


def test_every_input_is_a_shard_with_contamination_removed(inputs, reference):
    out, report = reference
    assert sorted(_files(out)) == [".tcqa-output.json", "a.jsonl", "b.jsonl", "purify_report.json",
                                   "purify_report.md", "removal_log.parquet", "sub/c.jsonl.gz",
                                   "sub/d.parquet"]
    assert report["shards"] == {"total": 4, "reused": 0, "written": 4}
    assert "shards" not in json.loads((out / "purify_report.json").read_text())  # run-independent bytes
    per_input = report["inputs"]
    assert len(per_input) == 4 and all(v["contaminated_docs"] > 0 for v in per_input.values())
    log = pq.read_table(out / "removal_log.parquet").to_pylist()
    assert len(log) == report["totals"]["contaminated_docs"]
    # an input's untouched lines are its bytes; a contaminated line is gone or cut, unless Janitor's
    # windows find no match in it (kept: an all-punctuation word inside every copied window)
    dirty_rows = {r["row"] for r in log if r["input"].endswith("a.jsonl") and r["action"] != "kept"}
    source = (inputs / "a.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    written = (out / "a.jsonl").read_text(encoding="utf-8")
    for row, line in enumerate(source, 1):
        assert (line in written) == (row not in dirty_rows), row
    # Parquet: row by row across its row groups, each untouched row as it was, each contaminated
    # one as its pieces
    source = pq.read_table(inputs / "sub" / "d.parquet").to_pylist()
    result = pq.read_table(out / "sub" / "d.parquet").to_pylist()
    pieces = {r["row"]: r for r in log if r["input"].endswith("d.parquet")}
    assert pieces and pq.ParquetFile(out / "sub" / "d.parquet").num_row_groups == \
        pq.ParquetFile(inputs / "sub" / "d.parquet").num_row_groups > 1
    pos = 0
    for row, record in enumerate(source, 1):
        if row not in pieces:
            assert result[pos] == {**record, "purify_doc_ref": None, "purify_piece": None}, row
            pos += 1
            continue
        got = result[pos:pos + pieces[row]["pieces"]]
        assert [g["purify_piece"] for g in got] == list(range(len(got)))
        assert all(g["text"] in record["text"] and g["title"] == record["title"] for g in got)
        pos += len(got)
    assert pos == len(result)
    # nothing left beside the output: no work area, no staging folder, no lock
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]


def test_local_workers_and_ray_write_the_same_bytes(inputs, bench, reference, tmp_path):  # noqa: F811
    """Shards as tasks on 2 local processes and on Ray (a private local instance of 2 CPUs)."""
    purify([str(inputs)], TASKS, tmp_path / "local2", data_files=bench, workers=2, quiet=True)
    _same_output(tmp_path / "local2", reference[0])
    with private_ray():
        report = purify([str(inputs)], TASKS, tmp_path / "ray", data_files=bench, engine="ray", quiet=True)
    assert report["shards"]["written"] == 4
    _same_output(tmp_path / "ray", reference[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local2", "ray"]


def _command(inputs: Path, bench: dict, out: Path, *extra: str) -> list[str]:  # noqa: F811
    cmd = [sys.executable, "-m", "tcqa_data", "purify", str(inputs), "--tasks", ",".join(TASKS),
           "--out", str(out), *extra]
    return cmd + [f"--data-files={t}:{s}={p}" for t, files in bench.items() for s, p in files.items()]


def _killed_run(inputs: Path, bench: dict, out: Path, at: str) -> Path:  # noqa: F811
    """A real ``purify`` process SIGKILLed at fault point ``at``; returns its work area."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TCQA_FAULT_AT": at}
    proc = subprocess.run(_command(inputs, bench, out, "-q"), env=env)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    return next_generation_dir(out)


def test_kill9_after_a_shard_then_a_rerun_reuses_it_and_writes_the_same_bytes(
        inputs, bench, reference, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    work = _killed_run(inputs, bench, out, "purify-shard")  # killed after the first shard's record
    assert [p.name for p in (work / "done").iterdir()] == ["000000.json"]
    assert (work / "out" / "a.jsonl").is_file() and not (work / "out" / "b.jsonl").exists()
    # what else a kill leaves: a half-written file in the work area, an older run's staging folder
    (work / "out" / "sub").mkdir(exist_ok=True)
    (work / "out" / "sub" / ".c.jsonl.gz.x1y2.tmp").write_bytes(b"half")
    (tmp_path / f"{STAGING_PREFIX}out-4242-0123abcd").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    again = subprocess.run(_command(inputs, bench, out), env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "reused 1 of 4 output shards" in again.stderr
    assert "4 output shards, 1 reused from a killed run" in again.stdout
    _same_output(out, reference[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_rerun_verifies_each_shard_and_starts_clean_on_other_options(
        inputs, bench, reference, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    work = _killed_run(inputs, bench, out, "purify-commit")  # every shard done, nothing committed
    assert len(list((work / "done").iterdir())) == 4
    # a shard changed since its record: written again; the others reused
    shard = work / "out" / "b.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b"e", b"E", 1))
    report = purify([str(inputs)], TASKS, out, data_files=bench, quiet=True)
    assert report["shards"] == {"total": 4, "reused": 3, "written": 1}
    _same_output(out, reference[0])
    # other options: nothing of the killed run is reused
    dropped = tmp_path / "dropped"
    _killed_run(inputs, bench, dropped, "purify-commit")
    report = purify([str(inputs)], TASKS, dropped, data_files=bench, mode="drop", quiet=True)
    assert report["shards"]["reused"] == 0
    assert report["totals"]["dropped"] == report["totals"]["contaminated_docs"]
    ref_drop = purify([str(inputs)], TASKS, tmp_path / "ref_drop", data_files=bench, mode="drop", quiet=True)
    assert ref_drop["shards"]["reused"] == 0
    _same_output(dropped, tmp_path / "ref_drop")


def test_a_second_writer_is_refused_while_one_holds_the_output(inputs, bench, tmp_path):  # noqa: F811
    import fcntl

    from tcqa_data.errors import TcqaError

    out = tmp_path / "out"
    with open(lock_path(out), "w") as fh:  # another process's lock: flock is per open file
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write("4242\n")
        fh.flush()
        with pytest.raises(TcqaError, match="pid 4242"):
            purify([str(inputs)], TASKS, out, data_files=bench, quiet=True)
    assert not out.exists() and not next_generation_dir(out).exists()


def test_bad_input_lines_name_file_and_line_or_are_counted(inputs, bench, tmp_path):  # noqa: F811
    src = tmp_path / "src"
    src.mkdir()
    lines = (inputs / "a.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[6] = '{"title": "x", "text": 5}\n'
    (src / "bad.jsonl").write_text("".join(lines), encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:7.*text"):
        purify([str(src)], TASKS, tmp_path / "o", data_files=bench, quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    report = purify([str(src)], TASKS, tmp_path / "o", data_files=bench, on_error="skip", quiet=True)
    assert sum(report["corpus"]["skipped"]["counts"].values()) == 1
    assert report["totals"]["contaminated_docs"] > 0
    # the bad line is no doc: written as it was
    assert lines[6] in (tmp_path / "o" / "bad.jsonl").read_text(encoding="utf-8")


def test_lm_eval_task_names_purify_as_the_builtin_task(inputs, bench, tmp_path):  # noqa: F811
    """lm-eval's own mc_taco config (``include:`` of the YAML lm-eval ships) over the same rows as
    JSON: the purified inputs are the built-in mc_taco's bytes; the log names the lm-eval task."""
    lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    import csv
    import textwrap

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with open(bench["mc_taco"]["test"], encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    columns = ["sentence", "question", "answer", "label", "category"]
    records = [{**dict(zip(columns, r, strict=True)), "label": {"no": 0, "yes": 1}[r[3]]} for r in rows]
    data = tmp_path / "mc_test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mc_taco_local.yaml").write_text(textwrap.dedent(f"""\
        include: {Path(lm_eval_tasks.__file__).parent / "mc_taco" / "default.yaml"}
        task: tcqa_purify_mc_taco
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
            validation: {data}
        """))
    lm = purify([str(inputs)], ["tcqa_purify_mc_taco"], tmp_path / "lm", lm_eval_include=[tasks],
                lm_eval_include_defaults=False, quiet=True)
    own = purify([str(inputs)], ["mc_taco"], tmp_path / "own", data_files={"mc_taco": bench["mc_taco"]},
                 quiet=True)
    assert lm["totals"] == own["totals"] and lm["totals"]["contaminated_docs"] > 0
    assert list(lm["tasks"]) == ["tcqa_purify_mc_taco"]
    for name in ("a.jsonl", "b.jsonl", "sub/c.jsonl.gz", "sub/d.parquet"):
        assert (tmp_path / "lm" / name).read_bytes() == (tmp_path / "own" / name).read_bytes(), name
    log = pq.read_table(tmp_path / "lm" / "removal_log.parquet").to_pylist()
    assert {t for r in log for t in r["matched_tasks"]} == {"tcqa_purify_mc_taco"}
