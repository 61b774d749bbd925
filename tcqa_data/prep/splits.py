"""Turn per-doc flags into whole-group clean and dirty splits.

MC-TACO scores a question over all its candidate answers; a split that keeps only some of a
question's candidates makes its scores meaningless. So flags are lifted to groups first, and the
clean and dirty splits hold whole groups only, in the original order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tcqa_data.errors import ConfigError

# any: a group is dirty when any member is (default: one seen candidate leaks the sentence and
# question shared by all). all: only when every member is. majority: when more than half are.
GROUP_POLICIES = ("any", "all", "majority")


def group_flags(doc_dirty: Sequence[bool], group_ids: Sequence[int], policy: str = "any") -> np.ndarray:
    """Per doc: whether its group is dirty under ``policy``."""
    if policy not in GROUP_POLICIES:
        raise ConfigError(f"unknown group policy {policy!r}; choose one of {GROUP_POLICIES}")
    d = np.asarray(doc_dirty, dtype=bool)
    g = np.asarray(group_ids, dtype=np.int64)
    if len(d) == 0:
        return d
    n_groups = int(g.max()) + 1
    dirty_count = np.bincount(g, weights=d.astype(np.float64), minlength=n_groups)
    size = np.bincount(g, minlength=n_groups).astype(np.float64)
    if policy == "any":
        gd = dirty_count > 0
    elif policy == "all":
        gd = dirty_count == size
    else:
        gd = dirty_count * 2 > size
    return gd[g]


def add_ids(table: pa.Table, group_ids: Sequence[int]) -> pa.Table:
    """Original fields + ``doc_id`` (0-based position) + ``group_id``."""
    for name in ("doc_id", "group_id"):
        if name in table.column_names:
            # keep the original column under another name so ours are unambiguous
            table = table.rename_columns([f"orig_{c}" if c == name else c for c in table.column_names])
    table = table.append_column("doc_id", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return table.append_column("group_id", pa.array(np.asarray(group_ids, dtype=np.int64)))


def split_table(full: pa.Table, dirty: Sequence[bool]) -> tuple[pa.Table, pa.Table]:
    """(clean, dirty) tables: disjoint, union = full, original order (filter keeps order)."""
    mask = pa.array(np.asarray(dirty, dtype=bool))
    return full.filter(pc.invert(mask)), full.filter(mask)


def check_invariants(full: pa.Table, clean: pa.Table, dirty: pa.Table) -> None:
    """Raise AssertionError-like RuntimeError if the split is not a whole-group partition."""
    f = full.column("doc_id").to_numpy()
    c = clean.column("doc_id").to_numpy()
    d = dirty.column("doc_id").to_numpy()
    if len(np.intersect1d(c, d)) or len(c) + len(d) != len(f):
        raise RuntimeError("clean and dirty splits are not a partition of full")
    if np.any(np.diff(c) <= 0) or np.any(np.diff(d) <= 0):
        raise RuntimeError("split order differs from the original order")
    gc = set(clean.column("group_id").to_pylist())
    gd = set(dirty.column("group_id").to_pylist())
    if gc & gd:
        raise RuntimeError(f"groups split across clean and dirty: {sorted(gc & gd)[:5]}")
