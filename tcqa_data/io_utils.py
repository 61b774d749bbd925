"""Atomic file writes: readers never see a half-written output."""

from __future__ import annotations

import errno
import functools
import json
import os
import struct
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

NPY_HEADER_LEN = 128  # .npy headers of NpyStream (numpy pads headers to 64/128 bytes)


def _default_file_mode() -> int:
    # mkstemp creates 0600 files; give outputs the mode a plain open() would (0666 & ~umask).
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, _default_file_mode())
        os.replace(tmp_path, path)
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        # a write that failed (a full disk): the error names the file it was writing
        raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON with sorted keys so identical content gives identical bytes."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_parquet_atomic(path: str | os.PathLike, table: pa.Table) -> None:
    """Write a Parquet file deterministically (no creation timestamps vary between runs)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_npy_atomic(path: str | os.PathLike, array) -> None:
    import numpy as np

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            # Always C order: readers slice rows by offset (a transposed view would save as Fortran).
            np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


class NpyStream:
    """Write a 1-D or 2-D C-order .npy of unknown length in chunks, atomically (``atomic_path``):
    a fixed ``NPY_HEADER_LEN``-byte header is patched in at ``close``."""

    def __init__(self, path: str | os.PathLike, dtype, cols: int | None = None) -> None:
        import numpy as np

        self.dtype = np.dtype(dtype)
        self.cols = cols
        self.rows = 0
        self._ctx = atomic_path(path)
        tmp = self._ctx.__enter__()
        self._fh = open(tmp, "wb")
        self._fh.write(b"\0" * NPY_HEADER_LEN)

    def write(self, arr) -> None:
        import numpy as np

        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        # the array's own buffer, not a ``tobytes`` copy (a fresh bytes object per chunk costs
        # a copy and, for chunks of MBs, the page faults of new memory)
        self._fh.write(memoryview(arr.reshape(-1).view(np.uint8)))
        self.rows += arr.shape[0]

    def close(self) -> None:
        shape = f"({self.rows},)" if self.cols is None else f"({self.rows}, {self.cols})"
        d = f"{{'descr': '{self.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
        d = d.ljust(NPY_HEADER_LEN - 10 - 1) + "\n"
        self._fh.seek(0)
        self._fh.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode("latin1"))
        self._fh.close()
        self._ctx.__exit__(None, None, None)

    def abort(self, exc: BaseException) -> None:
        """Drop the temporary file (nothing to do once closed)."""
        if self._fh.closed:
            return
        self._fh.close()
        self._ctx.__exit__(type(exc), exc, exc.__traceback__)


# A .npy header is parsed with ``ast.literal_eval``, and CPython 3.11 builds ASTs with one
# interpreter-wide recursion counter: two threads parsing at once can raise "SystemError: AST
# constructor recursion depth mismatch" (CPython gh-106905). Queries open files from several
# threads (bucket openers, a background lookup, signing threads), so every header we parse is
# parsed under this lock; the file's first page is read before it, so cold reads stay parallel.
_NPY_HEADER_LOCK = threading.Lock()


def _warm_header(path: str | os.PathLike) -> None:
    with open(path, "rb", buffering=0) as fh:
        fh.read(4096)


def load_npy(path: str | os.PathLike, mmap_mode: str | None = "r"):
    """``np.load(path, mmap_mode=..., allow_pickle=False)``, safe from several threads at once
    (see ``_NPY_HEADER_LOCK``). A memory map keeps a file descriptor open while it lives, so this
    process's limit on open files is raised first (``raise_open_file_limit``)."""
    import numpy as np

    if mmap_mode is not None:
        raise_open_file_limit()
    try:
        _warm_header(path)
        with _NPY_HEADER_LOCK:
            return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        from tcqa_data.errors import TcqaError

        raise TcqaError(f"{path}: too many open files ({_open_file_limit()} allowed): an index is read "
                        "through memory maps, one open file each, and a large one has thousands of "
                        "files; raise the limit (`ulimit -n 65536`) and run again") from exc


def _open_file_limit() -> str:
    try:
        import resource
    except ImportError:  # not POSIX
        return "the system's limit"
    return str(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


@functools.lru_cache(maxsize=1)
def raise_open_file_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit, once. Numpy's memory maps
    keep a descriptor each, and a query maps every index file it reads: against the index of a
    10 GB corpus of 487 files, about 3,500 (n-gram buckets, band tables, each input's text-store
    offsets and anchor tables), past the common default soft limit of 1,024."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    for target in (want, 1 << 16, 10240):  # some systems cap below the hard limit (macOS: OPEN_MAX)
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue


class NpyRowReader:
    """Rows of a C-order .npy file by explicit reads (``np.fromfile`` at an offset).

    Unlike a memory map, pages read this way stay in the shared, reclaimable page cache instead
    of counting in the reader's RSS until unmapped, so a merge holds only what it keeps.
    No file stays open.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        import numpy as np

        self.path = Path(path)
        _warm_header(self.path)
        with _NPY_HEADER_LOCK, open(self.path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            self.data_offset = fh.tell()
        if (fortran and len(shape) > 1) or dtype.hasobject:
            from tcqa_data.errors import TcqaError

            raise TcqaError(f"{self.path}: unexpected array layout (expected a C-order numeric array)")
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(x) for x in shape)
        self.rows = self.shape[0] if self.shape else 1
        self.row_shape = self.shape[1:]
        self.row_items = int(np.prod(self.row_shape, dtype=np.int64))

    def __len__(self) -> int:
        return self.rows

    def _read(self, first_item: int, count: int, what: str):
        import numpy as np

        arr = np.fromfile(self.path, dtype=self.dtype, count=count,
                          offset=self.data_offset + first_item * self.dtype.itemsize)
        if len(arr) != count:
            from tcqa_data.errors import TcqaError

            raise TcqaError(f"{self.path}: truncated file ({what} of shape {self.shape})")
        return arr

    def read(self, i: int, j: int):
        """Rows ``[i, j)``."""
        import numpy as np

        if j <= i:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        arr = self._read(i * self.row_items, (j - i) * self.row_items, f"rows {i}..{j}")
        return arr.reshape((j - i, *self.row_shape))

    def read_row_span(self, row: int, i: int, j: int):
        """Elements ``[i, j)`` of row ``row`` of a 2-D array."""
        return self._read(row * self.row_items + i, max(0, j - i), f"row {row}, columns {i}..{j}")


def cached_row_reader(path: str | os.PathLike) -> NpyRowReader:
    """``NpyRowReader(path)``, its header parsed once per process while the file is unchanged
    (keyed by inode, mtime and size): a merge task opens the same runs' files for every band or
    key range, and an open plus a header read cost ~0.4 ms here, a stat ~0.02."""
    st = os.stat(path)
    return _row_reader(os.fspath(path), (st.st_ino, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=16384)  # ~0.5 KB each
def _row_reader(path: str, stamp: tuple) -> NpyRowReader:
    return NpyRowReader(path)


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def iter_jsonl_objects(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON Lines file; a line that is not
    a JSON object is an ``InputError`` naming the file and line."""
    from tcqa_data.errors import InputError

    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a BOM is no part of the first record
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"not valid UTF-8 (byte {exc.start} of the line)", path=str(path),
                                 line=line_no) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {exc.msg}", path=str(path), line=line_no) from None
            if not isinstance(rec, dict):
                raise InputError("each line must be a JSON object", path=str(path), line=line_no)
            yield line_no, rec


def read_regular_file(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``; a FIFO, a device, a
    folder or a larger file is one ``InputError`` line, found before anything is read from it (the
    file is opened non-blocking, so a FIFO cannot hang the open, and checked on its descriptor)."""
    import stat

    from tcqa_data.errors import InputError

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "not a file")
            raise InputError(f"{what} is {kind}, not a regular file", path=str(path))
        if st.st_size > max_bytes:
            raise InputError(f"{what} is {st.st_size:,} bytes, over the limit of {max_bytes:,}",
                             path=str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=str(path)) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while read
        raise InputError(f"{what} is over the limit of {max_bytes:,} bytes", path=str(path))
    return data


def decode_utf8(data: bytes, path: str | os.PathLike, what: str) -> str:
    """``data`` as UTF-8 text, a leading BOM dropped; invalid UTF-8 is one line naming the byte offset."""
    from tcqa_data.errors import InputError

    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 (byte {exc.start})", path=str(path)) from None


def read_json_file(path: str | os.PathLike, what: str, max_bytes: int = 1 << 30) -> Any:
    """A JSON side file (a manifest, results): one ``InputError`` line naming it when it is not a
    regular file, is not UTF-8 or does not parse."""
    from tcqa_data.errors import InputError

    text = decode_utf8(read_regular_file(path, what, max_bytes), path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                         path=str(path)) from None


def read_parquet_file(path: str | os.PathLike, what: str, **kwargs: Any) -> pa.Table:
    """A Parquet side file (a prepared split); one ``InputError`` line naming it when it does not parse."""
    from tcqa_data.errors import InputError

    try:
        return pq.read_table(path, **kwargs)
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{what} is not a readable Parquet file: {first[:200]}", path=str(path)) from None
