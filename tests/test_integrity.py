"""Damage is found by the run that reads it (issue 40): the index's block checksums, on real data.

The probe this reproduces: zeroed bytes in the large n-gram files, sizes kept, changed MC-TACO's
dirty docs with exit 0, because only ``index-info --verify`` read them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from test_faults import assert_one_line_error, cli
from test_faults_prep import _prep_args, bench, index_a  # noqa: F401 - fixtures

from tcqa_data.checksums import BLOCK_BYTES, BlockCheck, digest_blocks
from tcqa_data.decontam.index_files import BLOCKS_FILE, BLOCKS_KEY, FILES_KEY, manifest_checksum


def _zero_data(path: Path) -> None:
    """Zero every byte after the .npy header, the size kept (the probe's damage)."""
    data = bytearray(path.read_bytes())
    data[128:] = bytes(len(data) - 128)
    path.write_bytes(bytes(data))


def _largest(root: Path, n: int = 13) -> list[Path]:
    files = sorted((root / "ngrams" / f"n{n}").glob("*.keys.npy"), key=lambda p: -p.stat().st_size)
    return [p for p in files if p.stat().st_size > 128]


def test_zeroed_ngram_files_fail_the_decontaminate_that_reads_them(index_a, bench, tmp_path,  # noqa: F811
                                                                   monkeypatch, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(index_a, copy)
    good, _ = cli(_prep_args(copy, tmp_path / "ok", bench["mc40"]), monkeypatch, capsys)
    assert good == 0
    victims = _largest(copy)
    for p in victims:
        _zero_data(p)
    code, err = cli(_prep_args(copy, tmp_path / "prep", bench["mc40"]), monkeypatch, capsys)
    assert_one_line_error(code, err, "does not match its checksum", str(copy))
    assert any(str(p) in err for p in victims), err
    assert not (tmp_path / "prep").exists()


def test_an_index_sealed_before_block_checksums_checks_each_file_whole(index_a, bench, tmp_path,  # noqa: F811
                                                                        monkeypatch, capsys):
    """Its manifest has every file's whole checksum only: the first read of a file checks it whole."""
    copy = tmp_path / "idx"
    shutil.copytree(index_a, copy)
    m = json.loads((copy / "manifest.json").read_text())
    (copy / BLOCKS_FILE).unlink()
    files = {k: {"size": v["size"], "xxh3": v["xxh3"]} for k, v in m[FILES_KEY].items() if k != BLOCKS_FILE}
    old = {k: v for k, v in m.items() if k not in (BLOCKS_KEY, FILES_KEY, "manifest_xxh3")}
    old[FILES_KEY] = files
    old["manifest_xxh3"] = manifest_checksum(old)
    (copy / "manifest.json").write_text(json.dumps(old))
    code, err = cli(_prep_args(copy, tmp_path / "ok", bench["mc40"]), monkeypatch, capsys)
    assert code == 0, err
    victim = _largest(copy)[0]
    _zero_data(victim)
    for p in _largest(copy)[1:]:
        _zero_data(p)
    code, err = cli(_prep_args(copy, tmp_path / "prep", bench["mc40"]), monkeypatch, capsys)
    assert_one_line_error(code, err, "does not match its checksum")


def test_block_check_reads_only_the_blocks_it_is_asked_for(wiki_sample, tmp_path):
    """A run pays for the blocks it reads: damage in a block no read touches goes unread until one
    does, then it is found, naming the file and the bytes."""
    from tcqa_data.errors import TcqaError

    path = tmp_path / "data.bin"
    raw = wiki_sample.read_bytes()[: 5 * BLOCK_BYTES + 123]
    path.write_bytes(raw)
    whole, blocks, size = digest_blocks(path)
    with open(path, "rb") as fh:  # an open file gives the same digests as its path
        assert digest_blocks(fh)[0] == whole
        fh.seek(0)
        assert np.array_equal(digest_blocks(fh)[1], blocks)
    assert size == len(raw) and len(blocks) == 6
    damaged = bytearray(raw)
    damaged[3 * BLOCK_BYTES + 7] ^= 1
    path.write_bytes(bytes(damaged))
    check = BlockCheck(path, blocks, BLOCK_BYTES, size, TcqaError)
    check.check_ranges(np.array([0, 5 * BLOCK_BYTES]), np.array([2 * BLOCK_BYTES, size]))  # blocks 0, 1, 5
    assert not check.complete
    try:
        check.check_ranges(np.array([3 * BLOCK_BYTES + 5]), np.array([3 * BLOCK_BYTES + 9]))
    except TcqaError as exc:
        assert str(path) in str(exc) and f"{3 * BLOCK_BYTES:,}-{4 * BLOCK_BYTES:,}" in str(exc)
    else:
        raise AssertionError("the damaged block was read unchecked")


def test_text_store_finds_an_in_place_corpus_edit_with_its_mtime_kept(wiki_sample, tmp_path):
    """The probe: a corpus file edited in place, size and mtime restored, moved ``aligned-field``
    results because the store trusted size and mtime. Now the read that meets the edit fails by name;
    a store written before block digests checks the input's sha256 instead."""
    from test_faults import BUILD, make_corpus

    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.textstore.store import TextStore
    from tcqa_data.errors import TcqaError

    src = make_corpus(wiki_sample, tmp_path)["a"]
    idx = tmp_path / "idx"
    build_index([str(src)], idx, **BUILD)
    lines = src.read_bytes().splitlines(keepends=True)
    store = TextStore.open(idx)
    first = store.texts(range(len(lines)))
    assert first == [json.loads(x)["text"] for x in lines]
    # edit the last doc in place: one letter, same size, mtime put back
    st = src.stat()
    data = bytearray(src.read_bytes())
    at = len(data) - len(lines[-1]) + lines[-1].index(b'"text": "') + 12
    data[at] = ord("x") if data[at] != ord("x") else ord("y")
    src.write_bytes(bytes(data))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size and src.stat().st_mtime_ns == st.st_mtime_ns
    assert TextStore.open(idx).texts([0]) == first[:1]  # an unchanged block reads on
    for opened in (TextStore.open(idx), None):
        opened = opened or _store_without_block_digests(idx)  # whole-file sha256: any doc
        try:
            opened.texts([len(lines) - 1])
        except TcqaError as exc:
            assert str(src) in str(exc) and "changed since it was indexed" in str(exc), exc
            assert "\n" not in str(exc)
        else:
            raise AssertionError("the edited doc was read unchecked")


def _store_without_block_digests(idx: Path):
    """The store as a tcqa-data without block digests wrote it (its meta without ``blocks``)."""
    from tcqa_data.decontam.index_files import reseal
    from tcqa_data.decontam.textstore.store import META, STORE_DIR, TextStore

    meta_path = idx / STORE_DIR / META
    meta = json.loads(meta_path.read_text())
    for rec in meta["inputs"].values():
        blocks = rec.pop("blocks", None)
        if blocks:
            (idx / STORE_DIR / blocks["file"]).unlink()
    meta_path.write_text(json.dumps(meta))
    reseal(idx)
    store = TextStore.open(idx)
    return store


def test_an_unsealed_index_is_read_with_a_warning(index_a, bench, tmp_path, monkeypatch, capsys):  # noqa: F811
    """An index older than checksums records nothing to compare with: read, and said so."""
    copy = tmp_path / "idx"
    shutil.copytree(index_a, copy)
    m = json.loads((copy / "manifest.json").read_text())
    (copy / BLOCKS_FILE).unlink()
    (copy / "manifest.json").write_text(json.dumps(
        {k: v for k, v in m.items() if k not in (BLOCKS_KEY, FILES_KEY, "manifest_xxh3")}))
    code, err = cli(_prep_args(copy, tmp_path / "prep", bench["mc40"]), monkeypatch, capsys)
    assert code == 0, err
    assert "Warning: the index" in err and "predates checksums" in err, err


def test_flipped_labels_in_a_prep_dir_stop_evaluate_and_analyze_before_any_model(index_a, bench,  # noqa: F811
                                                                                   tmp_path, monkeypatch,
                                                                                   capsys):
    """The probe flipped labels in a PREP_DIR parquet and moved acc from 72.2 to 27.8 unnoticed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    prep = tmp_path / "prep"
    code, err = cli(_prep_args(index_a, prep, bench["mc40"]), monkeypatch, capsys)
    assert code == 0, err
    recorded = json.loads((prep / "prep_manifest.json").read_text())["data_sha256"]
    assert {"mc_taco/validation/full.parquet", "mc_taco/validation/clean.parquet",
            "mc_taco/validation/dirty.parquet"} <= set(recorded)
    full = prep / "mc_taco" / "validation" / "full.parquet"
    table = pq.read_table(full)
    labels = table.column("label").to_pylist()  # MC-TACO's doc_to_target
    flipped = [{"yes": "no", "no": "yes", 0: 1, 1: 0}[x] for x in labels]
    pq.write_table(table.set_column(table.column_names.index("label"), "label",
                                    pa.array(flipped, table.column("label").type)), full)
    # the model named does not exist: the check comes first, so the error is the changed file's
    for args in (["evaluate", prep, "--model", tmp_path / "no-model", "-q"],
                 ["analyze", prep, "--results", tmp_path / "no-results", "-q"]):
        code, err = cli(args, monkeypatch, capsys)
        assert_one_line_error(code, err, str(full), "changed since decontaminate wrote it")
    full.unlink()
    code, err = cli(["evaluate", prep, "--model", tmp_path / "no-model", "-q"], monkeypatch, capsys)
    assert_one_line_error(code, err, str(full), "missing")
