"""Compile the numba kernels once, at install time, so that the first `index-corpus` runs as fast
as the tenth.

Numba compiles a kernel on its first call and keeps the machine code in its on-disk cache
(``cache=True``: the package's ``__pycache__`` where it is writable, else numba's per-user cache
folder, or ``NUMBA_CACHE_DIR`` where set). Without this step the first build after an install pays
about 14 CPU-s of compiling per process. Here a tiny index is built in a temporary folder with the
same code paths as a real build (JSONL scan, n-gram runs with a multi-run merge, MinHash bands, the
text store), so every kernel is compiled for the argument types those paths give it.

    python -m tcqa_data.decontam.build.warmup      # scripts/install.sh runs it; run it on each Ray node

Nothing is written outside the cache and a temporary folder (removed afterwards); with the kernels
turned off (``TCQA_KERNEL=numpy``, or numba missing) it does nothing.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# a small corpus with repeated passages (shared n-grams across docs, MinHash candidates) and enough
# text to make several n-gram runs under the small run size below
_WORDS = ("the river delta floods every spring and the farmers move their herds to the hills where "
          "old stone walls keep the wind from the orchards while the town below counts its boats").split()
_DOCS = 120


def _corpus(path: Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(_DOCS):
            words = [_WORDS[(i * 7 + j * (1 + i % 5)) % len(_WORDS)] for j in range(60 + i % 40)]
            text = " ".join(words) + ". " + " ".join(_WORDS[: 20 + i % 10]) + "."
            fh.write(json.dumps({"id": f"w{i}", "text": text.capitalize()}) + "\n")


def warm_kernels() -> dict[str, Any]:
    """Build a tiny index so that every kernel of the build is compiled and cached; returns
    ``{"kernel", "cpu_seconds", "compiled": [names], "not_compiled": [names]}``."""
    from tcqa_data.decontam.core import kernel

    if not kernel.enabled():
        return {"kernel": kernel.name(), "cpu_seconds": 0.0, "compiled": [], "not_compiled": []}
    from tcqa_data.decontam.build.index import build_index

    t = time.process_time()
    with tempfile.TemporaryDirectory(prefix="tcqa-warmup-") as tmp:
        src = Path(tmp) / "corpus.jsonl"
        _corpus(src)
        # small runs and chunks: several runs per map, so the reduce's multi-run merge compiles too
        build_index([str(src)], Path(tmp) / "index", workers=1, quiet=True, run_pairs=2_000,
                    chunk_pairs=1_000, batch_chars=20_000, text_store="auto")
    compiled = {name: bool(f.signatures) for name, f in kernel.kernels().items()}
    return {"kernel": kernel.name(), "cpu_seconds": round(time.process_time() - t, 2),
            "compiled": sorted(k for k, v in compiled.items() if v),
            "not_compiled": sorted(k for k, v in compiled.items() if not v)}


def main() -> int:
    res = warm_kernels()
    print(f"tcqa-data kernels ({res['kernel']}): {len(res['compiled'])} compiled or loaded from the cache "
          f"in {res['cpu_seconds']} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
