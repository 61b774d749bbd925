"""Corpus inputs: which files a list of specs names (``resolve_inputs``: files, globs, folders) and
how one input is cut into ``InputShard``s that can be read independently (``split_input``).
Reading a shard's documents is ``documents.iter_documents``.
"""

from __future__ import annotations

import glob
import os
import posixpath
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from tcqa_data.decontam.readers.storage import (
    is_url,
    list_url,
    local_path,
    open_arrow_file,
    open_binary,
    sniff,
)
from tcqa_data.errors import InputError, TcqaError

# Compressions of JSON lines: name suffix -> format suffix (``storage.MAGIC`` tells them apart by
# their first bytes, which win over the name).
COMPRESSIONS: tuple[tuple[str, str], ...] = ((".gz", "gz"), (".zst", "zst"), (".zstd", "zst"),
                                             (".bz2", "bz2"), (".xz", "xz"))
JSON_LINES_NAMES = (".jsonl", ".json", ".ndjson")
# File suffix -> format name (as the name says it; ``resolve_inputs`` then reads the first bytes).
# Longest suffixes first so ".jsonl.gz" is not taken for ".gz".
FORMATS: tuple[tuple[str, str], ...] = tuple(
    (name + suffix, "jsonl." + comp) for name in JSON_LINES_NAMES for suffix, comp in COMPRESSIONS
) + tuple((name, "jsonl") for name in JSON_LINES_NAMES) + (
    (".parquet", "parquet"),
    (".arrow", "arrow"),
    (".txt", "txt"),
)
_SUPPORTED = ".jsonl, .json, .ndjson (plain, .gz, .zst, .bz2, .xz), .parquet, .arrow, .txt"
JSONL_FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "jsonl.bz2", "jsonl.xz")
# The metadata files of a ``datasets`` ``save_to_disk`` folder: not corpus files.
_DATASETS_METADATA = ("state.json", "dataset_info.json", "dataset_dict.json")


@dataclass(frozen=True)
class CorpusInput:
    """One corpus file. ``format`` is one of ``JSONL_FORMATS`` (JSON lines, plain or compressed, the
    compression read from the file's first bytes), ``parquet``, ``arrow`` (Arrow IPC, as ``datasets``'
    ``save_to_disk`` writes), ``txt``."""

    path: str
    format: str
    size: int


# formats whose documents' text is never longer (in characters) than the file is in bytes
_TEXT_BOUNDED_BY_SIZE = frozenset({"jsonl", "txt"})


def text_progress_total(inputs: Sequence[CorpusInput] | Sequence[dict]) -> int | None:
    """The total for a progress bar that counts the characters of text read: the files' sizes where
    every input is plain (JSONL, .txt: a document's text never has more characters than its line has
    bytes), None where one is compressed or Parquet (its text can be many times its size on disk, so
    a total in file bytes would run past 100%: the bar then shows the amount read and the rate)."""
    total = 0
    for inp in inputs:
        if isinstance(inp, dict):
            fmt, size = inp.get("format"), inp.get("size", 0)
        else:
            fmt, size = inp.format, inp.size
        if fmt not in _TEXT_BOUNDED_BY_SIZE:
            return None
        total += int(size)
    return total


@dataclass(frozen=True)
class InputShard:
    """A part of one input that can be read independently (see ``split_input``).

    ``kind`` is ``"bytes"`` (``start``/``end`` are byte offsets: the shard holds every line whose
    first byte lies in ``[start, end)``), ``"row_groups"`` (Parquet row groups ``[start, end)``) or
    ``"whole"`` (the whole file). ``first_line`` is the 1-based line/row number of the shard's first
    line or row in the whole file, so refs equal those of a whole-file read.
    """

    input: CorpusInput
    index: int
    kind: str
    start: int
    end: int
    first_line: int


# ---------------------------------------------------------------------------------------------
# Resolving input specs


def _format_of(path: str) -> str | None:
    name = os.path.basename(path)
    for suffix, fmt in FORMATS:
        if name.endswith(suffix):
            return fmt
    return None


def _walk(folder: str, unsupported: list[str]) -> list[str]:
    """Supported files under ``folder`` (recursive); hidden files and folders are skipped
    (they are temp files of atomic writers, editor swap files, ``.git``). Other files no reader
    takes go to ``unsupported``."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        _choose(root, [f for f in files if not f.startswith(".")], os.path.join, found, unsupported)
    return found


def _choose(root: str, names: list[str], join, found: list[str], unsupported: list[str]) -> None:
    """The corpus files among the files ``names`` of one folder (local or a URL prefix) into
    ``found``, the others into ``unsupported``. A ``datasets`` ``save_to_disk`` folder gives the
    Arrow files its ``state.json`` names (not its metadata, nor ``cache-*.arrow`` files of a later
    ``map``)."""
    data_files = _datasets_data_files(join(root, "state.json"), names)
    for name in sorted(names):
        path = join(root, name)
        if data_files is not None and (name in _DATASETS_METADATA or name.endswith(".arrow")):
            if name in data_files:
                found.append(path)
            elif name.endswith(".arrow"):
                unsupported.append(path)
            continue
        if name == "dataset_dict.json":
            continue
        (found if _format_of(name) is not None else unsupported).append(path)


def _datasets_data_files(state: str, names: list[str]) -> set[str] | None:
    """The Arrow files a ``save_to_disk`` folder's ``state.json`` lists, None if it is not one."""
    if "state.json" not in names or not any(f.endswith(".arrow") for f in names):
        return None
    import json

    try:
        with open_binary(state) as fh:
            return {str(d["filename"]) for d in json.loads(fh.read())["_data_files"]}
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"not a datasets save_to_disk state file ({type(e).__name__}: {e})",
                         path=state) from None


def _committed_only(prefix: str, objects: dict[str, int]) -> dict[str, int]:
    """A prefix holding a committed output (``object_outputs``: ``purify --out s3://...``) gives the
    shards its commit manifest names and nothing else (not a killed run's objects, nor its log and
    reports); one that holds an unfinished output is refused."""
    from tcqa_data.object_outputs import COMMIT, WORK, committed_objects

    if f"{prefix}/{COMMIT}" not in objects and not any(u.startswith(f"{prefix}/{WORK}/") for u in objects):
        return objects
    try:
        named = committed_objects(prefix) or {}
    except TcqaError as e:
        raise InputError(str(e).removeprefix(f"{prefix}: "), path=prefix) from None
    shards = {f"{prefix}/{rel}": v for rel, v in named.items() if v.get("kind") == "shard"}
    for url, size in objects.items():
        if url in shards and shards[url]["size"] != size:
            raise InputError(f"is {size} bytes, but the output's {COMMIT} says {shards[url]['size']}: "
                             "changed after the commit", path=url)
    missing = sorted(set(shards) - set(objects))
    if missing:
        raise InputError(f"named by the output's {COMMIT} but missing", path=missing[0])
    return {u: objects[u] for u in shards}


def _resolve_url(spec: str, unsupported: list[str]) -> dict[str, int]:
    """A URL spec's corpus objects (url -> size), expanded as a local spec is."""
    objects, is_prefix = list_url(spec)
    if is_prefix:
        objects = _committed_only(spec.rstrip("/"), objects)
    if not is_prefix and not glob.has_magic(spec):
        if objects and _format_of(spec) is None:
            raise InputError(f"unsupported file type; expected one of {_SUPPORTED}", path=spec)
        return objects
    by_dir: dict[str, list[str]] = {}
    for url in objects:
        folder, _, name = url.rpartition("/")
        by_dir.setdefault(folder, []).append(name)
    found: list[str] = []
    for folder, names in sorted(by_dir.items()):
        _choose(folder, names, posixpath.join, found, unsupported)
    if not found:
        what = "prefix has" if is_prefix else "pattern matches"
        raise InputError(f"{what} no corpus files ({_SUPPORTED})", path=spec)
    return {url: objects[url] for url in found}


def _json_document(path: str) -> bool:
    """True when the first line of ``path`` is not one JSON object (a JSON document written over
    several lines, an array): not JSON lines. A first line longer than 64 KB counts as JSON lines."""
    import json

    with open_binary(path) as fh:
        head = fh.read(1 << 16)
    line, newline, _ = head.partition(b"\n")
    if (not newline and len(head) == 1 << 16) or not line.strip():
        return False
    try:
        return not isinstance(json.loads(line.removeprefix(b"\xef\xbb\xbf")), dict)
    except ValueError:
        return True


def detect_format(path: str) -> str | None:
    """The format of the file at ``path``: its name's (``FORMATS``), with the compression of JSON
    lines read from its first bytes; None if no reader takes its name."""
    by_name = _format_of(path)
    if by_name is None or by_name not in JSONL_FORMATS:
        return by_name
    kind = sniff(path)
    if kind == "":  # an empty file: nothing to tell, the name's format reads it as empty
        return by_name
    return "jsonl." + kind if kind in ("gz", "zst", "bz2", "xz") else "jsonl"


def _kind_of(mode: int) -> str | None:
    """What a file that is not a regular file is (a FIFO would block the first read for ever)."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "not a regular file"


def resolve_inputs(specs: list[str], skipped: list[dict[str, str]] | None = None) -> list[CorpusInput]:
    """Expand files, globs and folders into a sorted, deduplicated list of ``CorpusInput``.

    A file named explicitly must have a supported suffix; folders and globs take only supported
    files, and each other file they hold is appended to ``skipped`` (``{"path", "reason"}``) when
    given. A spec that matches no supported file is an ``InputError`` naming it, and so is any
    input that is not a regular file (a FIFO, socket or device: refused before anything is read).
    """
    unsupported: list[str] = []
    if not specs:
        raise InputError("no corpus inputs given")
    supported = _SUPPORTED
    chosen: dict[str, str] = {}  # realpath -> path as stored
    remote: dict[str, int] = {}  # URL -> size
    named: set[str] = set()  # files named explicitly (not found by a folder or glob)
    for spec in specs:
        spec = local_path(os.fspath(spec))
        if is_url(spec):
            found = _resolve_url(spec, unsupported)
            if list(found) == [spec]:
                named.add(spec)
            remote.update(found)
            continue
        if os.path.isdir(spec):
            paths = _walk(spec, unsupported)
        elif os.path.exists(spec) and not os.path.isfile(spec):
            raise InputError(f"is {_kind_of(os.stat(spec).st_mode)}, not a regular file; only regular "
                             "files are read", path=spec)
        elif os.path.isfile(spec):
            if _format_of(spec) is None:
                raise InputError(f"unsupported file type; expected one of {supported}", path=spec)
            paths = [spec]
            named.add(os.path.normpath(spec))
        else:
            paths = []
            for match in glob.glob(spec, recursive=True):
                if os.path.isdir(match):
                    paths.extend(_walk(match, unsupported))
                elif not os.path.basename(match).startswith("."):
                    (paths if _format_of(match) is not None else unsupported).append(match)
        if not paths:
            what = "folder has" if os.path.isdir(spec) else "pattern matches"
            if not os.path.isdir(spec) and not glob.has_magic(spec):
                raise InputError("no such file or folder", path=spec)
            raise InputError(f"{what} no corpus files ({supported})", path=spec)
        for p in paths:
            p = os.path.normpath(p)
            real = os.path.realpath(p)
            # The same file reached twice (overlapping specs, symlinks): keep one, deterministically.
            if real not in chosen or p < chosen[real]:
                chosen[real] = p
    out = []
    for p in sorted(chosen.values()):
        if p != os.fsencode(p).decode("utf-8", "replace"):
            # bytes that are not UTF-8 (kept by Python as lone surrogates) cannot be recorded in a
            # manifest or a doc ref: refused before anything is read or written
            raise InputError("the file name is not valid UTF-8 (undecodable bytes); rename it",
                             path=ascii(p)[1:-1])
        try:
            st = os.stat(p)
        except OSError as exc:  # e.g. a broken symbolic link in a folder, or a file removed meanwhile
            raise InputError(f"cannot read it: {exc.strerror}"
                             + (" (a symbolic link to a missing file)" if os.path.islink(p) else ""),
                             path=p) from None
        kind = _kind_of(st.st_mode)
        if kind is not None:
            raise InputError(f"is {kind}, not a regular file; only regular files are read", path=p)
        out.append(CorpusInput(path=p, format=detect_format(p) or "", size=st.st_size))
    out += [CorpusInput(path=url, format=detect_format(url) or "", size=size)
            for url, size in sorted(remote.items())]
    # a folder's or glob's plain .json that is one JSON document (metadata, a config), not JSON lines
    documents = [c.path for c in out if c.format == "jsonl" and c.path.endswith(".json")
                 and c.path not in named and _json_document(c.path)]
    out = [c for c in out if c.path not in documents]
    if skipped is not None:
        skipped.extend({"path": p, "reason": "a JSON document, not JSON lines (its first line is not one "
                                             "JSON object)"} for p in documents)
        reason = f"no reader takes this file type (supported: {supported})"
        taken = {c.path if is_url(c.path) else os.path.realpath(c.path) for c in out}
        for p in sorted({p if is_url(p) else os.path.normpath(p) for p in unsupported}):
            if (p if is_url(p) else os.path.realpath(p)) not in taken:
                skipped.append({"path": p, "reason": reason})
    return out


# ---------------------------------------------------------------------------------------------
# Shards


def _count_newlines(fh, start: int, end: int) -> int:
    fh.seek(start)
    left, n = end - start, 0
    while left > 0:
        buf = fh.read(min(left, 1 << 24))
        if not buf:
            break
        n += buf.count(b"\n")
        left -= len(buf)
    return n


def split_input(inp: CorpusInput, target_bytes: int) -> list[InputShard]:
    """Cut ``inp`` into shards of about ``target_bytes`` for parallel reading.

    Uncompressed JSONL: byte ranges (one pass over the file counts newlines so each shard knows
    its first global line number). Parquet: runs of whole row groups. Compressed files and
    ``.txt`` (one document per file): one shard.
    """
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    if inp.format == "jsonl" and inp.size > target_bytes:
        shards = []
        newlines, pos = 0, 0  # newlines counted in [0, pos)
        with open_binary(inp.path) as fh:
            for i, start in enumerate(range(0, inp.size, target_bytes)):
                end = min(start + target_bytes, inp.size)
                if start == 0:
                    lines_before = 0
                else:
                    # Lines that begin before `start`: line 1, plus one per newline in [0, start - 1).
                    newlines += _count_newlines(fh, pos, start - 1)
                    pos = start - 1
                    lines_before = 1 + newlines
                shards.append(InputShard(inp, i, "bytes", start, end, lines_before + 1))
        return shards
    if inp.format == "parquet":
        meta = _open_parquet(inp.path).metadata
        groups: list[tuple[int, int, int]] = []  # (start, end, first_row)
        start, acc, row, first_row = 0, 0, 0, 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            acc += sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            row += rg.num_rows
            if acc >= target_bytes or g == meta.num_row_groups - 1:
                groups.append((start, g + 1, first_row))
                start, acc, first_row = g + 1, 0, row
        if not groups:
            groups = [(0, 0, 0)]
        return [InputShard(inp, i, "row_groups", s, e, fr + 1) for i, (s, e, fr) in enumerate(groups)]
    return [InputShard(inp, 0, "whole", 0, inp.size, 1)]


def _open_parquet(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(open_arrow_file(path))
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable Parquet file: {e}", path=path) from None
