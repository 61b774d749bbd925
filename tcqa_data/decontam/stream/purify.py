"""The purify step: rewrite one corpus input without its contamination (``tcqa-data purify``).

Input: which docs of the input are contaminated (their line or row, from the stream pass) and a
test for the benchmark's n-gram hashes. Per doc, in the input's own format, other fields kept:

- ``drop``: a contaminated doc is left out (datatrove, decon);
- ``excise``: lm-eval's ``Janitor.clean`` (``excise.py``): each piece kept becomes its own
  record, with the doc's other fields, ``purify_doc_ref`` and ``purify_piece`` (0, 1, ...), so no
  n-gram spans a cut (NeMo Curator does the same); no piece left drops the doc. A doc given word
  spans (the semantic tier's best windows: ``[start, end)`` in its normalized words) also loses
  each span, mapped to chars (``core/normalize.token_char_spans``) and cut with Janitor's margin
  and piece rules (``excise.cut_spans``);
- every other line or row is written unchanged (JSONL: the same bytes); an input with nothing
  to remove is copied byte for byte. Inputs are streamed: JSONL line by line, Parquet one row
  group at a time (each input row group one output row group).

The output is written to a temporary name and renamed (``io_utils.atomic_path``); compression
is deterministic (gzip without name or time, zstd with fixed parameters).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from tcqa_data.decontam.readers import CorpusInput
from tcqa_data.decontam.readers.documents import field_value, with_field
from tcqa_data.decontam.readers.inputs import JSONL_FORMATS
from tcqa_data.decontam.readers.storage import open_binary
from tcqa_data.decontam.stream.excise import (
    MINIMUM_SLICE,
    TOO_DIRTY_CUTOFF,
    WINDOW,
    cut_spans,
    janitor_matches,
    janitor_pieces,
    removed_spans,
)
from tcqa_data.errors import InputError
from tcqa_data.io_utils import atomic_path

MODES = ("excise", "drop")
PIECE_FIELD = "purify_piece"
REF_FIELD = "purify_doc_ref"


@dataclass(frozen=True)
class PurifyConfig:
    """``mode`` (``MODES``); Janitor's ``window``, ``minimum_slice`` and ``too_dirty_cutoff`` (its
    defaults); ``janitor_exact``: Janitor's windows exactly (``excise.py``); the n-gram size, hash
    seed and text field of the stream pass; ``whole_sizes``: the sizes of short benchmark items
    matched whole (their windows are cut as an n-gram's are)."""

    mode: str = "excise"
    n: int = 13
    seed: int = 0
    window: int = WINDOW
    minimum_slice: int = MINIMUM_SLICE
    too_dirty_cutoff: int = TOO_DIRTY_CUTOFF
    janitor_exact: bool = True
    whole_sizes: tuple[int, ...] = ()
    text_field: str = "text"
    normalization: str = "janitor"  # the stream pass's: the words the word spans count


@dataclass
class Removal:
    """One contaminated doc's fate: ``action`` dropped | cut | kept (excise found no Janitor
    match: see ``excise.py``), the pieces written, char spans and UTF-8 bytes removed, and (excise)
    how many n-gram matches and word-span cuts made them."""

    row: int
    action: str
    pieces: int
    spans: list[tuple[int, int]] = field(default_factory=list)
    bytes_removed: int = 0
    ngram_matches: int = 0
    span_cuts: int = 0


WordSpans = Sequence[tuple[int, int]]


def _char_spans(text: str, word_spans: WordSpans, scheme: str) -> list[tuple[int, int]]:
    """Word spans ``[start, end)`` (in ``text``'s normalized words) as char ranges ``[a, b)``."""
    from tcqa_data.decontam.core.normalize import token_char_spans

    chars = token_char_spans(text, scheme)
    out = []
    for a, b in word_spans:
        if not 0 <= a < b <= len(chars):  # the words the stream pass counted are this text's
            raise RuntimeError(f"word span [{a}, {b}) outside the doc's {len(chars)} words")
        out.append((chars[a][0], chars[b - 1][1]))
    return out


class DocCut(NamedTuple):
    """What purify does to one contaminated doc: the pieces kept, the char spans removed, the
    action ("kept", "cut", "dropped"), its n-gram matches and the spans cut for other evidence."""

    pieces: list[str]
    removed: list[tuple[int, int]]
    action: str
    ngram_matches: int
    span_cuts: int


def _cut(text: str, cfg: PurifyConfig, is_dirty: Callable[[np.ndarray, int], np.ndarray],
         word_spans: WordSpans = ()) -> DocCut:
    """What purify does to one contaminated doc (``DocCut``)."""
    if cfg.mode == "drop":
        return DocCut([], [(0, len(text))], "dropped", 0, 0)
    matches = sorted(m for size in (cfg.n, *cfg.whole_sizes)
                     for m in janitor_matches(text, size, cfg.seed, lambda h, s=size: is_dirty(h, s),
                                              cfg.janitor_exact))
    if not matches and not word_spans:
        return DocCut([text], [], "kept", 0, 0)
    keep = (janitor_pieces(text, matches, cfg.window, cfg.minimum_slice, cfg.too_dirty_cutoff) if matches
            else [(0, len(text))])
    cuts = 0
    if word_spans and (keep or not matches):  # a doc Janitor dropped stays dropped
        keep, cuts = cut_spans(len(text), keep, _char_spans(text, word_spans, cfg.normalization),
                               len(matches), cfg.window, cfg.minimum_slice, cfg.too_dirty_cutoff)
    return DocCut([text[a:b] for a, b in keep], removed_spans(len(text), keep), "cut" if keep else "dropped",
                  len(matches), cuts)


def _removal(row: int, text: str, cut: DocCut) -> Removal:
    removed = len(text.encode("utf-8", "surrogatepass")) - sum(len(p.encode("utf-8", "surrogatepass"))
                                                               for p in cut.pieces)
    return Removal(row, cut.action, len(cut.pieces) if cut.action != "kept" else 1, cut.removed, removed,
                   cut.ngram_matches, cut.span_cuts)


@contextmanager
def _writer(path: Path, fmt: str) -> Iterator[IO[bytes]]:
    with open(path, "wb") as raw:
        if fmt == "jsonl.gz":
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                yield gz
        elif fmt == "jsonl.bz2":
            with bz2.BZ2File(raw, mode="wb") as bz:
                yield bz
        elif fmt == "jsonl.xz":
            with lzma.LZMAFile(raw, mode="wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64) as xz:
                yield xz
        elif fmt == "jsonl.zst":
            import zstandard

            with zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False) as zw:
                yield zw
        else:
            yield raw


def purify_input(inp: CorpusInput, dest: Path, rows: dict[int, str], cfg: PurifyConfig,
                 is_dirty: Callable[[np.ndarray, int], np.ndarray],
                 word_spans: Mapping[int, WordSpans] | None = None) -> list[Removal]:
    """Write ``inp`` to ``dest`` without the contamination of the docs at ``rows`` (line or row ->
    doc ref); returns what was removed from each. ``is_dirty(hashes, size)``: which hashes of that
    size are the flagged benchmark docs'. ``word_spans`` (line or row -> word spans): cut from
    those docs too in ``excise`` mode (module doc)."""
    word_spans = word_spans or {}
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not rows:
        with open_binary(inp.path) as src, atomic_path(dest) as tmp, open(tmp, "wb") as copy:
            shutil.copyfileobj(src, copy, 1 << 22)
        return []
    if inp.format == "parquet":
        return _purify_parquet(inp, dest, rows, cfg, is_dirty, word_spans)
    if inp.format not in JSONL_FORMATS:
        raise InputError(f"purify writes JSON lines and Parquet inputs, not {inp.format!r}", path=inp.path)
    from tcqa_data.decontam.readers.documents import _jsonl_source

    out: list[Removal] = []
    with open_binary(inp.path) as fh, atomic_path(dest) as tmp, _writer(tmp, inp.format) as w:
        lines, _, _, line, _ = _jsonl_source(fh, inp, None)
        for raw in lines:
            line += 1
            ref = rows.get(line)
            if ref is None:
                w.write(raw)
                continue
            record = json.loads(raw[3:] if line == 1 and raw.startswith(b"\xef\xbb\xbf") else raw)
            text = field_value(record, cfg.text_field)[1]
            cut = _cut(text, cfg, is_dirty, word_spans.get(line, ()))
            out.append(_removal(line, text, cut))
            if cut.action == "kept":
                w.write(raw)
                continue
            for k, piece in enumerate(cut.pieces):
                rec = {**with_field(record, cfg.text_field, piece), REF_FIELD: ref, PIECE_FIELD: k}
                w.write(json.dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
    return out


def _purify_parquet(inp: CorpusInput, dest: Path, rows: dict[int, str], cfg: PurifyConfig,
                    is_dirty: Callable[[np.ndarray, int], np.ndarray], word_spans: Mapping[int, WordSpans]
                    ) -> list[Removal]:
    """A Parquet input rewritten one row group at a time (memory: one row group, whatever the
    file's size); each input row group gives one output row group."""
    import pyarrow.parquet as pq

    from tcqa_data.decontam.readers.inputs import _open_parquet

    source = _open_parquet(inp.path)
    if cfg.text_field not in source.schema_arrow.names:
        raise InputError("purify rewrites a top-level text column of a Parquet file, not a nested one",
                         path=inp.path, field=cfg.text_field)
    out: list[Removal] = []
    first = 1  # rows are 1-based, as the reader numbers them
    with atomic_path(dest) as tmp:
        writer = None
        for group in range(max(source.num_row_groups, 1)):
            table = (source.read_row_group(group) if source.num_row_groups
                     else source.schema_arrow.empty_table())
            result = _purify_rows(table, first, rows, cfg, is_dirty, out, word_spans)
            first += table.num_rows
            if writer is None:
                writer = pq.ParquetWriter(tmp, result.schema, compression="zstd")
            writer.write_table(result)
        assert writer is not None
        writer.close()
    return out


def _purify_rows(table: Any, first: int, rows: dict[int, str], cfg: PurifyConfig,
                 is_dirty: Callable[[np.ndarray, int], np.ndarray], out: list[Removal],
                 word_spans: Mapping[int, WordSpans]) -> Any:
    """One row group (its first row numbered ``first``) without its contamination; its removals
    appended to ``out``."""
    import pyarrow as pa

    texts = table.column(cfg.text_field).to_pylist()
    take: list[int] = []
    new_text: list[Any] = []
    refs: list[str | None] = []
    piece_no: list[int | None] = []
    for i, text in enumerate(texts):
        ref = rows.get(first + i)
        if ref is None:
            take.append(i)
            new_text.append(text)
            refs.append(None)
            piece_no.append(None)
            continue
        cut = _cut(text, cfg, is_dirty, word_spans.get(first + i, ()))
        out.append(_removal(first + i, text, cut))
        for k, piece in enumerate(cut.pieces):
            take.append(i)
            new_text.append(piece)
            refs.append(None if cut.action == "kept" else ref)
            piece_no.append(None if cut.action == "kept" else k)
    result = table.take(pa.array(take, type=pa.int64()))
    col = result.schema.get_field_index(cfg.text_field)
    text_type = result.schema.field(col)
    result = result.set_column(col, text_type, pa.array(new_text, type=text_type.type))
    result = result.append_column(REF_FIELD, pa.array(refs, type=pa.string()))
    return result.append_column(PIECE_FIELD, pa.array(piece_no, type=pa.int64()))
