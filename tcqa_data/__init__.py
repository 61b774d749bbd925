"""tcqa-data: measure benchmark contamination against a training corpus and report clean scores."""

__version__ = "0.1.0"

# Version of the on-disk formats (index, prepared splits, eval results). Bump on incompatible change.
FORMAT_VERSION = 1
