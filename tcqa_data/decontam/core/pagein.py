"""Ask the kernel for the file pages a lookup will touch, all at once, before the lookup runs.

Why. Index tables are memory-mapped and queried sparsely. On a cold page cache every first touch
of a page is a fault that waits for the disk, one after another, and the kernel's mmap read-around
makes each such fault read ``read_ahead_kb`` around its page (8 MB on this machine's virtio disk):
decontaminating MC-TACO test and SQuAD validation against a 10 GB index read 30 GB (more than
the page cache holds, so pages were read again) in 168 s. Measured here: the disk serves about
3,700 reads per second whatever their size up to ~256 KB, and 0.8-1.2 GB/s only when several large
reads are in flight; one read at a time gets ~400 MB/s.

So here the pages that rows ``[first, last)`` of each array occupy are gathered, spans closer than
:data:`GAP` are merged (a separate read costs about as much as 256 KB of transfer), a mapping
whose spans cover less than half of it is advised ``MADV_RANDOM`` (a fault on a page outside
the spans reads that page only, not 8 MB; a dense one keeps the read-around, which serves a page
evicted before its use at the disk's bandwidth), and the spans are requested with
``MADV_WILLNEED`` from :data:`THREADS` threads, so many reads are in flight. The call returns when
the requests are queued; a lookup touching a page still being read waits for that read only.
Pages already cached cost nothing. Lookups return the same.

The requests go through ``posix_fadvise(WILLNEED)`` on the mapped file when the array is a
``np.memmap`` (both advices run the kernel's same readahead): CPython's ``mmap.madvise`` keeps the
GIL while the kernel queues the reads, and a full request queue then stalls every Python thread
(a page-in in the background would stall the verification it is meant to overlap).

A page-in that runs in the background (:func:`behind_other_reads`) keeps at most
:data:`BACKGROUND_IN_FLIGHT` bytes requested and not yet read: queued behind gigabytes of its
requests, the few small reads that work in the foreground waits for (the text of the MinHash
candidates) would wait seconds each; paced, they wait tens of milliseconds.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import numpy as np

PAGE = mmap.PAGESIZE
GAP = (256 << 10) // PAGE  # pages: spans closer than this are read as one
PIECE = (4 << 20) // PAGE  # pages per request: the kernel reads at most read_ahead_kb per advice
THREADS = 4  # advising threads: a full request queue blocks the advice, so several keep it full
# a background page-in's bytes in flight: 8 pieces keep the disk's bandwidth (~1 GB/s with 4 MB
# requests) and queue ~30 ms ahead of a foreground read
BACKGROUND_IN_FLIGHT = 8 * PIECE * PAGE
_pacing = threading.local()  # in_flight: this thread's limit inside behind_other_reads
_ADVICE = hasattr(mmap, "MADV_WILLNEED") and hasattr(mmap, "MADV_RANDOM") and hasattr(mmap.mmap, "madvise")


def _mapping(arr: np.ndarray) -> mmap.mmap | None:
    mm = getattr(arr, "_mmap", None)
    return mm if isinstance(mm, mmap.mmap) and not mm.closed else None


def _advise(mm: mmap.mmap, advice: int, *span: int) -> None:
    try:
        mm.madvise(advice, *span)
    except (OSError, ValueError):  # advice only: a file system or mapping that refuses it reads as before
        pass


def _mapped_file(arr: np.ndarray) -> tuple[str, int] | None:
    """``(path, file offset of the mapping's first byte)`` of a ``np.memmap`` (its slices keep the
    file name and the array's offset; the mapping starts at that offset rounded down to the
    allocation granularity), or None."""
    name, offset = getattr(arr, "filename", None), getattr(arr, "offset", None)
    if not (hasattr(os, "posix_fadvise") and isinstance(name, str | os.PathLike) and isinstance(offset, int)):
        return None
    return os.fspath(name), offset - offset % mmap.ALLOCATIONGRANULARITY


class _Request:
    """Where one mapping's page requests go: ``posix_fadvise`` on its file (the GIL released),
    else ``madvise`` on the mapping."""

    def __init__(self, mm: mmap.mmap, file: tuple[str, int] | None) -> None:
        self.mm, self.file, self.fd = mm, file, -1

    def __enter__(self) -> _Request:
        if self.file is not None:
            try:
                self.fd = os.open(self.file[0], os.O_RDONLY)
            except OSError:  # moved or unreadable since it was mapped: advise the mapping instead
                self.fd = -1
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def wait(self, offset: int) -> None:
        """Return once the byte at mapping offset ``offset`` is read (a one-byte read waits for the
        page's read in flight, without the GIL). Mappings without a file: at once."""
        if self.fd >= 0:
            try:
                os.pread(self.fd, 1, self.file[1] + offset)
            except OSError:
                pass

    def willneed(self, start: int, length: int) -> None:
        if self.fd < 0:
            _advise(self.mm, mmap.MADV_WILLNEED, start, length)
            return
        try:
            os.posix_fadvise(self.fd, self.file[1] + start, length, os.POSIX_FADV_WILLNEED)
        except OSError:  # advice only
            pass


def page_ranges(arr: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint ``[start, end)`` ranges of memory pages (address // PAGE) holding a byte of
    rows ``[first, last)`` of ``arr`` (C-contiguous; rows along axis 0). Computed per row range,
    never per page: a million lookups whose ranges span many pages each cost a million ranges."""
    row = int(arr.strides[0]) if arr.ndim else int(arr.itemsize)
    n = len(arr) if arr.ndim else 1
    first = np.asarray(first, dtype=np.int64).ravel()
    last = np.asarray(last, dtype=np.int64).ravel()
    a = np.clip(first, 0, n) * row
    b = np.clip(last, 0, n) * row
    keep = b > a
    addr = int(arr.ctypes.data)
    return spans((addr + a[keep]) // PAGE, (addr + b[keep] - 1) // PAGE + 1, gap=1)


def spans(starts: np.ndarray, ends: np.ndarray, gap: int = GAP) -> tuple[np.ndarray, np.ndarray]:
    """The union of page ranges ``[starts, ends)`` (any order, overlapping or not) as sorted
    ``[start, end)`` spans, joining spans less than ``gap`` pages apart (``gap=1``: touching)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not bool((starts[1:] >= starts[:-1]).all()):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)  # the end of the union so far: ranges may nest
    new = np.flatnonzero(np.r_[True, starts[1:] - reach[:-1] >= gap])
    return starts[new], np.r_[reach[new[1:] - 1], reach[-1]]


@contextmanager
def behind_other_reads(in_flight: int = BACKGROUND_IN_FLIGHT) -> Iterator[None]:
    """Inside the block, this thread's :func:`page_in` calls request their pages in file order from
    this thread, with at most ``in_flight`` bytes requested and not yet read (for a page-in in the
    background, so the reads other threads wait for are not queued behind it)."""
    before = getattr(_pacing, "in_flight", None)
    _pacing.in_flight = in_flight
    try:
        yield
    finally:
        _pacing.in_flight = before


def _paced(reqs: list[tuple[_Request, int, int]], in_flight: int) -> None:
    """Make the requests in order, waiting for the oldest while more than ``in_flight`` bytes are
    pending."""
    queued: deque[tuple[_Request, int, int]] = deque()
    pending = 0
    for request, start, length in reqs:
        request.willneed(start, length)
        queued.append((request, start + length - 1, length))
        pending += length
        while pending > in_flight:
            oldest, last_byte, n = queued.popleft()
            oldest.wait(last_byte)
            pending -= n


def page_in(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> int:
    """Request the pages of rows ``[first, last)`` of each ``(array, first, last)``, every array's
    at once. Arrays that are not memory maps are skipped. Returns the pages requested."""
    if not _ADVICE:
        return 0
    reqs: list[tuple[_Request, int, int]] = []
    total = 0
    by_map: dict[int, tuple[_Request, int, list[np.ndarray]]] = {}
    for arr, first, last in parts:
        mm = _mapping(arr)
        if mm is None or not arr.size or not arr.flags.c_contiguous:
            continue
        ranges = page_ranges(arr, first, last)
        if len(ranges[0]):
            if id(mm) not in by_map:
                base = np.frombuffer(mm, dtype=np.uint8)  # the mapping's first byte is on a page
                by_map[id(mm)] = (_Request(mm, _mapped_file(arr)), int(base.ctypes.data) // PAGE, [])
                del base
            by_map[id(mm)][2].append(ranges)
    for request, base, range_lists in by_map.values():
        mm = request.mm
        s, e = spans(np.concatenate([r[0] for r in range_lists]) - base,
                     np.concatenate([r[1] for r in range_lists]) - base, gap=1)
        total += int((e - s).sum())
        s, e = spans(s, e)
        if int((e - s).sum()) * PAGE < len(mm) // 2:
            # sparse (the hits' df and docs rows): a fault on a page outside the spans (evicted
            # since, or never requested) reads that page only, not read_ahead_kb around it
            _advise(mm, mmap.MADV_RANDOM)
        for a, b in zip(s.tolist(), e.tolist(), strict=True):
            for p in range(a, b, PIECE):
                reqs.append((request, p * PAGE, (min(b, p + PIECE) - p) * PAGE))
    if not reqs:
        return total

    def work(t: int) -> None:
        # thread t takes every THREADS-th request: the reads in flight stay close in each file
        for request, start, length in reqs[t::THREADS]:
            request.willneed(start, length)

    with ExitStack() as files:
        for request, _, _ in by_map.values():
            files.enter_context(request)
        in_flight = getattr(_pacing, "in_flight", None)
        if in_flight is not None:
            _paced(reqs, in_flight)
            return total
        if len(reqs) <= THREADS:  # a few spans (small lookups): no threads
            for request, start, length in reqs:
                request.willneed(start, length)
            return total
        # threads of its own per call: a background page-in (detect's n-gram lookups) must not hold
        # up the requests of a lookup that waits for them
        with ThreadPoolExecutor(THREADS, thread_name_prefix="tcqa-pagein") as pool:
            list(pool.map(work, range(THREADS)))
    return total
