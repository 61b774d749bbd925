"""Corpora read by URL from a real S3-compatible server (moto's, started here on 127.0.0.1, read
through s3fs): the same documents, refs, PREP_DIR and purified bytes as the same files on disk;
byte-range and row-group shards over range requests; one line for a missing object, a denied
bucket and a wrong endpoint, with nothing written; no credential in anything written."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_fixtures import run
from test_stream import WIKI_DOCS, bench, injected_corpus  # noqa: F401 - fixture

from tcqa_data.decontam.readers import iter_documents, resolve_inputs, split_input

SECRET = "tcqa-test-secret-7f3a91"  # must never appear in anything written
TASKS = ["mc_taco", "squad_completion"]


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 and the environment that points the AWS chain at it."""
    s3fs = pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "tcqa-test-key",
           "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "2"}
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("corp")
    try:
        yield SimpleNamespace(fs=fs, env=env)
    finally:
        mp.undo()
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


@pytest.fixture(scope="module")
def corpus(s3, wiki_sample, bench, tmp_path_factory):  # noqa: F811
    """A slice of the stream tests' corpus (wiki articles, some with benchmark text) as two
    .json.gz objects, a plain .jsonl and a Parquet object of small row groups, in the bucket
    (s3://corp/wiki/) and in a local folder, byte for byte."""
    tmp = tmp_path_factory.mktemp("objcorpus")
    plain, _ = injected_corpus(wiki_sample, bench, tmp)
    lines = plain.read_bytes().splitlines(keepends=True)
    lines = lines[:30] + lines[WIKI_DOCS:]
    local = tmp / "wiki"
    local.mkdir()
    (local / "part-0.json.gz").write_bytes(gzip.compress(b"".join(lines[:12]), mtime=0))
    (local / "part-1.json.gz").write_bytes(gzip.compress(b"".join(lines[12:25]), mtime=0))
    (local / "part-2.jsonl").write_bytes(b"".join(lines[25:40]))
    pq.write_table(pa.Table.from_pylist([json.loads(x) for x in lines[40:]]), local / "part-3.parquet",
                   row_group_size=4)
    for f in sorted(local.iterdir()):
        s3.fs.pipe(f"corp/wiki/{f.name}", f.read_bytes())
    s3.fs.pipe("corp/wiki/.hidden.jsonl", b"{}\n")
    s3.fs.pipe("corp/wiki/README.md", b"notes")
    return local


def _docs(specs):
    return [(Path(d.ref.rsplit(":", 1)[0]).name, d.ref.rsplit(":", 1)[1], d.text)
            for inp in resolve_inputs(specs) for d in iter_documents(inp)]


def test_prefix_glob_and_object_expand_as_locally(s3, corpus):
    skipped = []
    inputs = resolve_inputs(["s3://corp/wiki"], skipped=skipped)
    assert [(i.path, i.format, i.size) for i in inputs] == [
        (f"s3://corp/wiki/{f.name}", fmt, f.stat().st_size) for f, fmt in
        zip(sorted(corpus.iterdir()), ["jsonl.gz", "jsonl.gz", "jsonl", "parquet"], strict=True)]
    assert [s["path"] for s in skipped] == ["s3://corp/wiki/README.md"]
    assert [i.path for i in resolve_inputs(["s3://corp/wiki/*.json.gz"])] == [
        "s3://corp/wiki/part-0.json.gz", "s3://corp/wiki/part-1.json.gz"]
    assert _docs(["s3://corp/wiki/"]) == _docs([str(corpus)])  # same texts, same file:line refs
    assert _docs(["s3://corp/wiki/part-2.jsonl"])[0][:2] == ("part-2.jsonl", "1")


def test_byte_range_and_row_group_shards_over_range_requests(s3, corpus):
    for name, target in (("part-2.jsonl", 20_000), ("part-3.parquet", 5_000)):
        (remote,) = resolve_inputs([f"s3://corp/wiki/{name}"])
        (local,) = resolve_inputs([str(corpus / name)])
        shards = split_input(remote, target)
        assert len(shards) > 1, name
        assert [(s.kind, s.start, s.end, s.first_line) for s in shards] == [
            (s.kind, s.start, s.end, s.first_line) for s in split_input(local, target)]
        got = [(d.row, d.text) for s in shards for d in iter_documents(s)]
        assert got == [(d.row, d.text) for d in iter_documents(local)], name


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def local_runs(corpus, bench, tmp_path_factory):  # noqa: F811
    """Stream decontaminate (PREP_DIR) and purify of the local copy: what every bucket run must equal."""
    from tcqa_data.prep.pipeline import decontaminate
    from tcqa_data.prep.purify import purify

    root = tmp_path_factory.mktemp("local_runs")
    decontaminate(None, TASKS, root / "prep", data_files=bench, corpus=[str(corpus)], quiet=True)
    report = purify([str(corpus)], TASKS, root / "out", data_files=bench, quiet=True)
    assert report["totals"]["contaminated_docs"] > 0
    return SimpleNamespace(prep=_tree(root / "prep"), out=_tree(root / "out"))


def test_stream_decontaminate_and_purify_from_the_bucket_equal_local(s3, corpus, bench, local_runs,  # noqa: F811
                                                                     tmp_path):
    from tcqa_data.prep.pipeline import decontaminate
    from tcqa_data.prep.purify import purify

    decontaminate(None, TASKS, tmp_path / "prep_s3", data_files=bench, corpus=["s3://corp/wiki"], workers=2,
                  quiet=True)
    assert _tree(tmp_path / "prep_s3") == local_runs.prep
    purify(["s3://corp/wiki/"], TASKS, tmp_path / "out_s3", quiet=True, data_files=bench)
    remote = _tree(tmp_path / "out_s3")
    assert remote == local_runs.out
    assert {"part-0.json.gz", "part-3.parquet"} <= set(remote)
    for written in [*(tmp_path / "prep_s3").rglob("*"), *(tmp_path / "out_s3").rglob("*")]:
        if written.is_file():
            assert SECRET.encode() not in written.read_bytes(), written


@pytest.mark.ray
def test_stream_decontaminate_and_purify_on_ray_read_and_write_the_bucket(s3, corpus, bench,  # noqa: F811
                                                                         local_runs, tmp_path):
    from conftest import private_ray

    from tcqa_data.object_outputs import COMMIT
    from tcqa_data.prep.pipeline import decontaminate
    from tcqa_data.prep.purify import purify

    with private_ray(env=s3.env):
        decontaminate(None, TASKS, tmp_path / "prep_ray", data_files=bench, corpus=["s3://corp/wiki"],
                      engine="ray", quiet=True)
        purify(["s3://corp/wiki"], TASKS, "s3://corp/ray", data_files=bench, engine="ray", quiet=True)
    assert _tree(tmp_path / "prep_ray") == local_runs.prep
    s3.fs.invalidate_cache()
    written = {k.removeprefix("corp/ray/"): s3.fs.cat_file(k) for k in s3.fs.find("corp/ray")}
    assert {k: v for k, v in written.items() if k != COMMIT} == local_runs.out


def test_index_corpus_reads_the_bucket_into_a_local_index(s3, corpus, tmp_path, monkeypatch, capsys):
    from tcqa_data.decontam.index_files import read_manifest

    code, _, err = run(["index-corpus", "s3://corp/wiki/", "--out", tmp_path / "idx", "--no-minhash",
                        "--workers", "1", "--quiet"], monkeypatch, capsys)
    assert code == 0, err
    code, _, err = run(["index-corpus", str(corpus), "--out", tmp_path / "idx_local", "--no-minhash",
                        "--workers", "1", "--quiet"], monkeypatch, capsys)
    assert code == 0, err
    remote, local = read_manifest(tmp_path / "idx"), read_manifest(tmp_path / "idx_local")
    assert remote["counts"] == local["counts"]
    assert [e["sha256"] for e in remote["inputs"]] == [e["sha256"] for e in local["inputs"]]
    assert all(SECRET.encode() not in p.read_bytes() for p in (tmp_path / "idx").rglob("*") if p.is_file())
    code, _, err = run(["index-corpus", "s3://corp/wiki/", "--out", "s3://corp/index"], monkeypatch, capsys)
    assert code == 2 and "the index must be on a file system" in err


def _one_error(args, monkeypatch, capsys) -> str:
    code, out, err = run(args, monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), (code, out, err)
    assert SECRET not in err
    return lines[0]


def test_missing_denied_and_wrong_endpoint_are_one_line_and_write_nothing(s3, corpus, bench, tmp_path,  # noqa: F811
                                                                         monkeypatch, capsys):
    import moto.settings
    import s3fs

    bench_args = [a for task, files in bench.items() for split, p in files.items()
                  for a in ("--data-files", f"{task}:{split}={p}")]
    out = tmp_path / "out"
    line = _one_error(["decontaminate", "--corpus", "s3://corp/wiki/nope.jsonl", "--out", out, *bench_args],
                      monkeypatch, capsys)
    assert line == "Error: s3://corp/wiki/nope.jsonl: no such object or prefix"
    line = _one_error(["purify", "s3://nobucket/wiki/", "--out", out, *bench_args], monkeypatch, capsys)
    assert line == "Error: s3://nobucket/wiki/: no such object or prefix"
    # denied: the server checks credentials, and this key is unknown to it
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    s3fs.S3FileSystem.clear_instance_cache()
    line = _one_error(["index-corpus", "s3://corp/wiki/", "--out", out], monkeypatch, capsys)
    assert line.startswith("Error: s3://corp/wiki/: access denied (")
    monkeypatch.undo()
    # a wrong endpoint: nothing listens there
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        line = _one_error(["purify", "s3://corp/wiki/", "--out", out, *bench_args], monkeypatch, capsys)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert line.startswith("Error: s3://corp/wiki/: cannot read it: EndpointConnectionError")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_purify_to_the_bucket_commits_by_a_manifest_and_a_killed_run_resumes(s3, corpus, bench,  # noqa: F811
                                                                             local_runs):
    import hashlib
    import os
    import subprocess
    import sys

    from tcqa_data.errors import ConfigError, InputError
    from tcqa_data.object_outputs import COMMIT
    from tcqa_data.prep.purify import purify

    # killed (kill -9) after its first shard: no commit, the prefix is not read as a corpus
    cmd = [sys.executable, "-m", "tcqa_data", "purify", "s3://corp/wiki/", "--tasks", ",".join(TASKS),
           "--out", "s3://corp/out", "-q"]
    cmd += [f"--data-files={t}:{s}={p}" for t, files in bench.items() for s, p in files.items()]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "TCQA_FAULT_AT": "purify-shard"}
    proc = subprocess.run(cmd, env=env)
    assert proc.returncode == -9
    s3.fs.invalidate_cache()
    left = [k.removeprefix("corp/out/") for k in s3.fs.find("corp/out")]
    assert COMMIT not in left and any(not k.startswith("_tcqa_work/") for k in left)
    with pytest.raises(InputError, match=r"s3://corp/out: an unfinished output"):
        resolve_inputs(["s3://corp/out"])
    s3.fs.pipe("corp/out/stray.jsonl", b'{"text": "a stray object, never output"}\n')
    # the rerun reuses the finished shard and commits the bytes a local run writes
    report = purify(["s3://corp/wiki/"], TASKS, "s3://corp/out", data_files=bench, quiet=True)
    assert report["shards"]["reused"] >= 1
    s3.fs.invalidate_cache()
    out = {k.removeprefix("corp/out/"): s3.fs.cat_file(k) for k in s3.fs.find("corp/out")}
    commit = json.loads(out.pop(COMMIT))
    assert out == local_runs.out  # the stray object is gone, the manifest names every object
    assert commit["objects"] == {k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest(),
                                     "kind": "shard" if k.startswith("part-") else "report"}
                                 for k, v in out.items()}
    assert all(SECRET.encode() not in v for v in out.values())
    # an object the commit does not name is never read as output
    s3.fs.pipe("corp/out/zz-stray.jsonl", b'{"text": "written after the commit"}\n')
    got = resolve_inputs(["s3://corp/out/"])
    assert sorted(i.path for i in got) == sorted(f"s3://corp/out/{k}" for k, v in commit["objects"].items()
                                                 if v["kind"] == "shard")
    # a prefix holding objects purify did not write is never written to
    with pytest.raises(ConfigError, match=r"s3://corp/other holds 1 object\(s\) purify did not write"):
        s3.fs.pipe("corp/other/mine.txt", b"x")
        purify(["s3://corp/wiki/"], TASKS, "s3://corp/other", data_files=bench, quiet=True)
    with pytest.raises(ConfigError, match=r"lies inside the input s3://corp/wiki"):
        purify(["s3://corp/wiki/"], TASKS, "s3://corp/wiki/clean", data_files=bench, quiet=True)
