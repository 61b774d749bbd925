"""Reading the text store: its layout (``STORE_DIR``, ``meta.json`` and the per-input keys and
files), ``TextStore`` (doc texts by doc ordinal, from locations or copies), ``has_text_store``,
``store_summary`` and ``store_bytes``. What the store holds is described in the package docstring.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tcqa_data.checksums import BlockCheck
from tcqa_data.decontam.core.arrays import sorted_unique
from tcqa_data.decontam.index_files import index_checks, open_manifest
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import load_npy, read_json

STORE_DIR = "textstore"
META = "meta.json"
_CACHE_GROUPS = 4


def _key(entry: dict[str, Any]) -> str:
    return str(entry["sha256"])[:32]


def _entry_id(entry: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What a stored input must agree with to be reused."""
    return {"sha256": entry["sha256"], "doc_offset": int(entry["doc_offset"]), "docs": int(entry["docs"]),
            "text_field": manifest.get("text_field"), "id_field": manifest.get("id_field")}


def _id_key(entry_id: dict[str, Any]) -> str:
    """An ``_entry_id`` as a hashable, canonical string (sets of inputs)."""
    return json.dumps(entry_id, sort_keys=True)


def _anchor_files(rec: dict[str, Any]) -> list[str]:
    """Files of an input's anchor runs, or of the merged table's parts (``meta["anchors"]``)."""
    runs = rec.get("parts", []) if "parts" in rec else rec.get("anchors", [])
    return [f for r in runs for f in
            ([r] if isinstance(r, str) else [f"{r['name']}.cells.npy", f"{r['name']}.words.npy"])]


def merged_covers(meta: dict[str, Any], manifest: dict[str, Any]) -> set[str]:
    """The inputs (``_id_key`` of their ``_entry_id``) whose anchors the store's merged table
    holds, if it holds only inputs of ``manifest`` as they are now; else (no merged table, or a
    stale one: an input changed, moved or removed) an empty set: its entries are not used."""
    merged = meta.get("anchors")
    if not merged:
        return set()
    now = {_id_key(_entry_id(e, manifest)) for e in manifest["inputs"]}
    held = {_id_key(i) for i in merged["inputs"]}
    return held if held <= now else set()


def has_text_store(index_dir: str | os.PathLike) -> bool:
    return (Path(index_dir) / STORE_DIR / META).is_file()


def store_summary(index_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What the text store holds (None if absent): its mode, bytes of doc locations / text copies
    / anchors, anchor entries and their chance-match rate (``index-info`` shows it)."""
    d = Path(index_dir) / STORE_DIR
    if not (d / META).is_file():
        return None
    meta = read_json(d / META)
    out: dict[str, Any] = {"version": meta.get("version"), "mode": meta.get("mode"),
                           "bytes": {"locations": 0, "copy": 0, "anchors": 0}, "anchor_entries": 0,
                           "anchor_chance_match_rate": 0.0}
    # a query k-gram absent from the corpus matches by chance in each table it is looked up in:
    # the merged table (one lookup per k-gram), then each input's runs (inputs it does not hold)
    for rec in [meta["anchors"]] if meta.get("anchors") else []:
        out["bytes"]["anchors"] += sum((d / f).stat().st_size for f in _anchor_files(rec)
                                       if (d / f).is_file())
        out["anchor_entries"] += int(rec["entries"])
        out["anchor_chance_match_rate"] += float(rec["chance_match_rate"])
    for rec in meta.get("inputs", {}).values():
        if "blocks" in rec and (d / rec["blocks"]["file"]).is_file():
            out["bytes"]["locations"] += (d / rec["blocks"]["file"]).stat().st_size
        if "file" in rec and (d / rec["file"]).is_file():
            out["bytes"]["copy" if rec["kind"] == "copy" else "locations"] += (d / rec["file"]).stat().st_size
        if not rec.get("anchors"):
            continue  # no runs of its own: in the merged table (or no anchors)
        out["bytes"]["anchors"] += sum((d / f).stat().st_size for f in _anchor_files(rec)
                                       if (d / f).is_file())
        out["anchor_entries"] += int(rec.get("anchor_entries", 0))
        out["anchor_chance_match_rate"] += float(rec.get("anchor_chance_match_rate", 0.0))
    return out


def store_bytes(index_dir: str | os.PathLike) -> int:
    """Bytes on disk of the text store (0 if absent)."""
    d = Path(index_dir) / STORE_DIR
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file()) if d.is_dir() else 0


class _Sha256Check:
    """A corpus file of a store written before block digests: its sha256 as the index recorded it,
    checked once, whole, at the first read (the :class:`BlockCheck` calls a read makes)."""

    def __init__(self, path: str, sha256: str, changed: Any) -> None:
        self.path, self.sha256, self.changed, self.complete = path, sha256, changed, False

    def check_all(self) -> None:
        if not self.complete:
            from tcqa_data.outputs import file_sha256

            if file_sha256(self.path) != self.sha256:
                raise self.changed(f"{self.path} does not match its checksum (sha256)")
            self.complete = True

    def check_ranges(self, starts: Any, ends: Any) -> None:
        self.check_all()


class TextStore:
    """Read doc texts by doc ordinal (``TextStore.open(INDEX_DIR).texts([0, 5])``)."""

    def __init__(self, root: Path, manifest: dict[str, Any], meta: dict[str, Any]) -> None:
        self.root = root
        self.text_field = manifest.get("text_field", "text")
        self._inputs = sorted(manifest["inputs"], key=lambda e: int(e["doc_offset"]))
        self._starts = np.asarray([int(e["doc_offset"]) for e in self._inputs], dtype=np.int64)
        self._meta = meta
        self._arrays: dict[str, np.ndarray] = {}
        self._groups: OrderedDict[tuple[str, int], list[str]] = OrderedDict()
        self._checked: set[str] = set()
        # the index's files (offsets, copies, block digests) and each corpus file's blocks, checked
        # as they are read
        self.checks = index_checks(root, manifest)
        self._corpus: dict[str, BlockCheck] = {}

    @classmethod
    def open(cls, index_dir: str | os.PathLike) -> TextStore:
        root = Path(index_dir)
        mpath = root / STORE_DIR / META
        if not mpath.is_file():
            raise TcqaError(f"{root}: the index has no text store (built with --text-store none, or an older "
                            "tcqa-data); rebuild it with index-corpus to use alignment terms")
        manifest = open_manifest(root)
        meta = read_json(mpath)
        for e in manifest["inputs"]:
            rec = meta["inputs"].get(_key(e))
            if rec is None or rec.get("id") != _entry_id(e, manifest):
                raise TcqaError(f"{root}: the text store does not match input {e['path']}; "
                                "rerun index-corpus")
        return cls(root, manifest, meta)

    def _entry(self, ordinal: int) -> tuple[dict[str, Any], dict[str, Any], int]:
        i = int(np.searchsorted(self._starts, ordinal, side="right")) - 1
        e = self._inputs[i]
        j = ordinal - int(e["doc_offset"])
        if i < 0 or not 0 <= j < int(e["docs"]):
            raise TcqaError(f"{self.root}: doc ordinal {ordinal} is not in the index")
        return e, self._meta["inputs"][_key(e)], j

    def _array(self, rec: dict[str, Any]) -> np.ndarray:
        f = rec["file"]
        if f not in self._arrays:
            self._arrays[f] = load_npy(self.root / STORE_DIR / f)
        return self._arrays[f]

    def _rows(self, rec: dict[str, Any], rows: np.ndarray) -> np.ndarray:
        """Entries ``rows`` of an input's locations file, checked against the index's block checksums."""
        arr = self._array(rec)
        rows = np.asarray(rows, dtype=np.int64)
        if self.checks is not None:
            self.checks.check_rows(self.root / STORE_DIR / rec["file"], arr, rows, rows + 1)
        return np.asarray(arr[rows], dtype=np.int64)

    def _check_file(self, rec: dict[str, Any]) -> str:
        p = rec["abs_path"]
        if p not in self._checked:
            try:
                st = os.stat(p)
            except OSError:
                raise TcqaError(f"{p}: corpus file of the index is gone; alignment and MinHash verification "
                                "read doc text from it (build the index with --text-store copy to keep a "
                                "copy)") from None
            if st.st_size != rec["size"]:
                raise TcqaError(f"{p}: corpus file changed since it was indexed (its size); rebuild the "
                                "index")
            self._checked.add(p)
        return p

    def _corpus_check(self, rec: dict[str, Any]) -> BlockCheck:
        """The block check of a location entry's corpus file: its recorded block digests, or (a
        store written before them) the input's sha256, checked whole at the first read."""
        p = self._check_file(rec)
        check = self._corpus.get(p)
        if check is None:
            def changed(message: str) -> TcqaError:
                what = message.replace("does not match its checksum", "changed since it was indexed")
                return TcqaError(f"{what}; rebuild the index (or build it with --text-store copy to keep "
                                 "a copy)")

            blocks = rec.get("blocks")
            if isinstance(blocks, dict):
                path = self.root / STORE_DIR / blocks["file"]
                if self.checks is not None:
                    self.checks.check_rows(path)
                check = BlockCheck(p, load_npy(path, mmap_mode=None), int(blocks["block_bytes"]),
                                   int(rec["size"]), changed)
            else:
                check = _Sha256Check(p, rec["id"]["sha256"], changed)
            self._corpus[p] = check
        return check

    def unreadable(self) -> str | None:
        """Why some doc's text cannot be read (an input's corpus file gone or changed since it was
        indexed: the error ``text`` would raise), or None."""
        for e in self._inputs:
            rec = self._meta["inputs"][_key(e)]
            if rec["kind"] != "copy" and int(e["docs"]):
                try:
                    self._check_file(rec)
                except TcqaError as err:
                    return str(err)
        return None

    def _group(self, path: Path, g: int, column: str) -> list[str]:
        k = (str(path), g)
        if k not in self._groups:
            pf = pq.ParquetFile(path)
            col = pf.read_row_group(g, columns=[column]).column(0)
            self._groups[k] = [x if isinstance(x, str) else bytes(x).decode("utf-8")
                               for x in col.to_pylist()]
            if len(self._groups) > _CACHE_GROUPS:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(k)
        return self._groups[k]

    def _parquet_row(self, path: Path, row: int, column: str) -> str:
        k = str(path)
        if k not in self._arrays:
            meta = pq.ParquetFile(path).metadata
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            self._arrays[k] = np.cumsum([0] + sizes, dtype=np.int64)
        firsts = self._arrays[k]
        g = int(np.searchsorted(firsts, row, side="right")) - 1
        if not 0 <= g < len(firsts) - 1:
            raise TcqaError(f"{path}: row {row + 1} is past the end of the file")
        return self._group(path, g, column)[row - int(firsts[g])]

    def text(self, ordinal: int) -> str:
        e, rec, j = self._entry(int(ordinal))
        kind = rec["kind"]
        if kind == "copy":
            if self.checks is not None:
                self.checks.check_rows(self.root / STORE_DIR / rec["file"])
            return self._parquet_row(self.root / STORE_DIR / rec["file"], j, "text")
        p = self._check_file(rec)
        check = self._corpus_check(rec)
        if kind == "file":
            check.check_all()
            with open(p, "rb") as fh:
                raw = fh.read()
            return raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
        if kind == "rows":  # Parquet reads what its metadata says: the file whole, once
            check.check_all()
            return self._parquet_row(Path(p), int(self._rows(rec, np.array([j]))[0]), self.text_field)
        with open(p, "rb") as fh:
            start = int(self._rows(rec, np.array([j]))[0])
            fh.seek(start)
            raw = fh.readline()
            check.check_ranges(np.array([start]), np.array([start + len(raw)]))
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        return json.loads(raw.decode("utf-8"))[self.text_field]

    def texts(self, ordinals: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of the docs with these ordinals (in this order)."""
        ords = [int(o) for o in ordinals]
        uniq = sorted(set(ords))  # file order: row groups decode once
        spans = list(self._line_spans(uniq))
        self._advise(spans)
        got = self._jsonl_lines(spans)
        got.update((o, self.text(o)) for o in uniq if o not in got)
        return [got[o] for o in ords]

    def _jsonl_lines(self, spans: list[tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]]
                     ) -> dict[int, str]:
        """``text`` of the docs of these ``_line_spans`` (lines of uncompressed JSONL inputs), read
        with one open file per input and one ``pread`` per line (``text`` opens the file and reads
        it line-buffered for each doc, which cost more than the JSON decoding)."""
        out: dict[int, str] = {}
        for rec, docs, start, end in spans:
            self._corpus_check(rec).check_ranges(start, end)
            fd = os.open(self._check_file(rec), os.O_RDONLY)
            try:
                for o, a, b in zip(docs.tolist(), start.tolist(), end.tolist(), strict=True):
                    raw = os.pread(fd, max(b - a, 0), a)
                    nl = raw.find(b"\n")
                    if nl < 0 and a + len(raw) < int(rec["size"]):
                        continue  # not a whole line (offsets out of order): text() reads it
                    # as text(): the line with its newline, a byte order mark dropped
                    out[o] = json.loads(raw[:nl + 1 if nl >= 0 else len(raw)].removeprefix(b"\xef\xbb\xbf")
                                        .decode("utf-8"))[self.text_field]
            finally:
                os.close(fd)
        return out

    @property
    def num_docs(self) -> int:
        """Docs the store holds (ordinals ``0..num_docs-1``)."""
        return int(self._starts[-1]) + int(self._inputs[-1]["docs"]) if self._inputs else 0

    def _line_spans(self, ordinals: Sequence[int] | np.ndarray
                    ) -> Iterator[tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]]:
        """Per uncompressed JSONL input holding some of these docs: ``(its record, the docs'
        ordinals (sorted, distinct), each one's first byte, the next doc's first byte or the
        file's end)``; a doc's line (and maybe lines the index skipped) lies in between."""
        if not self._inputs:
            return
        ords = sorted_unique(np.asarray(ordinals, dtype=np.int64))
        ords = ords[(ords >= 0) & (ords < self.num_docs)]
        which = np.searchsorted(self._starts, ords, side="right") - 1
        inputs = sorted_unique(which).tolist()
        recs = [self._meta["inputs"][_key(self._inputs[i])] for i in inputs]
        new = [r for r in recs if r["kind"] == "offsets" and r["file"] not in self._arrays]
        if len(new) > 1:  # cold page cache: each offsets file's header is a disk read; many at once
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(self._array, new))
        for i, rec in zip(inputs, recs, strict=True):
            if rec["kind"] != "offsets":
                continue
            offs = self._array(rec)
            docs = ords[which == i]
            local = docs - int(self._inputs[i]["doc_offset"])
            start = self._rows(rec, local)
            nxt = local + 1
            end = np.full(len(local), int(rec["size"]), dtype=np.int64)  # the last doc: to the end
            inside = nxt < len(offs)
            end[inside] = self._rows(rec, nxt[inside])
            yield rec, docs, start, end

    def prefetch(self, ordinals: Sequence[int] | np.ndarray) -> None:
        """Ask the OS to read these docs' lines of uncompressed JSONL inputs ahead (other kinds:
        nothing). Candidate docs lie anywhere in a large corpus: one synchronous disk read per doc
        would wait on each in turn, while these reads are queued together, in file order."""
        self._advise(self._line_spans(ordinals))

    def _advise(self, spans: Iterable[tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """``prefetch`` of these ``_line_spans``."""
        if not hasattr(os, "posix_fadvise"):
            return
        for rec, _, start, end in spans:
            try:
                fd = os.open(self._check_file(rec), os.O_RDONLY)
            except OSError:
                continue  # text() reports a missing file
            try:
                for a, b in zip(start.tolist(), end.tolist(), strict=True):
                    os.posix_fadvise(fd, a, max(b - a, 1), os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)
