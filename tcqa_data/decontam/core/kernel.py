"""Compiled (numba) kernels for the n-gram build's hot path, with the numpy code as fallback.

The kernels compute exactly what the numpy code in ``hashing``, ``ngrams.runs`` and ``ngrams.reduce`` computes
(same hash scheme, same sort order, same merge), in one pass each instead of a dozen numpy
passes: tokenize (Janitor bytes -> tokens at spaces), token hash, rolling n-gram hash per doc,
a stable LSD radix sort of (hash, doc) pairs, and the bucket merge (doc frequency, first P docs).
Index files are therefore byte-identical whichever path wrote them (tests compare both).

Selection: the kernels are used when numba imports and ``TCQA_KERNEL`` is not ``numpy``
(``TCQA_KERNEL=numpy`` forces the fallback, e.g. to compare or on a platform without numba
wheels). Compiled code is cached on disk (``cache=True``): the first call in a fresh install
compiles for a few seconds, later processes load it from the cache.
"""

from __future__ import annotations

import os
from functools import lru_cache

ENV = "TCQA_KERNEL"


@lru_cache(maxsize=1)
def _numba():
    try:
        import numba
    except ImportError:
        return None
    return numba


def enabled() -> bool:
    """True when the compiled kernels run (numba importable and ``TCQA_KERNEL`` != ``numpy``)."""
    choice = os.environ.get(ENV, "auto").strip().lower()
    if choice == "numpy":
        return False
    if choice not in ("auto", "numba", ""):
        from tcqa_data.errors import ConfigError

        raise ConfigError(f"{ENV}={choice!r}: use 'numba', 'numpy' or 'auto'")
    return _numba() is not None


def name() -> str:
    """``"numba"`` or ``"numpy"``: which path writes the index (for reports)."""
    return "numba" if enabled() else "numpy"


@lru_cache(maxsize=1)
def kernels() -> dict:
    """The compiled kernels (compiles or loads them from the cache on first use)."""
    _set_up_numba()
    from tcqa_data.decontam.core._numba_kernels import KERNELS

    return KERNELS


_BLAS_PROBE = "scipy.linalg.cython_blas"


def _set_up_numba() -> None:
    """Numba's one-time set-up of its compiler context (its first dispatch does it otherwise),
    without importing scipy.linalg: numba imports it there only to learn whether BLAS can back
    ``np.correlate``/``np.convolve`` in jitted code (``numba.np.arraymath._HAVE_BLAS``), which no
    kernel here uses, and that import costs ~0.3 CPU-s (scipy's array-API layer walks numpy),
    about 5% of a 200 MB n-gram build. Numba then takes its own loop for those two functions.
    Nothing changes where scipy.linalg or numba's array functions are loaded already."""
    import sys

    if _BLAS_PROBE in sys.modules or "numba.np.arraymath" in sys.modules:
        return
    from numba.core.registry import cpu_target

    sys.modules[_BLAS_PROBE] = None  # type: ignore[assignment]  # numba's probe: an ImportError
    try:
        cpu_target.target_context.refresh()
    finally:
        if _BLAS_PROBE in sys.modules and sys.modules[_BLAS_PROBE] is None:
            del sys.modules[_BLAS_PROBE]
