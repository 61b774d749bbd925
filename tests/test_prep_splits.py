"""Group policies and whole-group clean/dirty splits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tcqa_data.errors import ConfigError
from tcqa_data.prep.splits import add_ids, check_invariants, group_flags, split_table


def test_group_policies():
    gids = [0, 0, 0, 1, 1, 2]
    doc = [True, False, False, True, True, False]
    assert group_flags(doc, gids, "any").tolist() == [True, True, True, True, True, False]
    assert group_flags(doc, gids, "all").tolist() == [False, False, False, True, True, False]
    assert group_flags(doc, gids, "majority").tolist() == [False, False, False, True, True, False]
    with pytest.raises(ConfigError, match="group policy"):
        group_flags(doc, gids, "some")


def test_split_partition_keeps_order_and_whole_groups():
    rng = np.random.default_rng(0)
    gids = np.sort(rng.integers(0, 40, size=200))
    gids = np.unique(gids, return_inverse=True)[1]  # dense ids in order of first appearance
    table = add_ids(pa.table({"x": [f"d{i}" for i in range(200)], "doc_id": ["orig"] * 200}), gids)
    assert table.column("doc_id").to_pylist() == list(range(200))
    assert table.column("orig_doc_id").to_pylist() == ["orig"] * 200
    dirty = group_flags(rng.random(200) < 0.05, gids, "any")
    clean_t, dirty_t = split_table(table, dirty)
    check_invariants(table, clean_t, dirty_t)
    c, d = clean_t.column("doc_id").to_pylist(), dirty_t.column("doc_id").to_pylist()
    assert sorted(c + d) == list(range(200)) and not set(c) & set(d)
    assert c == sorted(c) and d == sorted(d)
    assert not set(clean_t.column("group_id").to_pylist()) & set(dirty_t.column("group_id").to_pylist())
    assert 0 < len(d) < 200


def test_check_invariants_catches_a_partial_group():
    table = add_ids(pa.table({"x": list("abcd")}), [0, 0, 1, 1])
    clean_t, dirty_t = split_table(table, [True, False, False, False])  # doc-level, not group-level
    with pytest.raises(RuntimeError, match="groups split"):
        check_invariants(table, clean_t, dirty_t)
