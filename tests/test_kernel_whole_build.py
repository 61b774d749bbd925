"""A whole index (n-grams, MinHash and the text store) is the same bytes whichever path computes it:
the compiled numba kernels or the numpy fallback (``TCQA_KERNEL=numpy``), from every input format
(``.jsonl``, ``.jsonl.zst``, ``.parquet``, a folder of ``.txt`` files) made of real wiki articles,
on local worker processes and once on Ray."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import private_ray
from typer.testing import CliRunner

from tcqa_data.cli import app

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HAS_RAY = importlib.util.find_spec("ray") is not None
ARTICLES = {"jsonl": range(0, 80), "parquet": range(80, 160), "zst": range(160, 210), "txt": range(210, 240)}


@pytest.fixture(scope="module")
def inputs(wiki_sample, tmp_path_factory) -> list[str]:
    """240 real articles in four inputs: JSONL, zstd JSONL, Parquet (with a title column) and a
    folder of 30 .txt files (one article each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    folder = tmp_path_factory.mktemp("formats")
    lines = wiki_sample.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [json.loads(line) for line in lines[:240]]
    (folder / "a.jsonl").write_text("".join(lines[i] for i in ARTICLES["jsonl"]), encoding="utf-8")
    table = pa.table({"title": [rows[i]["title"] for i in ARTICLES["parquet"]],
                      "text": [rows[i]["text"] for i in ARTICLES["parquet"]]})
    pq.write_table(table, folder / "b.parquet", row_group_size=25)  # several row groups
    raw = "".join(lines[i] for i in ARTICLES["zst"]).encode("utf-8")
    (folder / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    (folder / "txt").mkdir()
    for i in ARTICLES["txt"]:
        (folder / "txt" / f"{i:04d}.txt").write_text(rows[i]["text"], encoding="utf-8")
    return [str(folder / "a.jsonl"), str(folder / "b.parquet"), str(folder / "c.jsonl.zst"),
            str(folder / "txt")]


def _build(inputs: list[str], out: Path, *extra: str) -> None:
    res = CliRunner().invoke(app, ["index-corpus", *inputs, "--out", str(out), "--workers", "2", "--quiet",
                                   *extra])
    assert res.exit_code == 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


def _files(index: Path) -> dict[str, bytes]:
    """Every file of an index; the manifest without its build record (times, workers, engine)."""
    out = {}
    for p in sorted(index.rglob("*")):
        if p.is_file():
            rel = p.relative_to(index).as_posix()
            if rel == "manifest.json":
                m = json.loads(p.read_text())
                m.pop("build")
                m.pop("manifest_xxh3", None)  # the manifest's own checksum covers the build times too
                out[rel] = json.dumps(m, sort_keys=True).encode()
            else:
                out[rel] = p.read_bytes()
    return out


def _assert_same(a: Path, b: Path) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    assert [k for k in fa if fa[k] != fb[k]] == []


@pytest.fixture(scope="module")
def numba_build(inputs, tmp_path_factory) -> Path:
    from tcqa_data.decontam.core import kernel

    mp = pytest.MonkeyPatch()
    mp.setenv(kernel.ENV, "numba")
    try:
        if not kernel.enabled():
            pytest.skip("numba is not installed: nothing to compare the numpy fallback with")
        out = tmp_path_factory.mktemp("kernels") / "numba"
        _build(inputs, out)
    finally:
        mp.undo()
    return out


def test_numpy_fallback_builds_the_same_index_from_every_format(inputs, numba_build, tmp_path, monkeypatch):
    from tcqa_data.decontam.core import kernel

    monkeypatch.setenv(kernel.ENV, "numpy")
    assert not kernel.enabled()
    _build(inputs, tmp_path / "numpy")
    _assert_same(numba_build, tmp_path / "numpy")
    files = _files(numba_build)
    m = json.loads((numba_build / "manifest.json").read_text())
    # every part was built, from every format
    assert sorted(e["format"] for e in m["inputs"]) == ["jsonl", "jsonl.zst", "parquet"] + ["txt"] * 30
    assert m["counts"]["docs"] == 240 and m["counts"]["minhash"]["n_windows"] > 10_000
    assert any(k.startswith("ngrams/") for k in files) and "minhash/params.json" in files
    assert any(k.startswith("textstore/") for k in files)
    store = json.loads((numba_build / "textstore" / "meta.json").read_text())
    assert store["anchors"]["inputs"]  # anchors of every input, and the zstd input's text copied


@pytest.fixture(scope="module")
def ray_numpy():
    """A local Ray instance (2 CPUs) whose workers run the numpy fallback (``TCQA_KERNEL=numpy``
    in their environment); ``--engine ray`` joins it."""
    with private_ray({"TCQA_KERNEL": "numpy"}) as ray:
        yield ray


@pytest.mark.ray
def test_numpy_fallback_on_ray_builds_the_same_index(inputs, numba_build, ray_numpy, tmp_path, monkeypatch):
    from tcqa_data.decontam.core import kernel

    monkeypatch.setenv(kernel.ENV, "numpy")  # the driver's own steps too

    @ray_numpy.remote
    def worker_kernel() -> str:
        from tcqa_data.decontam.core import kernel as k

        return k.name()

    assert set(ray_numpy.get([worker_kernel.remote() for _ in range(4)])) == {"numpy"}
    from tcqa_data.engines import RayEngine
    tasks: list[str] = []
    ray_map = RayEngine.map

    def counted(self, fn, calls, **kw):
        tasks.extend(getattr(fn, "__name__", "?") for _ in calls)
        return ray_map(self, fn, calls, **kw)

    monkeypatch.setattr(RayEngine, "map", counted)
    _build(inputs, tmp_path / "ray", "--engine", "ray")
    assert len(set(tasks)) >= 4, tasks  # checksums, map, reduce and text-store steps ran as Ray tasks
    _assert_same(numba_build, tmp_path / "ray")
