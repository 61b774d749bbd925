"""Block checksums: damage found by the read that meets it, at the cost of the bytes read.

A file is cut into blocks of ``block_bytes`` (the last one shorter) and each block's xxh3-64 is
recorded when the file is written (:func:`digest_blocks`, one pass that also gives the whole
file's xxh3-64). A reader holds a :class:`BlockCheck` per file and, before it uses bytes
``[start, end)``, asks :meth:`BlockCheck.check_ranges`: the blocks covering them that this process
has not checked yet are read and hashed once, so a run pays for the blocks it reads, not for the
file (a lookup in a 10 GB index reads a small part of it). A block whose bytes changed is a
:class:`~tcqa_data.errors.TcqaError` built by the caller's ``damaged(message)``: one line naming
the file and the byte range.

A file recorded with only its whole-file xxh3-64 (written before block checksums) is one block:
its first read reads and checks it whole (the same answer, slower).

The sources are a path or an open binary file (local today, any file object with ``read`` or
``readinto``), so corpus files opened elsewhere are digested by the same code.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np
import xxhash

from tcqa_data.errors import TcqaError

BLOCK_BYTES = 1 << 16  # 64 KiB: 8 bytes of checksum per 64 KiB of data (0.012 %)
_READ = 1 << 22  # bytes per read when digesting or checking a run of blocks


def num_blocks(size: int, block_bytes: int) -> int:
    return -(-int(size) // int(block_bytes)) if block_bytes > 0 else 0


def digest_blocks(source: str | os.PathLike | BinaryIO, block_bytes: int = BLOCK_BYTES
                  ) -> tuple[str, np.ndarray, int]:
    """``(whole-file xxh3-64 hex, uint64 xxh3-64 of each block, size in bytes)`` of a file, read once
    in bounded memory. ``source``: a path or a binary file object positioned at its start."""
    if block_bytes <= 0 or _READ % block_bytes:
        raise ValueError(f"block_bytes must divide {_READ}, got {block_bytes}")
    if isinstance(source, str | os.PathLike):
        with open(source, "rb", buffering=0) as fh:
            return digest_blocks(fh, block_bytes)
    whole = xxhash.xxh3_64()
    blocks: list[int] = []
    buf = bytearray(_READ)
    view = memoryview(buf)
    size = 0
    pending = 0  # bytes at the start of buf not yet a full block (the file's tail so far)
    reader = getattr(source, "readinto", None)
    while True:
        if reader is not None:
            n = reader(view[pending:])
        else:
            chunk = source.read(_READ - pending)
            n = len(chunk)
            view[pending:pending + n] = chunk
        if not n:
            break
        whole.update(view[pending:pending + n])
        size += n
        have = pending + n
        full = have - have % block_bytes
        for a in range(0, full, block_bytes):
            blocks.append(xxhash.xxh3_64_intdigest(view[a:a + block_bytes]))
        pending = have - full
        if pending:
            view[:pending] = view[full:have]
    if pending:
        blocks.append(xxhash.xxh3_64_intdigest(view[:pending]))
    return whole.hexdigest(), np.asarray(blocks, dtype=np.uint64), size


class BlockCheck:
    """The blocks of one file this process has checked (see the module doc). Thread-safe: two
    threads may check the same block once each, never skip one."""

    def __init__(self, path: str | os.PathLike, digests: np.ndarray, block_bytes: int, size: int,
                 damaged: Callable[[str], TcqaError]) -> None:
        self.path = os.fspath(path)
        self.digests = np.asarray(digests, dtype=np.uint64)
        self.block_bytes = int(block_bytes)
        self.size = int(size)
        self._damaged = damaged
        self._done = np.zeros(len(self.digests), dtype=bool)
        self._left = len(self.digests)
        self._lock = threading.Lock()

    @property
    def complete(self) -> bool:
        return self._left == 0

    def check_all(self) -> None:
        self.check_ranges(np.zeros(1, np.int64), np.full(1, self.size, np.int64))

    def check_ranges(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Check the blocks holding a byte of any ``[starts[i], ends[i])`` not checked before."""
        if not self._left:
            return
        starts = np.clip(np.asarray(starts, dtype=np.int64).ravel(), 0, self.size)
        ends = np.clip(np.asarray(ends, dtype=np.int64).ravel(), 0, self.size)
        keep = ends > starts
        if not keep.any():
            return
        nb = len(self.digests)
        first = starts[keep] // self.block_bytes
        stop = (ends[keep] - 1) // self.block_bytes + 1
        # blocks covered by any range: +1 at each first block, -1 past each last, running sum
        depth = np.cumsum(np.bincount(first, minlength=nb + 1) - np.bincount(stop, minlength=nb + 1))
        need = np.flatnonzero((depth[:nb] > 0) & ~self._done)
        if len(need):
            self._check_blocks(need)

    def _check_blocks(self, need: np.ndarray) -> None:
        # contiguous runs of blocks, read in pieces of at most _READ bytes
        cut = np.flatnonzero(np.diff(need) != 1) + 1
        per_read = max(1, _READ // self.block_bytes)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise self._damaged(f"{self.path}: cannot read it to check its checksums "
                                f"({exc.strerror or exc})") from None
        try:
            for run in np.split(need, cut):
                for i in range(0, len(run), per_read):
                    part = run[i:i + per_read].tolist()
                    a = part[0] * self.block_bytes
                    if self.block_bytes > _READ:  # one large block (a file recorded whole): streamed
                        got = [self._stream_digest(fd, a, min(self.size, a + self.block_bytes))]
                    else:
                        b = min(self.size, (part[-1] + 1) * self.block_bytes)
                        view = memoryview(os.pread(fd, b - a, a))
                        got = [xxhash.xxh3_64_intdigest(view[k * self.block_bytes:(k + 1) * self.block_bytes])
                               for k in range(len(part))]
                    for blk, digest in zip(part, got, strict=True):
                        if digest != int(self.digests[blk]):  # a short file: a short last view
                            self._mismatch(blk)
        finally:
            os.close(fd)
        with self._lock:
            fresh = int((~self._done[need]).sum())
            self._done[need] = True
            self._left -= fresh

    def _stream_digest(self, fd: int, a: int, b: int) -> int | None:
        h = xxhash.xxh3_64()
        while a < b:
            data = os.pread(fd, min(_READ, b - a), a)
            if not data:
                return None
            h.update(data)
            a += len(data)
        return h.intdigest()

    def _mismatch(self, blk: int) -> None:
        x = blk * self.block_bytes
        y = min(self.size, x + self.block_bytes)
        raise self._damaged(f"{self.path} does not match its checksum at bytes {x:,}-{y:,} "
                            "(its bytes were altered)")

    def check_span(self, arr: Any = None, first: Any = None, last: Any = None) -> None:
        """Rows ``[first, last)`` of ``arr`` (``last`` None: the whole file), once per block."""
        if self.complete:
            return
        if last is None:
            self.check_all()
        else:
            self.check_rows(arr, first, last)

    def check_rows(self, arr: np.ndarray, first: np.ndarray | int, last: np.ndarray | int) -> None:
        """Check the bytes of rows ``[first, last)`` of ``arr``, an array ``numpy.load`` mapped from
        this file (its ``offset``: the data's first byte), or read whole from it (then the whole
        file)."""
        if not self._left:
            return
        offset = getattr(arr, "offset", None)
        if not isinstance(arr, np.memmap) or not isinstance(offset, int) or not arr.flags.c_contiguous:
            self.check_all()
            return
        row = int(arr.strides[0]) if arr.ndim else int(arr.itemsize)
        first = np.asarray(first, dtype=np.int64)
        last = np.asarray(last, dtype=np.int64)
        self.check_ranges(offset + first * row, offset + last * row)


def whole_file_check(path: str | os.PathLike, xxh3_hex: str, size: int,
                     damaged: Callable[[str], TcqaError]) -> BlockCheck:
    """A :class:`BlockCheck` of a file recorded with only its whole-file xxh3-64: one block."""
    digest = np.asarray([int(xxh3_hex, 16)], dtype=np.uint64) if size else np.zeros(0, np.uint64)
    return BlockCheck(path, digest, max(int(size), 1), size, damaged)
