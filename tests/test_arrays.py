import numpy as np
import pytest

from tcqa_data.decontam.core.arrays import narrow_ordinals, sorted_unique


@pytest.mark.parametrize("dtype", [np.uint64, np.int64, np.uint32])
def test_sorted_unique_equals_np_unique(dtype):
    rng = np.random.default_rng(7)
    values = rng.integers(0, 1000, 5000).astype(dtype)  # many repeats
    kept = values.copy()
    assert np.array_equal(sorted_unique(values), np.unique(values))
    assert np.array_equal(values, kept)  # not in place: the input is untouched
    got = sorted_unique(values, in_place=True)
    assert np.array_equal(got, np.unique(kept)) and got.dtype == dtype
    for edge in (np.empty(0, dtype), np.array([5], dtype), np.array([3, 3, 3], dtype)):
        assert np.array_equal(sorted_unique(edge), np.unique(edge))


def test_narrow_ordinals_keeps_values_and_narrows_only_when_they_fit():
    small = np.array([0, 7, 0xFFFFFFFF], dtype=np.int64)
    assert narrow_ordinals(small).dtype == np.uint32
    assert np.array_equal(narrow_ordinals(small).astype(np.int64), small)
    big = np.array([0, 1 << 32], dtype=np.int64)
    assert narrow_ordinals(big).dtype == np.int64
    assert narrow_ordinals(np.empty(0, np.int64)).dtype == np.uint32
