"""The one place a corpus file is opened: local paths with ``open``, URLs (``s3://``, ``gs://``,
``az://``/``abfs://``, ``hf://``, ``http(s)://``, ``file://``) through fsspec. Every reader takes the
file object ``open_binary`` (or ``open_arrow_file``) gives; none opens a path itself.

URLs: the filesystem comes from fsspec (``s3fs``, ``gcsfs``, ``adlfs``, ``huggingface_hub``: the
``cloud`` extra), its credentials and endpoint from each library's own chain (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``~/.aws/config``, instance roles; ``GOOGLE_APPLICATION_CREDENTIALS``;
``AZURE_STORAGE_*``; ``HF_TOKEN``): nothing here reads, stores or prints a credential, and a URL
is written to manifests and reports as given. Reads are ranged (``seek`` + ``read`` fetch that
range: a shard of a plain JSONL object or a Parquet row group reads its part only); throttling
and dropped connections are retried by the library with bounded backoff (s3fs: 5 tries, 0.1 s
growing 1.7x). A missing object, denied access or unreachable endpoint is one ``InputError``
naming the URL.

Compression is told from a file's first bytes (``sniff``), not only its name: a ``.jsonl`` that
is gzip data is read as gzip, a ``.json.gz`` that a download left decompressed as plain text.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import IO, Any

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


READ_BLOCK = 8 << 20  # bytes per ranged request when reading an object in order
EXTRAS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
          "abfss": "adlfs", "hf": "huggingface_hub", "http": "aiohttp", "https": "aiohttp"}


def filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec filesystem, path inside it)`` of ``url``; the filesystem's own credential chain."""
    from fsspec.core import url_to_fs

    scheme = url.partition("://")[0]
    try:
        return url_to_fs(url)
    except ImportError as e:
        package = EXTRAS.get(scheme, str(e.name or e))
        raise InputError(f"reading {scheme}:// needs {package}: pip install 'tcqa-data[cloud]'",
                         path=url) from None
    except ValueError as e:
        raise InputError(f"not a URL fsspec can read: {e}", path=url) from None


def url_error(url: str, e: BaseException) -> InputError:
    """One line naming ``url`` for what went wrong reading it (the library's message, which names
    the bucket and key but no credential)."""
    if isinstance(e, FileNotFoundError):
        return InputError("no such object or prefix", path=url)
    if isinstance(e, PermissionError):
        return InputError(f"access denied ({_first_line(e)})", path=url)
    return InputError(f"cannot read it: {type(e).__name__}: {_first_line(e)}", path=url)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def open_binary(path: str) -> IO[bytes]:
    """``path`` (a local path or a URL) opened for reading bytes; ``InputError`` naming it when it
    cannot be. A URL's file object reads ``READ_BLOCK`` bytes per ranged request, ahead of ``read``."""
    if is_url(path):
        fs, inner = filesystem(path)
        try:
            return fs.open(inner, "rb", block_size=READ_BLOCK, cache_type="readahead")
        except Exception as e:  # each backend has its own errors: all end as one line
            raise url_error(path, e) from None
    path = local_path(path)
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read it: {e.strerror}", path=path) from None


def content_sha256(path: str) -> str:
    """sha256 of the bytes at ``path`` (a local file or a URL, read once in order)."""
    if not is_url(path):
        from tcqa_data.outputs import file_sha256

        return file_sha256(local_path(path))
    h = hashlib.sha256()
    with open_binary(path) as fh:
        try:
            while chunk := fh.read(READ_BLOCK):
                h.update(chunk)
        except OSError as e:
            raise (url_error(path, e) if is_url(path) else InputError(f"cannot read it: {e}", path=path)) \
                from None
    return h.hexdigest()


def content_fingerprint(path: str) -> str:
    """What identifies the bytes at ``path`` for a rerun's reuse checks: a local file's sha256; an
    object's ETag (or the store's MD5) as the store lists it, no download (sha256 of its bytes,
    read once, where the store gives neither)."""
    if not is_url(path):
        return content_sha256(path)
    fs, inner = filesystem(path)
    try:
        fs.invalidate_cache(inner)
        info = fs.info(inner)
    except Exception as e:
        raise url_error(path, e) from None
    for key in ("ETag", "etag", "md5Hash", "content_md5"):
        if info.get(key):
            return f"{key}:{str(info[key]).strip(chr(34))}:{info.get('size')}"
    return content_sha256(path)


def relative_names(paths: list[str]) -> list[str]:
    """Each input's name relative to the inputs' deepest common folder (local: links resolved) or
    common prefix (URLs, without the scheme): where ``purify`` writes its output."""
    import os
    from pathlib import Path

    remote = [is_url(p) for p in paths]
    if any(remote) and not all(remote):
        raise InputError("purify's inputs mix local files and URLs: its outputs are named by their "
                         "paths below one common folder; purify each in its own run",
                         path=paths[remote.index(False)])
    if not any(remote):
        root = Path(os.path.commonpath([str(Path(p).resolve().parent) for p in paths]))
        return [Path(p).resolve().relative_to(root).as_posix() for p in paths]
    several_schemes = len({p.partition("://")[0] for p in paths}) > 1
    keys = [p.replace("://", "/", 1) if several_schemes else p.partition("://")[2] for p in paths]
    root = posixpath.commonpath([posixpath.dirname(k) for k in keys])
    return [posixpath.relpath(k, root) if root else k for k in keys]


def list_url(spec: str) -> tuple[dict[str, int], bool]:
    """What a URL spec names, as ``resolve_inputs`` expands a local one: a glob's matches, a
    prefix's ("folder's") objects, or the object itself. Returns ``({url: size}, is_prefix)``,
    hidden names (``.``-prefixed parts below the spec) skipped. One listing request per page of a
    prefix (``find``), none per object."""
    fs, inner = filesystem(spec)
    fs.invalidate_cache()  # a listing cached earlier in this process may predate new objects
    try:
        if any(c in inner for c in "*?["):
            found, is_prefix = fs.glob(inner, detail=True), False
        elif fs.isdir(inner):
            found, is_prefix = fs.find(inner, detail=True), True
        else:
            found, is_prefix = {inner: fs.info(inner)}, False
    except Exception as e:
        raise url_error(spec, e) from None
    out: dict[str, int] = {}
    for key, info in sorted(found.items()):
        if info.get("type") == "directory":
            if not is_prefix:  # a glob matching a prefix: its objects, as a local glob's folders
                out.update(list_url(fs.unstrip_protocol(key))[0])
            continue
        rel = key[len(inner):] if is_prefix else posixpath.basename(key)
        if any(part.startswith(".") for part in rel.split("/") if part):
            continue
        out[fs.unstrip_protocol(key)] = int(info.get("size") or 0)
    return out, is_prefix


def open_arrow_file(path: str):
    """``path`` as a pyarrow random-access file (Parquet footers and row groups, Arrow IPC): a
    URL's reads are ranged requests of just the footer and the row groups asked for."""
    import pyarrow as pa

    if is_url(path):
        fs, inner = filesystem(path)
        try:
            return pa.PythonFile(fs.open(inner, "rb", block_size=READ_BLOCK, cache_type="none"), mode="r")
        except Exception as e:
            raise url_error(path, e) from None
    path = local_path(path)
    try:
        return pa.OSFile(path, "rb")
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"cannot read it: {getattr(e, 'strerror', None) or e}", path=path) from None


def sniff(path: str) -> str | None:
    """What ``path``'s first bytes say it is (a ``MAGIC`` name), ``""`` for an empty file, None for
    anything else (plain text)."""
    with open_binary(path) as fh:
        try:
            head = fh.read(SNIFF_BYTES)
        except OSError as e:
            raise (url_error(path, e) if is_url(path) else InputError(f"cannot read it: {e}", path=path)) \
                from None
    return sniff_bytes(head)


def sniff_bytes(head: bytes) -> str | None:
    if not head:
        return ""
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    return None
