"""Corpus inputs: which files a list of specs names (``resolve_inputs``: files, globs, folders) and
how one input is cut into ``InputShard``s that can be read independently (``split_input``).
Reading a shard's documents is ``documents.iter_documents``.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from tcqa_data.errors import InputError

# File suffix -> format name. Longest suffixes first so ".jsonl.gz" is not taken for ".gz".
FORMATS: tuple[tuple[str, str], ...] = (
    (".jsonl.gz", "jsonl.gz"),
    (".jsonl.zst", "jsonl.zst"),
    (".jsonl", "jsonl"),
    (".parquet", "parquet"),
    (".txt", "txt"),
)


@dataclass(frozen=True)
class CorpusInput:
    """One corpus file. ``format`` is one of ``jsonl``, ``jsonl.gz``, ``jsonl.zst``, ``parquet``, ``txt``."""

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
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            (found if _format_of(name) is not None else unsupported).append(os.path.join(root, name))
    return found


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
    supported = ", ".join(s for s, _ in FORMATS)
    chosen: dict[str, str] = {}  # realpath -> path as stored
    for spec in specs:
        spec = os.fspath(spec)
        if os.path.isdir(spec):
            paths = _walk(spec, unsupported)
        elif os.path.exists(spec) and not os.path.isfile(spec):
            raise InputError(f"is {_kind_of(os.stat(spec).st_mode)}, not a regular file; only regular "
                             "files are read", path=spec)
        elif os.path.isfile(spec):
            if _format_of(spec) is None:
                raise InputError(f"unsupported file type; expected one of {supported}", path=spec)
            paths = [spec]
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
        fmt = _format_of(p)
        assert fmt is not None
        try:
            st = os.stat(p)
        except OSError as exc:  # e.g. a broken symbolic link in a folder, or a file removed meanwhile
            raise InputError(f"cannot read it: {exc.strerror}"
                             + (" (a symbolic link to a missing file)" if os.path.islink(p) else ""),
                             path=p) from None
        kind = _kind_of(st.st_mode)
        if kind is not None:
            raise InputError(f"is {kind}, not a regular file; only regular files are read", path=p)
        out.append(CorpusInput(path=p, format=fmt, size=st.st_size))
    if skipped is not None:
        reason = f"no reader takes this file type (supported: {supported})"
        taken = {os.path.realpath(c.path) for c in out}
        for p in sorted({os.path.normpath(p) for p in unsupported}):
            if os.path.realpath(p) not in taken:
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
        with open(inp.path, "rb") as fh:
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
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable Parquet file: {e}", path=path) from None
