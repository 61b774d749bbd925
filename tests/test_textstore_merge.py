"""The merged anchor table (text store version 4): one table of key-range parts for all inputs
gives the same candidates as the per-input runs (version 3), is built from those runs without
reading the corpus again, extended by ``--append``, redone from text when it no longer matches
the index's inputs, and a build killed before ``meta.json`` leaves the previous store. Past
``ANCHOR_MERGE_GROUP`` runs the merge runs in two levels and writes the same table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.core import packed
from tcqa_data.decontam.core.hashing import batch_ngram_hashes
from tcqa_data.decontam.index_files import reseal
from tcqa_data.decontam.textstore import anchor_index as ts_index
from tcqa_data.decontam.textstore import anchor_merge as ts_merge
from tcqa_data.decontam.textstore import anchors as ts_anchors
from tcqa_data.decontam.textstore import build as ts_build
from tcqa_data.decontam.textstore.build import build_text_store
from tcqa_data.decontam.textstore.store import STORE_DIR, TextStore, store_summary
from tcqa_data.engines import LocalEngine

_STORE_INPUT = ts_build._store_input
N_INPUTS = 5
DOCS_PER_INPUT = 120
RUN = 40_000  # entries per run and per merged part: several of each on this corpus


@pytest.fixture(scope="module")
def inputs(wiki_sample: Path, tmp_path_factory) -> list[Path]:
    """Real Wikipedia articles, as N_INPUTS JSONL inputs of DOCS_PER_INPUT articles."""
    root = tmp_path_factory.mktemp("merge")
    lines = wiki_sample.read_text(encoding="utf-8").splitlines()
    out = []
    for f in range(N_INPUTS):
        out.append(root / f"part{f}.jsonl")
        part = lines[f * DOCS_PER_INPUT:(f + 1) * DOCS_PER_INPUT]
        out[-1].write_text("\n".join(part) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def queries(inputs: list[Path], mc_taco_test: Path) -> list[str]:
    """Edited passages of the corpus (10% of words dropped), MC-TACO sentences (some are in the
    wiki sample), common phrases (k-grams in more than ANCHOR_MAX_DF docs) and unrelated text."""
    rng = np.random.default_rng(7)
    texts = [json.loads(line)["text"] for p in inputs for line in p.read_text(encoding="utf-8").splitlines()]
    out = []
    for t in texts[::4]:
        words = t.split()
        if len(words) > 120:
            a = int(rng.integers(0, len(words) - 100))
            out.append(" ".join(w for w in words[a:a + 100] if rng.random() > 0.1))
    rows = mc_taco_test.read_text(encoding="utf-8").splitlines()
    sentences = sorted({line.split("\t")[0] for line in rows})
    out += sentences[:300]
    out += ["it is one of the largest in the world and one of the most", "in the United States and in the",
            "zebra quartz vortex nimbus plinth"]
    return out


def _env(monkeypatch, merge: bool = True) -> None:
    monkeypatch.setattr(ts_anchors, "ANCHOR_RUN", RUN)
    monkeypatch.setattr(ts_merge, "ANCHOR_RUN", RUN)  # the merged parts' size (plan_anchor_parts)
    monkeypatch.setattr(ts_anchors, "_ANCHOR_BATCH_CHARS", 100_000)  # runs end at batch ends
    # no merge: every index looks as if it had 2**32 docs or more (per-input runs, version 3's layout)
    monkeypatch.setattr(ts_build, "MERGED_MAX_DOCS", 1 << 32 if merge else 0)
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)  # these small stores merge too


def _tiers(idx: Path, queries: list[str]) -> tuple[list[list[int]], list[list[int]]]:
    return ts_index.AnchorIndex(idx).candidate_tiers(queries, 16, 2, 8)


def _meta(idx: Path) -> dict:
    return json.loads((idx / STORE_DIR / "meta.json").read_text())


def _merged_entries(idx: Path) -> np.ndarray:
    """Every (hash << 32 | global doc) entry of the store's anchors, whichever layout."""
    meta = _meta(idx)
    store = idx / STORE_DIR
    out = []
    tables = []
    if meta.get("anchors"):
        m = meta["anchors"]
        tables += [(p["name"], m["dir_bits"], m["id_bits"], p["cells"], 0) for p in m["parts"]]
    manifest = json.loads((idx / "manifest.json").read_text())
    offsets = {e["sha256"]: e["doc_offset"] for e in manifest["inputs"]}
    for rec in meta["inputs"].values():
        off = offsets[rec["id"]["sha256"]]
        tables += [(r["name"], r["dir_bits"], r["id_bits"], [0, 1 << r["dir_bits"]], off)
                   for r in rec["anchors"]]
    for name, d, ib, (c0, c1), off in tables:
        cells, words = np.load(store / f"{name}.cells.npy"), np.load(store / f"{name}.words.npy")
        k, ids = packed.decode_range(cells, words, c0, c1, d, ib)
        out.append((k << np.uint64(32)) | (ids + off).astype(np.uint64))
    return np.sort(np.concatenate(out))


def _count_reads(monkeypatch) -> list[str]:
    """Paths of the inputs the text store pass reads (``_store_input``: the corpus, once each)."""
    reads: list[str] = []
    real = ts_build._store_input
    monkeypatch.setattr(ts_build, "_store_input", lambda **kw: reads.append(Path(kw["e"]["path"]).name)
                        or real(**kw))
    return reads


def test_merged_table_gives_the_per_input_candidates_and_upgrades_a_version3_store(
        inputs, queries, tmp_path, monkeypatch):
    _env(monkeypatch, merge=False)
    idx = tmp_path / "idx"
    build_index([str(p) for p in inputs], idx, minhash=False, quiet=True, workers=1)
    meta = _meta(idx)
    assert "anchors" not in meta and sum(len(r["anchors"]) for r in meta["inputs"].values()) > 2 * N_INPUTS
    per_input = _tiers(idx, queries)
    assert sum(map(len, per_input[0])) > 100 and sum(map(len, per_input[1])) > 100
    # both kinds of query k-grams: in 1..ANCHOR_MAX_DF docs, and in more (dropped)
    entries = _merged_entries(idx)
    hashes, df = np.unique(entries >> np.uint64(32), return_counts=True)
    ai = ts_index.AnchorIndex(idx)
    flat, _ = batch_ngram_hashes(queries, [ts_anchors.ANCHOR_K], ai.scheme, ai.seed)[ts_anchors.ANCHOR_K]
    q_df = df[np.isin(hashes, np.unique(np.asarray(flat, dtype=np.uint64) >> np.uint64(32)))]
    assert (q_df > ts_anchors.ANCHOR_MAX_DF).any() and (q_df <= ts_anchors.ANCHOR_MAX_DF).any()
    # a store written by version 3 of the code: the same layout, read as it is
    meta["version"] = 3
    (idx / STORE_DIR / "meta.json").write_text(json.dumps(meta))
    assert _tiers(idx, queries) == per_input
    before = store_summary(idx)
    # a build merges its runs without reading the corpus
    _env(monkeypatch, merge=True)
    reads = _count_reads(monkeypatch)
    meta = build_text_store(idx)
    assert reads == [] and meta["version"] == ts_build.STORE_VERSION
    merged = meta["anchors"]
    assert len(merged["parts"]) > 5 and max(p["entries"] for p in merged["parts"]) <= 1.2 * RUN
    assert all(r["anchors"] == [] for r in meta["inputs"].values())
    assert not [f for f in (idx / STORE_DIR).iterdir() if ".anchors-" in f.name]  # runs deleted
    assert np.array_equal(_merged_entries(idx), entries)
    assert len(ts_index.AnchorIndex(idx).runs) == len(merged["parts"])
    assert _tiers(idx, queries) == per_input
    after = store_summary(idx)
    assert after["anchor_entries"] == before["anchor_entries"] == len(entries)
    # one table: a query k-gram is looked up once, its chance match is the table's entries / 2**32
    assert after["anchor_chance_match_rate"] == pytest.approx(len(entries) / 2**32, rel=1e-12)
    assert 0.8 * before["bytes"]["anchors"] < after["bytes"]["anchors"] < 1.2 * before["bytes"]["anchors"]
    # a store built from scratch (one process per input, then per part): the same files
    monkeypatch.setattr(ts_build, "_store_input", _STORE_INPUT)  # a lambda does not pickle
    files = {f.name: f.read_bytes() for f in sorted((idx / STORE_DIR).iterdir())}
    shutil.rmtree(idx / STORE_DIR)
    build_text_store(idx, workers=2)
    assert {f.name: f.read_bytes() for f in sorted((idx / STORE_DIR).iterdir())} == files


def test_per_input_and_merged_candidates_agree_for_every_cap(inputs, queries, tmp_path, monkeypatch):
    """candidate_tiers with other caps and min_shared: the merged table equals the runs."""
    _env(monkeypatch, merge=False)
    a, b = tmp_path / "runs", tmp_path / "merged"
    build_index([str(p) for p in inputs[:3]], a, minhash=False, quiet=True, workers=1)
    _env(monkeypatch, merge=True)
    build_index([str(p) for p in inputs[:3]], b, minhash=False, quiet=True, workers=1)
    assert "anchors" not in _meta(a) and _meta(b)["anchors"]["parts"]
    ra, rb = ts_index.AnchorIndex(a), ts_index.AnchorIndex(b)
    for top, min_shared, weak in ((1, 1, 0), (64, 2, 64), (3, 3, 1), (8, 1, 8)):
        got = rb.candidate_tiers(queries, top, min_shared, weak)
        assert ra.candidate_tiers(queries, top, min_shared, weak) == got
    assert ra.candidates(queries[:5], 4) == rb.candidates(queries[:5], 4)


@pytest.mark.parametrize("group", [4096, 2])
def test_append_merges_without_reading_old_inputs_and_equals_a_full_build(inputs, queries, tmp_path,
                                                                         monkeypatch, group):
    """``group``: runs per level-1 group (2: the append's runs are merged in two levels, the
    old table's parts read by level 2 beside the group tables)."""
    _env(monkeypatch)
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_GROUP", group)
    idx, full = tmp_path / "idx", tmp_path / "full"
    build_index([str(p) for p in inputs[:3]], idx, minhash=False, quiet=True, workers=1)
    first = _meta(idx)["anchors"]
    assert first["generation"] == 1 and len(first["inputs"]) == 3
    reads = _count_reads(monkeypatch)
    build_index([str(p) for p in inputs[3:]], idx, minhash=False, quiet=True, workers=1, append=True)
    assert reads == [p.name for p in inputs[3:]]  # the new inputs only
    meta = _meta(idx)
    assert meta["anchors"]["generation"] == 2 and len(meta["anchors"]["inputs"]) == N_INPUTS
    names = {f.name for f in (idx / STORE_DIR).iterdir()}
    assert not [n for n in names if "anchors-g0001" in n or ".anchors-" in n]  # old parts, new runs: gone
    build_index([str(p) for p in inputs], full, minhash=False, quiet=True, workers=1)
    assert np.array_equal(_merged_entries(idx), _merged_entries(full))
    assert _tiers(idx, queries) == _tiers(full, queries)
    assert store_summary(idx)["anchor_entries"] == store_summary(full)["anchor_entries"]
    ends = [0, N_INPUTS * DOCS_PER_INPUT - 1]
    assert TextStore.open(idx).texts(ends) == TextStore.open(full).texts(ends)


def test_a_merged_table_of_other_inputs_is_recomputed_from_text(inputs, queries, tmp_path, monkeypatch):
    """The store of [0, 1, 2] left in an index of [0, 2]: input 2's doc offset moved and input 1 is
    gone, so the merged table is not used (no candidates from it) and a build recomputes the
    anchors of both inputs from their text: the same store as a fresh build."""
    _env(monkeypatch)
    old, idx, fresh = tmp_path / "old", tmp_path / "idx", tmp_path / "fresh"
    build_index([str(p) for p in inputs[:3]], old, minhash=False, quiet=True, workers=1)
    kept = [str(inputs[0]), str(inputs[2])]
    build_index(kept, idx, minhash=False, quiet=True, workers=1, text_store="none")
    build_index(kept, fresh, minhash=False, quiet=True, workers=1)
    shutil.copytree(old / STORE_DIR, idx / STORE_DIR)
    reseal(idx)  # the stale store put in on purpose (an unsealed copy is an extra-files error)
    assert ts_index.AnchorIndex(idx).runs == []  # never the wrong docs
    reads = _count_reads(monkeypatch)
    build_text_store(idx)
    reseal(idx)
    assert sorted(reads) == [inputs[0].name, inputs[2].name]
    assert _tiers(idx, queries) == _tiers(fresh, queries)
    assert np.array_equal(_merged_entries(idx), _merged_entries(fresh))
    assert _meta(idx)["anchors"]["generation"] == 2  # old's names are not reused before meta.json moves


def test_a_build_killed_before_meta_leaves_the_old_store(inputs, queries, tmp_path, monkeypatch):
    _env(monkeypatch, merge=False)
    idx = tmp_path / "idx"
    build_index([str(p) for p in inputs[:3]], idx, minhash=False, quiet=True, workers=1)
    old_meta, ref = _meta(idx), _tiers(idx, queries)
    _env(monkeypatch)

    def killed(path, obj):
        raise KeyboardInterrupt  # the parts are written, meta.json is not

    monkeypatch.setattr(ts_build, "write_json_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        build_text_store(idx)
    monkeypatch.undo()
    _env(monkeypatch)
    assert _meta(idx) == old_meta
    assert [f for f in (idx / STORE_DIR).iterdir() if f.name.startswith("anchors-g")]  # unreferenced parts
    assert _tiers(idx, queries) == ref
    reads = _count_reads(monkeypatch)
    build_text_store(idx)
    assert reads == [] and _tiers(idx, queries) == ref
    assert _meta(idx)["anchors"]["generation"] == 1
    # killed after meta.json, before the files it no longer names are deleted: the new store is
    # read as it is, and the next build deletes them
    store = idx / STORE_DIR
    stale = [store / f"{'0' * 32}.anchors-0000.{f}.npy" for f in ("cells", "words")]
    for f, name in zip(stale, ("cells", "words"), strict=True):
        shutil.copy(store / f"anchors-g0001-00000.{name}.npy", f)
    assert _tiers(idx, queries) == ref
    build_text_store(idx)
    assert not any(f.exists() for f in stale) and _tiers(idx, queries) == ref


def test_an_append_past_the_id_width_keeps_the_new_runs_beside_the_merged_table(inputs, queries, tmp_path,
                                                                                monkeypatch):
    """Global ordinals past MERGED_MAX_DOCS (2**32: the id of a ``hash << 32 | doc`` entry) are not
    merged: the new inputs keep their runs, looked up after the merged table's parts; the
    candidates and the chance-match rate (one lookup per table) are those of a full build."""
    _env(monkeypatch)
    idx, full = tmp_path / "idx", tmp_path / "full"
    build_index([str(p) for p in inputs[:3]], idx, minhash=False, quiet=True, workers=1)
    parts = _meta(idx)["anchors"]["parts"]
    monkeypatch.setattr(ts_build, "MERGED_MAX_DOCS", 3 * DOCS_PER_INPUT + 1)
    build_index([str(p) for p in inputs[3:]], idx, minhash=False, quiet=True, workers=1, append=True)
    meta = _meta(idx)
    assert meta["anchors"]["parts"] == parts and len(meta["anchors"]["inputs"]) == 3
    runs = [r for rec in meta["inputs"].values() for r in rec["anchors"]]
    assert len(runs) >= 2 and len(ts_index.AnchorIndex(idx).runs) == len(parts) + len(runs)
    _env(monkeypatch)
    build_index([str(p) for p in inputs], full, minhash=False, quiet=True, workers=1)
    assert _tiers(idx, queries) == _tiers(full, queries)
    assert np.array_equal(_merged_entries(idx), _merged_entries(full))
    summary = store_summary(idx)
    assert summary["anchor_entries"] == store_summary(full)["anchor_entries"]
    assert summary["anchor_chance_match_rate"] == pytest.approx(
        (meta["anchors"]["entries"] + sum(r["entries"] for r in runs)) / 2**32, rel=1e-12)
    # below the limit again, a build merges the runs into the next generation
    build_text_store(idx)
    assert _meta(idx)["anchors"]["generation"] == 2 and _tiers(idx, queries) == _tiers(full, queries)


def test_runs_stay_unmerged_until_there_are_anchor_merge_runs_of_them(inputs, queries, tmp_path, monkeypatch):
    """A merge costs every build CPU and memory: a store with fewer than ANCHOR_MERGE_RUNS runs
    outside the merged table keeps them (a query looks each up), and merges them all, with the
    table, once there are that many; the candidates are the same either way."""
    _env(monkeypatch)
    idx = tmp_path / "idx"
    build_index([str(p) for p in inputs[:2]], idx, minhash=False, quiet=True, workers=1)
    meta = _meta(idx)
    assert meta["anchors"]["generation"] == 1 and all(r["anchors"] == [] for r in meta["inputs"].values())
    # an append of fewer runs than the threshold: they stay beside the table
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 10_000)
    build_index([str(p) for p in inputs[2:4]], idx, minhash=False, quiet=True, workers=1, append=True)
    meta = _meta(idx)
    left = sum(len(r["anchors"]) for r in meta["inputs"].values())
    assert meta["anchors"]["generation"] == 1 and left >= 2
    assert len(ts_index.AnchorIndex(idx).runs) == len(meta["anchors"]["parts"]) + left
    unmerged = _tiers(idx, queries)
    # enough runs outside the table: the next build merges them (and the table) into one
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", left)
    meta = build_text_store(idx)
    assert meta["anchors"]["generation"] == 2 and all(r["anchors"] == [] for r in meta["inputs"].values())
    assert _tiers(idx, queries) == unmerged
    # more runs than one merge task reads (groups of 1 run): merged in two levels, still one table
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_RUNS", 1)
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_GROUP", 1)
    build_index([str(inputs[4])], idx, minhash=False, quiet=True, workers=1, append=True)
    meta = _meta(idx)
    assert meta["anchors"]["generation"] == 3 and all(r["anchors"] == [] for r in meta["inputs"].values())
    assert len(ts_index.AnchorIndex(idx).runs) == len(meta["anchors"]["parts"])
    # the default threshold: a small store keeps its runs
    monkeypatch.undo()
    assert ts_build.ANCHOR_MERGE_RUNS > 2
    small = tmp_path / "small"
    build_index([str(p) for p in inputs[:2]], small, minhash=False, quiet=True, workers=1)
    assert "anchors" not in _meta(small)


def _files(idx: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((idx / STORE_DIR).iterdir())}


def test_two_level_merge_writes_the_one_level_table_and_resumes_after_a_kill(inputs, queries, tmp_path,
                                                                              monkeypatch):
    """Past ANCHOR_MERGE_GROUP runs (3 here), groups of runs are merged into intermediate tables,
    then those into the final one, whose parts read no run: the same files as a one-level merge
    of the same runs (the same cuts and entries), the per-input runs' candidates, no intermediate
    table left. A build killed in level 2 leaves the old store; the next one writes the same."""
    _env(monkeypatch, merge=False)
    idx = tmp_path / "idx"
    build_index([str(p) for p in inputs], idx, minhash=False, quiet=True, workers=1)
    n_runs = sum(len(r["anchors"]) for r in _meta(idx)["inputs"].values())
    assert n_runs > 3 * 3
    per_input, runs = _tiers(idx, queries), _files(idx)
    _env(monkeypatch)
    build_text_store(idx)
    one_level = _files(idx)
    assert _tiers(idx, queries) == per_input

    def restore() -> None:
        shutil.rmtree(idx / STORE_DIR)
        (idx / STORE_DIR).mkdir()
        for name, data in runs.items():
            (idx / STORE_DIR / name).write_bytes(data)

    restore()
    monkeypatch.setattr(ts_build, "ANCHOR_MERGE_GROUP", 3)
    tasks: list[tuple[str, int, int]] = []
    real = ts_build.write_anchor_part

    def spy(**kw):
        tasks.append((kw["name"], len(kw["sources"]), len(kw["ranged"])))
        if kill and "-l" not in kw["name"]:
            raise KeyboardInterrupt  # level 1 written, level 2 not, nor meta.json
        return real(**kw)

    monkeypatch.setattr(ts_build, "write_anchor_part", spy)
    kill = True
    with pytest.raises(KeyboardInterrupt):
        build_text_store(idx)
    assert _meta(idx) == json.loads(runs["meta.json"]) and _tiers(idx, queries) == per_input
    assert [f for f in (idx / STORE_DIR).iterdir() if "-l0" in f.name]  # unreferenced group tables
    kill, tasks = False, []
    build_text_store(idx)
    level1 = [t for t in tasks if "-l" in t[0]]
    level2 = [t for t in tasks if "-l" not in t[0]]
    # level 1: one group table per 3 runs (every run in one group); level 2: group parts only
    assert {t[0].split("-")[2] for t in level1} == {f"l{g:05d}" for g in range(-(-n_runs // 3))}
    assert sum(t[1] for t in level1 if t[0].endswith("-00000")) == n_runs
    assert max(t[1] for t in level1) == 3 and all(t[2] == 0 for t in level1)
    assert all(t[1] == 0 and t[2] >= 1 for t in level2)
    assert _files(idx) == one_level  # byte-identical, intermediate tables deleted
    assert _tiers(idx, queries) == per_input
    # in processes (one per part, each level), and as an engine's tasks: the same files
    monkeypatch.setattr(ts_build, "write_anchor_part", real)  # a closure does not pickle
    restore()
    build_text_store(idx, workers=2)
    assert _files(idx) == one_level
    restore()
    steps: dict[str, int] = {}
    with LocalEngine(2) as eng:
        engine_map = eng.map

        def counting_map(fn, calls, **kw):
            steps[kw["desc"]] = steps.get(kw["desc"], 0) + len(calls)
            return engine_map(fn, calls, **kw)

        monkeypatch.setattr(eng, "map", counting_map)
        build_text_store(idx, engine=eng)
    assert _files(idx) == one_level
    assert steps == {"index-textstore-merge-groups": len(level1), "index-textstore-merge": len(level2)}
