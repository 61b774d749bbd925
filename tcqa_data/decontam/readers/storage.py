"""The one place a corpus file is opened: local paths with ``open``, URLs (``s3://``, ``gs://``,
``az://``/``abfs://``, ``hf://``, ``http(s)://``, ``file://``) through fsspec. Every reader takes the
file object ``open_binary`` gives; none opens a path itself.

Compression is told from a file's first bytes (``sniff``), not only its name: a ``.jsonl`` that
is gzip data is read as gzip, a ``.json.gz`` that a download left decompressed as plain text.
"""

from __future__ import annotations

from typing import IO

from tcqa_data.errors import InputError

# First bytes -> what the file is (RFC 1952, RFC 8878, bzip2, xz, Parquet, Arrow IPC file/stream).
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gz"),
    (b"\x28\xb5\x2f\xfd", "zst"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PAR1", "parquet"),
    (b"ARROW1", "arrow-file"),
    (b"\xff\xff\xff\xff", "arrow-stream"),
)
SNIFF_BYTES = 8


def is_url(spec: str) -> bool:
    """True for ``scheme://...`` other than ``file://`` (those are opened through fsspec)."""
    scheme, sep, _ = spec.partition("://")
    return bool(sep) and scheme not in ("", "file") and scheme.isascii() and scheme.replace("+", "").isalnum()


def local_path(spec: str) -> str:
    """``file://PATH`` as ``PATH``; other specs unchanged."""
    return spec[len("file://"):] if spec.startswith("file://") else spec


def open_binary(path: str) -> IO[bytes]:
    """``path`` (a local path or a URL) opened for reading bytes; ``InputError`` naming it when it
    cannot be."""
    path = local_path(path)
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read it: {e.strerror}", path=path) from None


def open_arrow_file(path: str):
    """``path`` as a pyarrow random-access file (Parquet footers and row groups, Arrow IPC)."""
    import pyarrow as pa

    path = local_path(path)
    try:
        return pa.OSFile(path, "rb")
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"cannot read it: {getattr(e, 'strerror', None) or e}", path=path) from None


def sniff(path: str) -> str | None:
    """What ``path``'s first bytes say it is (a ``MAGIC`` name), ``""`` for an empty file, None for
    anything else (plain text)."""
    with open_binary(path) as fh:
        head = fh.read(SNIFF_BYTES)
    return sniff_bytes(head)


def sniff_bytes(head: bytes) -> str | None:
    if not head:
        return ""
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    return None
