"""Row layouts for packed scoring: sequences that share a prefix laid out in one row.

Pure layout (token ids, positions, which token sees which): ``scoring`` turns a ``Packed`` row
into model inputs with a tree attention mask. ``pack`` puts a prefix once and each sequence's
own suffix after it; ``trie`` puts sorted sequences as one prefix tree (every distinct prefix
once); ``concat`` puts several groups side by side, each seeing only itself; ``fill_rows``
shares rows among short items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Packed:
    """Sequences sharing a prefix, laid out as prefix + suffix_1 + suffix_2 + ... in one row."""

    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)  # 0 = shared prefix, j+1 = suffix of member j
    maps: list[list[int]] = field(default_factory=list)  # member j, position p -> index in the row
    # segment of the prefix each token may also see (its own group's); empty = all 0 (one group)
    bases: list[int] = field(default_factory=list)
    # tokens are laid out in tree preorder: token k is seen by the tokens k .. ends[k]-1 (its
    # subtree); empty = derived from segments/bases
    ends: list[int] = field(default_factory=list)


def subtree_ends(p: Packed) -> list[int]:
    """Subtree ends of a prefix + suffixes layout: a prefix token is seen by the rest of its
    group, a suffix token by the rest of its own suffix."""
    if p.ends:
        return p.ends
    bases = p.bases or [0] * len(p.tokens)
    last_seg: dict[int, int] = {}
    last_base: dict[int, int] = {}
    for i, (sg, bs) in enumerate(zip(p.segments, bases, strict=True)):
        last_seg[sg] = i
        last_base[bs] = i
    return [(last_base[sg] if sg == bs else last_seg[sg]) + 1
            for sg, bs in zip(p.segments, bases, strict=True)]


def trie(seqs: Sequence[Sequence[int]]) -> Packed:
    """Sequences in sorted order as one prefix tree: every distinct prefix once, in preorder,
    each token at its original position; ``maps[j]`` lists member j's tokens root to leaf."""
    p = Packed()
    path: list[int] = []
    prev: Sequence[int] = ()
    parent: list[int] = []
    for s in seqs:
        n = min(len(prev), len(s))
        k = 0
        while k < n and prev[k] == s[k]:
            k += 1
        path = path[:k]
        for d in range(k, len(s)):
            parent.append(path[-1] if path else -1)
            path.append(len(p.tokens))
            p.tokens.append(s[d])
            p.positions.append(d)
        p.maps.append(list(path))
        prev = s
    p.segments = [0] * len(p.tokens)
    ends = [i + 1 for i in range(len(p.tokens))]
    for i in range(len(p.tokens) - 1, -1, -1):
        if parent[i] >= 0 and ends[i] > ends[parent[i]]:
            ends[parent[i]] = ends[i]
    p.ends = ends
    return p


def concat(parts: Sequence[Packed]) -> Packed:
    """Several packed groups side by side in one row, each seeing only itself (block-diagonal).

    Segment ids are renumbered to stay unique in the row; each token keeps its own group's prefix
    segment as its ``base``, so the tree mask lets it see exactly what it saw in its own group."""
    if len(parts) == 1:
        return parts[0]
    out = Packed()
    seg_off = 0
    for p in parts:
        start = len(out.tokens)
        bases = p.bases or [0] * len(p.tokens)
        out.ends += [e + start for e in subtree_ends(p)]
        out.tokens += p.tokens
        out.positions += p.positions
        out.segments += [s + seg_off for s in p.segments]
        out.bases += [b + seg_off for b in bases]
        out.maps += [[i + start for i in m] for m in p.maps]
        seg_off += max(p.segments) + 1
    return out


def fill_rows(lengths: Sequence[int], rows_per_batch: int) -> list[list[list[int]]]:
    """Batches of rows of item indices, items placed longest first: a batch's rows are as long
    as its longest item, and shorter items share a row while they fit (first fit, decreasing), so
    a batch carries little padding and no row grows longer than it would alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    left = order  # descending by length
    batches: list[list[list[int]]] = []
    while left:
        cap = lengths[left[0]]
        rows: list[list[int]] = []
        room: list[int] = []
        rest: list[int] = []
        for i in left:
            n = lengths[i]
            for r in range(len(rows)):
                if room[r] >= n:
                    rows[r].append(i)
                    room[r] -= n
                    break
            else:
                if len(rows) < rows_per_batch:
                    rows.append([i])
                    room.append(cap - n)
                else:
                    rest.append(i)
        batches.append(rows)
        left = rest
    return batches


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``seqs`` share."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def pack(seqs: Sequence[Sequence[int]]) -> Packed:
    """Sequences as one row: their common prefix once, then each one's own suffix."""
    p = Packed()
    shared = common_prefix_len(seqs) if len(seqs) > 1 else len(seqs[0])
    p.tokens = list(seqs[0][:shared])
    p.positions = list(range(shared))
    p.segments = [0] * shared
    for j, s in enumerate(seqs):
        start = len(p.tokens)
        rest = list(s[shared:])
        p.tokens += rest
        p.positions += range(shared, len(s))
        p.segments += [j + 1] * len(rest)
        p.maps.append(list(range(shared)) + list(range(start, start + len(rest))))
    return p


def chunk_members(seqs: list[list[int]], limit: int) -> list[list[int]]:
    """Split member indices so each packed row stays under ``limit`` tokens."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    for i in range(len(seqs)):
        trial = cur + [i]
        if cur and len(pack([seqs[k] for k in trial]).tokens) > limit:
            chunks.append(cur)
            cur = [i]
        else:
            cur = trial
    if cur:
        chunks.append(cur)
    return chunks
