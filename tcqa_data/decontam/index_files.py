"""An index knows when it is damaged: the files its manifest covers, their sizes and checksums.

``index-corpus`` seals a finished index (:func:`seal`) just before it becomes visible: the manifest
gets ``files`` (every file of the index but the manifest, with its size and xxh3-64 checksum) and
``manifest_xxh3``, the checksum of the manifest itself without that key. Opening an index
(:func:`open_manifest`: the n-gram, MinHash and text store readers, ``index-info``,
``decontaminate``, ``index-corpus --append``) checks that the manifest parses, is an object and
matches its own checksum, and that every file it names is there with its size, and no other file
(cheap: one ``stat`` per file), and the checksum of every small file (``ALWAYS_CHECKED_BYTES``:
the JSON records, small arrays). ``index-info --verify`` checks every file's checksum too
(:func:`verify_files`).

Large files are checked as they are read: the seal also records the xxh3-64 of every 64 KiB block
of every file (``checksums.npy``, uint64; the manifest's ``block_checksums`` and each file's
``first_block``), and the readers (n-gram lookups, the text store, MinHash and anchor tables) ask
:func:`block_check` before they use a file's bytes, which checks each block once per process
(``tcqa_data/checksums.py``). A run that reads a damaged block stops with one line naming the
file, whatever it reads (``decontaminate`` reads a few percent of a large index). An index sealed
before block checksums has each file's whole checksum: its first read of a file checks the file
whole (same answer, slower; rebuilding adds block checksums). Any damage is one
:class:`DamagedIndexError` naming the file and the command that repairs it, never a traceback or
a silently wrong answer (an edited hash seed or bucket count would otherwise find nothing).

Indexes sealed before this existed (no ``manifest_xxh3``) are read as they are: they carry no
checksum to compare with (:func:`unchecked_warning` says so once per run).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from tcqa_data.checksums import BLOCK_BYTES, BlockCheck, digest_blocks, num_blocks, whole_file_check
from tcqa_data.errors import TcqaError
from tcqa_data.outputs import OWNER_MARKER

MANIFEST = "manifest.json"
FILES_KEY = "files"
SEAL_KEY = "manifest_xxh3"
WORK_DIR = "_work"  # a build or append in progress: not part of the index
_CHUNK = 1 << 22
ALWAYS_CHECKED_BYTES = 64 << 10  # files up to this size are checksummed at every open
BLOCKS_FILE = "checksums.npy"  # uint64 xxh3-64 of every block of every other file, in manifest order
BLOCKS_KEY = "block_checksums"


class DamagedIndexError(TcqaError):
    """An index file is missing, truncated, altered or extra, or the manifest is not its own."""


def repair_hint(root: Path) -> str:
    return (f"rebuild the index: `tcqa-data index-corpus <its inputs> --out {root} --overwrite` "
            f"(`tcqa-data index-info {root} --verify` checks every file)")


def _damaged(root: Path, what: str) -> DamagedIndexError:
    return DamagedIndexError(f"{what}: the index {root} is damaged; {repair_hint(root)}")


def checksum_file(path: str | os.PathLike) -> str:
    """xxh3-64 of a file's bytes, hex (streamed: bounded memory whatever the file size)."""
    h = xxhash.xxh3_64()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """The checksum a sealed manifest records of itself: its canonical JSON without ``SEAL_KEY``."""
    body = {k: v for k, v in manifest.items() if k != SEAL_KEY}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8"))


def index_files(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """``(relative POSIX path, stat)`` of every file of the index at ``root`` but the manifest and
    ``_work/`` (sorted). A symbolic link or other non-regular entry counts as a file here, so it
    is reported rather than followed."""
    for dirpath, dirs, files in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirs[:] = [d for d in dirs if d != WORK_DIR]
        dirs.sort()
        for name in sorted(files):
            rel = (rel_dir / name).as_posix()
            if rel in (MANIFEST, OWNER_MARKER):  # the owner marker is written after the seal
                continue
            yield rel, os.lstat(os.path.join(dirpath, name))


def seal(manifest: dict[str, Any], root: Path, *, workers: int = 4,
         reuse: tuple[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``manifest`` with ``files`` (size, checksum and first block of every index file under
    ``root``), the block checksums file and its own checksum. ``reuse``: ``(folder, sealed
    manifest)`` of the previous generation: a file that is a hard link of one it recorded (same
    inode, same size) keeps its recorded checksums unread."""
    old: dict[str, dict[str, Any]] = {}
    old_root: Path | None = None
    old_blocks: np.ndarray | None = None
    if reuse is not None and isinstance(reuse[1].get(FILES_KEY), dict):
        old_root, old = reuse[0], reuse[1][FILES_KEY]
        if isinstance(reuse[1].get(BLOCKS_KEY), dict) and \
                reuse[1][BLOCKS_KEY].get("block_bytes") == BLOCK_BYTES:
            old_blocks = _load_blocks(old_root, reuse[1])
    records: dict[str, dict[str, Any]] = {}
    blocks: dict[str, np.ndarray] = {}
    todo: list[str] = []
    for rel, st in index_files(root):
        if rel == BLOCKS_FILE:
            continue  # written below
        records[rel] = {"size": int(st.st_size)}
        prev = old.get(rel)
        if prev is not None and old_root is not None and old_blocks is not None and "first_block" in prev:
            try:
                ost = os.stat(old_root / rel)
            except OSError:
                ost = None
            same = ost is not None and (ost.st_ino, ost.st_dev) == (st.st_ino, st.st_dev)
            if same and prev.get("size") == st.st_size == ost.st_size:
                records[rel]["xxh3"] = prev["xxh3"]
                first = int(prev["first_block"])
                blocks[rel] = old_blocks[first:first + num_blocks(st.st_size, BLOCK_BYTES)]
                continue
        todo.append(rel)
    # xxhash releases the GIL on large buffers: threads read and hash files in parallel
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for rel, (digest, per_block, _) in zip(todo, pool.map(lambda r: digest_blocks(root / r), todo),
                                               strict=True):
            records[rel]["xxh3"] = digest
            blocks[rel] = per_block
    at = 0
    for rel in sorted(records):
        records[rel]["first_block"] = at
        at += len(blocks[rel])
    table = np.concatenate([blocks[r] for r in sorted(records)]) if records else np.zeros(0, np.uint64)
    from tcqa_data.io_utils import write_npy_atomic

    write_npy_atomic(root / BLOCKS_FILE, table.astype(np.uint64, copy=False))
    records[BLOCKS_FILE] = {"size": int((root / BLOCKS_FILE).stat().st_size),
                            "xxh3": checksum_file(root / BLOCKS_FILE)}
    out = {k: v for k, v in manifest.items() if k not in (FILES_KEY, SEAL_KEY, BLOCKS_KEY)}
    out[FILES_KEY] = records
    out[BLOCKS_KEY] = {"file": BLOCKS_FILE, "block_bytes": BLOCK_BYTES, "hash": "xxh3-64"}
    out[SEAL_KEY] = manifest_checksum(out)
    return out


def _load_blocks(root: Path, manifest: dict[str, Any]) -> np.ndarray:
    """The block checksums of a sealed index, checked against the manifest's record of the file."""
    import io

    path = root / BLOCKS_FILE
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _damaged(root, f"{path} cannot be read ({exc.strerror or exc})") from None
    if xxhash.xxh3_64_hexdigest(raw) != manifest.get(FILES_KEY, {}).get(BLOCKS_FILE, {}).get("xxh3"):
        raise _damaged(root, f"{path} does not match its checksum (its bytes were altered)")
    table = np.load(io.BytesIO(raw), allow_pickle=False)
    if table.dtype != np.uint64 or table.ndim != 1:
        raise _damaged(root, f"{path} is not a list of 64-bit checksums")
    return table


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the index at ``root``, checked: it parses, is an object and, when sealed,
    matches its own checksum (DamagedIndexError otherwise). A missing manifest is the caller's case."""
    path = root / MANIFEST
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise _damaged(root, f"{path} is a folder, not a file") from None
    except OSError as exc:
        raise TcqaError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        manifest = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _damaged(root, f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _damaged(root, f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(manifest, dict):
        raise _damaged(root, f"{path} holds a JSON {type(manifest).__name__}, not an object")
    if FILES_KEY in manifest and SEAL_KEY not in manifest:
        raise _damaged(root, f"{path} lists its files but has no checksum of itself (it was edited)")
    if SEAL_KEY in manifest:
        if manifest[SEAL_KEY] != manifest_checksum(manifest):
            raise _damaged(root, f"{path} does not match its own checksum (it was edited or damaged)")
        if not isinstance(manifest.get(FILES_KEY), dict):
            raise _damaged(root, f"{path} has no file list")
    problem = _shape_problem(manifest)
    if problem is not None:  # an unsealed (older) manifest is read on its word: its shape at least
        raise _damaged(root, f"{path} {problem}")
    return manifest


# What every reader takes from a manifest without asking (key -> accepted types).
_REQUIRED: dict[str, tuple[type, ...]] = {
    "kind": (str,), "format_version": (int,), "normalization": (str,), "ngram_sizes": (list,),
    "hash": (dict,), "num_buckets": (int,), "provenance_docs": (int,), "inputs": (list,),
    "counts": (dict,),
}


def _shape_problem(manifest: dict[str, Any]) -> str | None:
    for key, types in _REQUIRED.items():
        if key not in manifest:
            return f"lacks {key!r}"
        if not isinstance(manifest[key], types) or isinstance(manifest[key], bool):
            return f"has {key!r} of type {type(manifest[key]).__name__}"
    if not all(isinstance(n, int) and n > 0 for n in manifest["ngram_sizes"]):
        return "has n-gram sizes that are not positive integers"
    if not isinstance(manifest["hash"].get("name"), str) or not isinstance(manifest["hash"].get("seed"), int):
        return "has no hash name and seed"
    for i, e in enumerate(manifest["inputs"]):
        if not isinstance(e, dict) or not all(k in e for k in ("path", "sha256", "docs", "doc_offset")):
            return f"has input #{i + 1} without path, sha256, docs and doc_offset"
    if not isinstance(manifest["counts"].get("docs"), int):
        return "has no doc count"
    return None


def check_files(root: Path, manifest: dict[str, Any], *, verify: bool = False, workers: int = 4) -> None:
    """Every file the sealed ``manifest`` names is at ``root`` with its size, and no other file is
    there; files up to ``ALWAYS_CHECKED_BYTES`` (with ``verify``: every file) match their checksum.
    DamagedIndexError naming the first file that is not.
    An unsealed (older) manifest is not checked."""
    records = manifest.get(FILES_KEY)
    if SEAL_KEY not in manifest or not isinstance(records, dict):
        return
    seen: set[str] = set()
    for rel, st in index_files(root):
        rec = records.get(rel)
        if rec is None:
            raise _damaged(root, f"{root / rel} is not a file of this index (extra file)")
        seen.add(rel)
        import stat as stat_mod

        if not stat_mod.S_ISREG(st.st_mode):
            raise _damaged(root, f"{root / rel} is not a regular file")
        if st.st_size != rec.get("size"):
            how = "truncated" if st.st_size < rec.get("size", 0) else "longer than recorded"
            raise _damaged(root, f"{root / rel} is {how} ({st.st_size:,} bytes, the manifest records "
                                 f"{rec.get('size', 0):,})")
    missing = sorted(set(records) - seen)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise _damaged(root, f"{root / missing[0]} is missing{more}")
    # small files (the JSON records, small arrays and headers) are checksummed at every open: a few
    # ms for a large index, and a changed byte there would change what every lookup means
    # and the block checksums, which every later read trusts
    names = sorted(r for r in records if verify or r == BLOCKS_FILE
                   or int(records[r].get("size", 0)) <= ALWAYS_CHECKED_BYTES)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for rel, digest in zip(names, pool.map(lambda r: checksum_file(root / r), names), strict=True):
            if digest != records[rel].get("xxh3"):
                raise _damaged(root, f"{root / rel} does not match its checksum (its bytes were altered)")


# Opening an index is checked once per process while its manifest is unchanged: the readers
# (n-grams, MinHash, text store, anchors) each open it, and a large index has thousands of files.
_checked: dict[tuple[str, int, int, int], dict[str, Any]] = {}
_checked_lock = threading.Lock()


def open_manifest(root: str | os.PathLike, *, verify: bool = False) -> dict[str, Any]:
    """The checked manifest of a complete index at ``root`` (see the module docstring).

    TcqaError when there is no manifest (no index, or one being built), DamagedIndexError when
    anything does not match it."""
    root = Path(root)
    path = root / MANIFEST
    try:
        st = path.stat()
    except FileNotFoundError:
        if root.is_dir() and ((root / WORK_DIR).exists() or (root / "ngrams").exists()):
            raise TcqaError(f"{root}: incomplete index (no {MANIFEST}); rerun index-corpus to finish "
                            "it") from None
        raise TcqaError(f"{root}: no index here (missing {MANIFEST}); build one with index-corpus") from None
    except NotADirectoryError:
        raise TcqaError(f"{root}: not a folder; give an index folder built by index-corpus") from None
    key = (os.path.abspath(path), st.st_ino, st.st_mtime_ns, st.st_size)
    if not verify:
        with _checked_lock:
            hit = _checked.get(key)
        if hit is not None:
            return hit
    manifest = read_manifest(root)
    check_files(root, manifest, verify=verify)
    with _checked_lock:
        _checked[key] = manifest
    return manifest


@contextmanager
def reading(root: str | os.PathLike) -> Iterator[None]:
    """Around code that reads an index: an unexpected error from a damaged file (a numpy or Parquet
    error, an EOF) becomes the one-line DamagedIndexError that a full check of the files finds; an
    error no damage explains is raised as it is."""
    try:
        yield
    except TcqaError:
        raise
    except (ValueError, OSError, EOFError, KeyError, TypeError, IndexError) as exc:
        try:
            open_manifest(root, verify=True)
        except TcqaError as found:
            raise found from exc
        name = getattr(exc, "filename", None)
        if isinstance(exc, OSError) and name and Path(os.path.abspath(name)).is_relative_to(
                Path(os.path.abspath(root))):
            # an index without checksums (written before them) that names a file it lacks
            raise DamagedIndexError(f"{name}: {exc.strerror or exc}: the index {root} is damaged or "
                                    f"incomplete; {repair_hint(Path(root))}") from exc
        raise


def reseal(root: str | os.PathLike) -> dict[str, Any]:
    """Seal the index at ``root`` again as its files are now (its manifest read unchecked); returns
    the manifest. For tools that rewrite index files on purpose (format conversions, tests that
    build an older layout), never for repairing damage: it would bless whatever is there."""
    from tcqa_data.io_utils import write_json_atomic

    root = Path(root)
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    sealed = seal(manifest, root)
    write_json_atomic(root / MANIFEST, sealed)
    return sealed


class IndexChecks:
    """The block checks of one open index (one reader's view of it, see :func:`index_checks`):
    each block of each file is checked at most once per reader, so a reader opened anew (the next
    run in the same process) checks again what it reads."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self.records: dict[str, dict[str, Any]] = manifest[FILES_KEY]
        info = manifest.get(BLOCKS_KEY)
        self.block_bytes = int(info["block_bytes"]) if isinstance(info, dict) else 0
        # loaded with the reader: the table of this generation, whatever replaces it later
        self._table = _load_blocks(root, manifest) if self.block_bytes else None
        self._files: dict[str, BlockCheck | None] = {}
        self._by_path: dict[str, BlockCheck | None] = {}  # as callers name them: one lookup per read
        self._lock = threading.Lock()

    def _damaged(self, message: str) -> DamagedIndexError:
        return DamagedIndexError(f"{message}: the index {self.root} is damaged; {repair_hint(self.root)}")

    def get(self, path: str | os.PathLike) -> BlockCheck | None:
        """The check of the index file at ``path`` (as the reader opens it: absolute or relative to
        the working folder), or None for a file the manifest does not record."""
        key = os.fspath(path)
        hit = self._by_path.get(key, self)
        if hit is not self:
            return hit  # type: ignore[return-value]
        self._by_path[key] = check = self._get(path)
        return check

    def _get(self, path: str | os.PathLike) -> BlockCheck | None:
        try:
            rel = Path(os.path.abspath(path)).relative_to(self.root).as_posix()
        except ValueError:
            return None
        with self._lock:
            if rel in self._files:
                return self._files[rel]
            rec = self.records.get(rel)
            check = None
            if rec is not None and rel != BLOCKS_FILE:
                size = int(rec.get("size", 0))
                if self._table is not None and "first_block" in rec:
                    first = int(rec["first_block"])
                    digests = self._table[first:first + num_blocks(size, self.block_bytes)]
                    if len(digests) != num_blocks(size, self.block_bytes):
                        raise self._damaged(f"{self.root / BLOCKS_FILE} lacks the blocks of {rel}")
                    check = BlockCheck(self.root / rel, digests, self.block_bytes, size, self._damaged)
                elif isinstance(rec.get("xxh3"), str):  # sealed before block checksums: the file whole
                    check = whole_file_check(self.root / rel, rec["xxh3"], size, self._damaged)
            self._files[rel] = check
            return check

    def check_rows(self, path: str | os.PathLike, arr: Any = None, first: Any = 0, last: Any = None) -> None:
        """Check rows ``[first, last)`` of ``arr`` read from the index file ``path`` (``last`` None:
        the whole file)."""
        check = self.get(path)
        if check is not None:
            check.check_span(arr, first, last)


def index_checks(root: str | os.PathLike, manifest: dict[str, Any]) -> IndexChecks | None:
    """Block checks for a reader of the index at ``root`` with this (:func:`open_manifest`) manifest;
    None when it is unsealed (older than checksums: nothing to compare with)."""
    if SEAL_KEY not in manifest or not isinstance(manifest.get(FILES_KEY), dict):
        return None
    return IndexChecks(Path(os.path.abspath(root)), manifest)


def unsealed_warning(root: str | os.PathLike, manifest: dict[str, Any]) -> str | None:
    """The warning for an index that predates checksums (None for a sealed one): it is read, since
    it records nothing to compare its files with, and damage to it cannot be found."""
    if SEAL_KEY in manifest:
        return None
    return (f"the index {root} predates checksums: damage to its files cannot be detected; rebuild "
            "it with `tcqa-data index-corpus ... --overwrite` to have every read checked")
