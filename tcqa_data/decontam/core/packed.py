"""Compact sorted tables of (32-bit key, id) entries: a directory on the key's top bits and
bit-packed (key remainder, id) entries.

A table of ``n`` entries sorted by (key, id) is stored as

* ``cells``: ``2**dir_bits + 1`` cumulative offsets: the entries whose key starts with the
  ``dir_bits``-bit prefix ``c`` are ``[cells[c], cells[c + 1])``;
* ``words``: uint64 words holding, for entry ``i``, the ``width = 32 - dir_bits + id_bits`` bits
  ``(key remainder << id_bits) | id`` at bit ``i * width`` (little-endian bit order, one spare word
  at the end so every entry can be read as two words).

With about ``LOAD`` entries per directory cell (``dir_bits_for``) the directory costs
``32 / LOAD`` bits per entry, and an entry ``32 - log2(n / LOAD) + id_bits`` bits instead of
``32 + 32``. The 32 key bits are all kept, so a table can be decoded back to its (key, id) pairs
and re-encoded with another ``dir_bits`` (an appended index equals a full rebuild).

Tables are written as a stream (``TableWriter``: sorted blocks in, directory and words out
sequentially, bounded memory) and read by ``lookup`` from memory maps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tcqa_data.decontam.core import kernel

LOAD = 16  # entries per directory cell (aimed at): directory 2 bits per entry
MAX_DIR_BITS = 26
KEY_BITS = 32
_U64 = np.uint64
_LOW32 = _U64(0xFFFFFFFF)
_OFFSET_CHUNK = 1 << 20


def dir_bits_for(n_entries: int) -> int:
    """Directory bits for a table of about ``n_entries`` entries (about ``LOAD`` per cell)."""
    d = max(0, int(n_entries // LOAD).bit_length() - 1)
    return min(d, MAX_DIR_BITS)


def id_bits_for(max_id: int) -> int:
    return max(1, int(max_id).bit_length())


def entry_width(dir_bits: int, id_bits: int) -> int:
    w = KEY_BITS - dir_bits + id_bits
    if w > 64:
        raise ValueError(f"packed entries of {w} bits (ids of {id_bits} bits) do not fit in 64 bits")
    return w


def n_words(n_entries: int, width: int) -> int:
    """uint64 words of ``n_entries`` packed entries, plus the spare word."""
    return -(-n_entries * width // 64) + 1


def pack(values: np.ndarray, width: int) -> np.ndarray:
    """``len(values)`` (a multiple of 64) values of ``width`` bits -> ``len * width / 64`` words."""
    values = np.asarray(values, dtype=_U64)
    n = len(values)
    assert n % 64 == 0
    if kernel.enabled():
        return kernel.kernels()["pack_bits"](values, width)
    out = np.zeros(n * width // 64 + 1, dtype=_U64)
    if n == 0:
        return out[:0]
    pos = np.arange(n, dtype=np.int64) * width
    word = pos >> 6
    shift = (pos & 63).astype(_U64)
    # the bits of different values never overlap, so adding them is OR-ing them
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
    out[word[starts]] += np.add.reduceat(values << shift, starts)
    spill = (pos & 63) + width > 64
    if spill.any():
        hi = values[spill] >> (_U64(64) - shift[spill])
        out[word[spill] + 1] += hi  # at most one spilling value per word
    return out[:-1]


def unpack(words: np.ndarray, index: np.ndarray, width: int) -> np.ndarray:
    """Entries ``index`` (int64) of a packed table (``words`` may be a memory map)."""
    index = np.asarray(index, dtype=np.int64)
    pos = index * width
    word = pos >> 6
    shift = (pos & 63).astype(_U64)
    lo = np.asarray(words[word], dtype=_U64) >> shift
    hi_word = np.asarray(words[word + 1], dtype=_U64)
    spill = shift > _U64(64 - width)
    lo[spill] |= hi_word[spill] << (_U64(64) - shift[spill])
    mask = _U64(0xFFFFFFFFFFFFFFFF) if width == 64 else _U64((1 << width) - 1)
    return lo & mask


class OffsetsWriter:
    """Cumulative start offsets of a sorted stream of small ints (cells, doc ordinals): for each
    value ``v`` in ``[0, size)``, the number of stream items ``< v``; the last entry is the total."""

    def __init__(self, write: Callable[[np.ndarray], None], size: int) -> None:
        self.write = write
        self.size = size
        self.next = 0  # next value whose offset is not written yet
        self.seen = 0

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64)
        if len(values):
            self._emit(int(values[-1]) + 1, values)
            self.seen += len(values)

    def _emit(self, upto: int, values: np.ndarray) -> None:
        # the offsets of values c0 .. c1-1 by counting the items of each and summing (a binary
        # search per value took 3x as long)
        below = int(np.searchsorted(values, self.next, side="left"))  # items < c0
        for c0 in range(self.next, upto, _OFFSET_CHUNK):
            c1 = min(c0 + _OFFSET_CHUNK, upto)
            end = int(np.searchsorted(values, c1, side="left"))
            counts = np.bincount(values[below:end] - c0, minlength=c1 - c0)
            out = np.empty(c1 - c0, dtype=np.int64)
            out[0] = 0
            np.cumsum(counts[:-1], out=out[1:])
            out += self.seen + below
            self.write(out)
            below = end
        self.next = max(self.next, upto)

    def close(self) -> None:
        self._emit(self.size + 1, np.zeros(0, dtype=np.int64))


class TableWriter:
    """Streams one table: ``add`` sorted (key, id) blocks, then ``close``. ``write_cells`` and
    ``write_words`` receive the directory and the words in file order. ``cells=(c0, c1)``: the
    keys all lie in directory cells ``[c0, c1)`` and the directory written is that slice of a
    table's (``c1 - c0 + 1`` offsets from 0): a key range packed on its own, for ``WordsJoin``."""

    def __init__(self, write_cells: Callable[[np.ndarray], None], write_words: Callable[[np.ndarray], None],
                 n_entries: int | None, dir_bits: int, id_bits: int, cells: tuple[int, int] | None = None
                 ) -> None:
        self.dir_bits, self.id_bits = dir_bits, id_bits
        self.width = entry_width(dir_bits, id_bits)
        self.first_cell, last = (0, 1 << dir_bits) if cells is None else cells
        self.cells = OffsetsWriter(write_cells, last - self.first_cell)
        self.write_words = write_words
        self.n_entries = n_entries
        self.left = np.zeros(0, dtype=_U64)
        self.words_written = 0

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=_U64)
        rbits = KEY_BITS - self.dir_bits
        rem = keys & _U64((1 << rbits) - 1)
        self._add(keys >> _U64(rbits), (rem << _U64(self.id_bits)) | np.asarray(ids, dtype=_U64))

    def add_pairs(self, pairs: np.ndarray) -> None:
        """``add`` of sorted ``key << 32 | id`` values (ids below 2**32), without splitting them."""
        rbits = KEY_BITS - self.dir_bits
        rem = (pairs >> _U64(32)) & _U64((1 << rbits) - 1)
        self._add(pairs >> _U64(32 + rbits), (rem << _U64(self.id_bits)) | (pairs & _LOW32))

    def _add(self, cells: np.ndarray, vals: np.ndarray) -> None:
        """Entries given as their directory cell and packed value (key remainder, id)."""
        self.cells.add(cells.astype(np.int64) - self.first_cell)
        vals = np.concatenate([self.left, vals]) if len(self.left) else vals
        full = len(vals) // 64 * 64
        if full:
            self._put(pack(vals[:full], self.width))
        self.left = vals[full:]

    def _put(self, words: np.ndarray) -> None:
        self.words_written += len(words)
        self.write_words(words)

    def close(self) -> int:
        """Finish the table; returns its entry count (``n_entries`` when given: checked)."""
        if self.n_entries is not None and self.cells.seen != self.n_entries:
            raise RuntimeError(f"packed table: {self.cells.seen} entries written, {self.n_entries} expected")
        self.cells.close()
        total = n_words(self.cells.seen, self.width)
        pad = np.zeros(-len(self.left) % 64, dtype=_U64)
        last = pack(np.concatenate([self.left, pad]), self.width)
        need = total - self.words_written
        tail = np.concatenate([last, np.zeros(max(0, need - len(last)), dtype=_U64)])
        assert not tail[need:].any()
        self._put(tail[:need])
        return self.cells.seen


class WordsJoin:
    """Joins packed entry streams, each written from bit 0 (``TableWriter``'s words), into the
    words of one table holding their entries in order: the words of a key range are shifted by
    the bits of the ranges before it, no entry is unpacked. ``add`` a stream's words (its entries'
    bits: the spare word and any padding are left out) in pieces; ``close`` writes the last
    partial word and the table's spare word. ``write_words`` may get a view of a buffer reused by
    the next ``add``: it must write (or copy) the words before it returns."""

    def __init__(self, write_words: Callable[[np.ndarray], None], width: int) -> None:
        self.write_words, self.width = write_words, width
        self.bits = 0  # bits of the table so far
        self.carry = _U64(0)  # the bits of a partial last word, not written yet
        # shift buffers reused from piece to piece (fresh ones cost their page faults each time)
        self._lo = np.zeros(0, dtype=_U64)
        self._hi = np.zeros(0, dtype=_U64)

    def add(self, words: np.ndarray, n_bits: int) -> None:
        """The first ``n_bits`` bits of ``words`` (bits past them zero), after the table's bits;
        a stream given in pieces: every piece but its last holds a multiple of 64 bits."""
        if n_bits <= 0:
            return
        words = np.asarray(words[:-(-n_bits // 64)], dtype=_U64)
        s = self.bits & 63
        if s:
            n = len(words)
            if len(self._lo) < n + 1:
                self._lo, self._hi = np.empty(n + 1, dtype=_U64), np.empty(n, dtype=_U64)
            out = self._lo[:n + 1]
            np.left_shift(words, _U64(s), out=out[:n])
            out[n] = 0
            hi = np.right_shift(words, _U64(64 - s), out=self._hi[:n])
            np.bitwise_or(out[1:], hi, out=out[1:])
            out[0] |= self.carry
        else:
            out = words
        end = s + n_bits  # bits in ``out``
        full = end >> 6
        self.write_words(out[:full])
        self.carry = out[full] if end & 63 else _U64(0)
        self.bits += n_bits

    def close(self) -> int:
        """Write the last partial word and the spare word; returns the words written in all."""
        tail = [self.carry] if self.bits & 63 else []
        self.write_words(np.array(tail + [0], dtype=_U64))
        return -(-self.bits // 64) + 1


def decode_range(cells: np.ndarray, words: np.ndarray, c0: int, c1: int, dir_bits: int, id_bits: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(keys uint64, ids int64) of the entries of cells ``[c0, c1)`` (``cells`` holds offsets
    ``c0 .. c1`` inclusive, already sliced: ``cells[0]`` is cell c0's start)."""
    width = entry_width(dir_bits, id_bits)
    lo, hi = int(cells[0]), int(cells[-1])
    vals = unpack(words, np.arange(lo, hi, dtype=np.int64), width)
    counts = np.diff(np.asarray(cells, dtype=np.int64))
    cell = np.repeat(np.arange(c0, c1, dtype=np.int64), counts).astype(_U64)
    rbits = KEY_BITS - dir_bits
    keys = (cell << _U64(rbits)) | (vals >> _U64(id_bits))
    ids = (vals & _U64((1 << id_bits) - 1)).astype(np.int64)
    return keys, ids


def _first_at_least(words: np.ndarray, lo: np.ndarray, hi: np.ndarray, target: np.ndarray, width: int,
                    id_bits: int, above: bool) -> np.ndarray:
    """Per key, the first entry in ``[lo, hi)`` whose remainder is >= ``target`` (> with ``above``):
    a binary search, all keys at once (entries of a cell are sorted by remainder)."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        act = np.flatnonzero(lo < hi)
        if not len(act):
            return lo
        mid = (lo[act] + hi[act]) >> 1
        rem = unpack(words, mid, width) >> _U64(id_bits)
        right = rem <= target[act] if above else rem < target[act]
        lo[act[right]] = mid[right] + 1
        hi[act[~right]] = mid[~right]


def page_in_lookups(tables: Sequence[tuple[np.ndarray, np.ndarray]], keys: Sequence[np.ndarray],
                    dir_bits: int, id_bits: int) -> None:
    """Before sparse lookups of ``keys[i]`` in table ``tables[i]`` (``(cells, words)`` memory maps):
    read the directory rows, then the entry words, they will read, every table's pages at once
    (``pagein``: on a cold page cache the disk serves them in parallel, and only those pages)."""
    from tcqa_data.decontam.core.pagein import page_in

    rbits = _U64(KEY_BITS - dir_bits)
    cell_of = [(np.asarray(k, dtype=_U64) >> rbits).astype(np.int64) for k in keys]
    page_in([(cells, c, c + 2) for (cells, _), c in zip(tables, cell_of, strict=True)])
    width = entry_width(dir_bits, id_bits)
    parts = []
    for (cells, words), c in zip(tables, cell_of, strict=True):
        lo = np.asarray(cells[c], dtype=np.int64)
        hi = np.asarray(cells[c + 1], dtype=np.int64)
        # entries [lo, hi) lie in words [lo * width // 64, (hi * width - 1) // 64] (empty cells: none)
        parts.append((words, (lo * width) >> 6, np.where(hi > lo, ((hi * width - 1) >> 6) + 1, 0)))
    page_in(parts)


def lookup(cells: np.ndarray, words: np.ndarray, keys: np.ndarray, dir_bits: int, id_bits: int,
           max_per_key: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Entries whose key equals one of ``keys`` (uint32): ``(query index, id)`` int64 arrays,
    ids ascending per query; at most ``max_per_key`` (the smallest ids) per query when given.
    Memory and time grow with the matches, not with the size of the keys' directory cells.
    The compiled kernel (``decontam/core/kernel.py``) searches key by key; the numpy code below is its
    fallback and gives the same arrays."""
    keys = np.asarray(keys, dtype=_U64)
    if kernel.enabled() and len(keys):
        # plain ndarray views of the memory maps (numba takes no np.memmap subclass)
        return kernel.kernels()["packed_lookup"](np.asarray(cells), np.asarray(words, dtype=_U64), keys,
                                                 int(dir_bits), int(id_bits),
                                                 -1 if max_per_key is None else int(max_per_key))
    width = entry_width(dir_bits, id_bits)
    rbits = KEY_BITS - dir_bits
    cell = (keys >> _U64(rbits)).astype(np.int64)
    lo = np.asarray(cells[cell], dtype=np.int64)
    hi = np.asarray(cells[cell + 1], dtype=np.int64)
    rem = keys & _U64((1 << rbits) - 1)
    first = _first_at_least(words, lo, hi, rem, width, id_bits, above=False)
    last = _first_at_least(words, first, hi, rem, width, id_bits, above=True)
    cnt = last - first
    if max_per_key is not None:
        cnt = np.minimum(cnt, max_per_key)  # ties are sorted by id: the smallest ids first
    total = int(cnt.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = np.cumsum(cnt) - cnt
    pos = np.repeat(first - start, cnt) + np.arange(total)
    owner = np.repeat(np.arange(len(keys)), cnt)
    ids = (unpack(words, pos, width) & _U64((1 << id_bits) - 1)).astype(np.int64)
    return owner, ids
