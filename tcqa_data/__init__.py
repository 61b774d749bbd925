"""tcqa-data: measure benchmark contamination against a training corpus and report clean scores."""

__version__ = "0.1.0"

# Version of the on-disk formats (index, prepared splits, eval results). Bump on incompatible change.
# 2: compact n-gram index layout (decontam/ngrams/index.py); format 1 indexes are still read for lookups.
FORMAT_VERSION = 2
