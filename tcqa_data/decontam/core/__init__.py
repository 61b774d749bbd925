"""What every part of the index uses: normalization (``normalize``), n-gram hashing
(``hashing``), the compiled kernels (``_numba_kernels/``) and their selection (``kernel``),
sorted-array helpers (``arrays``), packed (key, id) tables (``packed``), page-in advice for
memory-mapped reads (``pagein``), and the layout of a map's scratch files (``map_files``).
Nothing here imports another ``decontam`` package."""
