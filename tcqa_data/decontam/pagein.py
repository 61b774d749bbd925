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
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PAGE = mmap.PAGESIZE
GAP = (256 << 10) // PAGE  # pages: spans closer than this are read as one
PIECE = (4 << 20) // PAGE  # pages per request: the kernel reads at most read_ahead_kb per advice
THREADS = 4  # advising threads: a full request queue blocks the advice, so several keep it full
_ADVICE = hasattr(mmap, "MADV_WILLNEED") and hasattr(mmap, "MADV_RANDOM") and hasattr(mmap.mmap, "madvise")


def _mapping(arr: np.ndarray) -> mmap.mmap | None:
    mm = getattr(arr, "_mmap", None)
    return mm if isinstance(mm, mmap.mmap) and not mm.closed else None


def _advise(mm: mmap.mmap, advice: int, *span: int) -> None:
    try:
        mm.madvise(advice, *span)
    except (OSError, ValueError):  # advice only: a file system or mapping that refuses it reads as before
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


def page_in(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> int:
    """Request the pages of rows ``[first, last)`` of each ``(array, first, last)``, every array's
    at once. Arrays that are not memory maps are skipped. Returns the pages requested."""
    if not _ADVICE:
        return 0
    reqs: list[tuple[mmap.mmap, int, int]] = []
    total = 0
    by_map: dict[int, tuple[mmap.mmap, int, list[np.ndarray]]] = {}
    for arr, first, last in parts:
        mm = _mapping(arr)
        if mm is None or not arr.size or not arr.flags.c_contiguous:
            continue
        ranges = page_ranges(arr, first, last)
        if len(ranges[0]):
            if id(mm) not in by_map:
                base = np.frombuffer(mm, dtype=np.uint8)  # the mapping's first byte is on a page
                by_map[id(mm)] = (mm, int(base.ctypes.data) // PAGE, [])
                del base
            by_map[id(mm)][2].append(ranges)
    for mm, base, range_lists in by_map.values():
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
                reqs.append((mm, p * PAGE, (min(b, p + PIECE) - p) * PAGE))
    if not reqs:
        return total

    def work(t: int) -> None:
        # thread t takes every THREADS-th request: the reads in flight stay close in each file
        for mm, start, length in reqs[t::THREADS]:
            _advise(mm, mmap.MADV_WILLNEED, start, length)

    if len(reqs) <= THREADS:  # a few spans (small lookups): no threads
        for mm, start, length in reqs:
            _advise(mm, mmap.MADV_WILLNEED, start, length)
        return total
    # threads of its own per call: a background page-in (detect's MinHash prefetch) must not hold up
    # the requests of a lookup that waits for them
    with ThreadPoolExecutor(THREADS, thread_name_prefix="tcqa-pagein") as pool:
        list(pool.map(work, range(THREADS)))
    return total
