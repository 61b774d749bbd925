"""The full build's MinHash map input from JSONL without a ``str`` per document.

``index-corpus`` with MinHash needs each document twice: its characters (sentence windows are cut
on ``str`` offsets) and its Janitor-normalized bytes (the n-gram hashes and the window
signatures). Read through ``iter_documents`` that is a ``json.loads`` and a ``str`` per line, a
UTF-32 copy for the window kernels, and two UTF-8 encodings. Here a compiled pass
(``_numba_kernels.jsonl.jsonl_scan``) decodes each line's text field straight into code points
(one ``uint32`` per ``str`` character), and a second (``janitor_from_cps``) writes the
normalized bytes in the layout of ``readers.iter_normalized_batches`` with every character's
byte offset there. The documents, batches, refs, errors and skip counts are those of
``readers.iter_normalized_batches`` (so of ``iter_documents``): lines the kernel is not certain
about go through the Python line reader, as there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import sign_normalized, sign_spans
from tcqa_data.decontam.minhash.windows import codepoint_window_spans, texts_codepoints, window_spans
from tcqa_data.decontam.readers.documents import SkipStats
from tcqa_data.decontam.readers.inputs import CorpusInput, InputShard
from tcqa_data.decontam.readers.jsonl_batches import grown_array, scan_jsonl_batches


class CodepointBatch(NamedTuple):
    """Documents as code points: doc ``k`` is ``cps[doc_start[k]:doc_start[k + 1]]``; the
    1-based line of each and their total chars (``len(cps)``)."""

    cps: np.ndarray
    doc_start: np.ndarray
    rows: np.ndarray
    chars: int


class _CodepointBatchBuilder:
    """One ``CodepointBatch`` built by ``jsonl_scan`` on code points (``scan_jsonl_batches``' batch)."""

    def __init__(self, batch_chars: int) -> None:
        self.kernel = kernel.kernels()["jsonl_scan"]
        self.no_bytes = np.empty(0, dtype=np.uint8)  # the kernel's byte output, unused here
        self.batch_chars = batch_chars
        # room for a batch and a long line: uint32 code points, kept under glibc's 32 MiB mmap
        # threshold (the build fixes it there) so that every batch reuses heap pages instead of
        # page-faulting a fresh mapping in
        self.first_cap = min(batch_chars, 1 << 22) + (1 << 20)
        self._reset()

    def _reset(self) -> None:
        self.out = np.empty(self.first_cap, dtype=np.uint32)
        self.doc_start, self.doc_line = np.zeros(1025, np.int64), np.empty(1024, np.int64)
        self.o = self.ndocs = 0

    def scan(self, buf: np.ndarray, words: np.ndarray, pos: int, line: int, key: np.ndarray,
             counts: np.ndarray) -> tuple[int, int, int]:
        from tcqa_data.decontam.core.hashing import JANITOR_ASCII_MAP

        status, pos, self.o, self.ndocs, line, _ = self.kernel(
            buf, words, pos, len(buf), key, JANITOR_ASCII_MAP, self.no_bytes, self.out, True,
            self.o, self.doc_start, self.doc_line, self.ndocs, line, 0, self.batch_chars, counts)
        return status, pos, line

    def room(self, need: int) -> None:
        if self.ndocs + 1 >= len(self.doc_start):
            self.doc_start = grown_array(self.doc_start, 2 * len(self.doc_start))
            self.doc_line = grown_array(self.doc_line, 2 * len(self.doc_line))
        if self.o + need > len(self.out):
            self.out = grown_array(self.out, 2 * (self.o + need))

    def add(self, doc) -> bool:
        cp = np.frombuffer(doc.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        self.room(len(cp) + 1)
        self.out[self.o:self.o + len(cp)] = cp
        self.o += len(cp)
        self.doc_line[self.ndocs] = doc.row
        self.ndocs += 1
        self.doc_start[self.ndocs] = self.o
        return self.o >= self.batch_chars

    def finish(self) -> CodepointBatch:
        batch = CodepointBatch(self.out[:self.o], self.doc_start[:self.ndocs + 1].copy(),
                               self.doc_line[:self.ndocs].copy(), self.o)
        self._reset()
        return batch


def iter_codepoint_batches(inp: CorpusInput | InputShard, text_field: str = "text", on_error: str = "raise",
                           stats: SkipStats | None = None, batch_chars: int = 4_000_000
                           ) -> Iterator[CodepointBatch]:
    """``readers.iter_normalized_batches``' documents and batches, as code points (see above).
    Only for inputs ``readers.normalized_batches_supported`` accepts."""
    return scan_jsonl_batches(inp, text_field, on_error, stats, _CodepointBatchBuilder(batch_chars))


def normalized_codepoints(cps: np.ndarray, doc_start: np.ndarray, at_start: np.ndarray, at_end: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Janitor-normalized bytes in ``hashing.hash_normalized``'s layout, their doc starts, the
    byte offsets there of the sorted char positions ``at_start`` and ``at_end``: window starts
    and ends) of documents given as code points (``CodepointBatch``)."""
    from tcqa_data.decontam.core.hashing import JANITOR_ASCII_MAP

    return kernel.kernels()["janitor_from_cps"](cps, np.asarray(doc_start, dtype=np.int64), JANITOR_ASCII_MAP,
                                                np.asarray(at_start, dtype=np.int64),
                                                np.asarray(at_end, dtype=np.int64))


def codepoint_windows(cps: np.ndarray, doc_start: np.ndarray, params: MinHashParams
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The MinHash windows of documents given as code points (compiled ``punkt-fast``, Janitor
    normalization), as the map cuts them and the queries re-cut candidate docs: ``(each window's
    doc, the docs' normalized bytes, their doc starts, each window's byte start and end there)``;
    ``sketch.sign_normalized`` signs the windows."""
    win_doc, starts, ends = codepoint_window_spans(cps, doc_start, params)
    first = doc_start[win_doc]
    data, nstart, ws, we = normalized_codepoints(cps, doc_start, first + starts, first + ends)
    return win_doc, data, nstart, ws, we


def codepoints_supported(params: MinHashParams) -> bool:
    """Whether windows with ``params`` are cut, normalized and signed on code points
    (``codepoint_windows``): compiled ``punkt-fast`` windows, Janitor normalization."""
    return params.sentence_splitter == "punkt-fast" and params.normalization == "janitor" and kernel.enabled()


def window_signatures(texts: Sequence[str], params: MinHashParams
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(text index of each window, signatures, shingle counts)`` of every window of ``texts``
    (the map's documents that come as ``str``, and verification's candidate docs). Compiled
    ``punkt-fast`` windows with Janitor signatures: on code points, as ``ShardWriter.add_codepoints``
    (``codepoint_windows``: one UTF-32 copy of the texts cut into windows and normalized, then
    signed; the ``str`` path encodes each text twice more, and looks up every char's byte offset);
    otherwise the ``str`` path (``windows.window_spans``, ``sketch.sign_spans``). Both give the
    same windows and signatures."""
    if not codepoints_supported(params):
        win_doc, starts, ends = window_spans(texts, params)
        return win_doc, *sign_spans(texts, win_doc, starts, ends, params)
    win_doc, data, _, ws, we = codepoint_windows(*texts_codepoints(texts), params)
    return win_doc, *sign_normalized(data, ws, we, params)
