"""Input vs input+label contamination (lm-evaluation-harness issue #1056).

A doc flagged by the decontaminate rule has its *input* in the corpus. It is *input+label*
contaminated when its label text (squad_completion: the answer ``value``; MC-TACO: the candidate
``answer``) also occurs, as a run of words, in a matched corpus document within ``WINDOW_WORDS``
words of where one of the query's matched runs (the ``MAX_RUNS`` longest) occurs there: the model
may have seen the answer next to the question. The corpus documents are read back from the index's inputs
(``docs.parquet``: input file and row); when they are unavailable the table is skipped with the
reason. A group is input+label when any member is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data.prep.taskspec import TaskSpec

WINDOW_WORDS = 32
MAX_RUNS = 8  # matched runs of a query looked up per corpus doc
CATEGORIES = ("clean", "input", "input+label")


def label_fields(spec: TaskSpec) -> list[str]:
    """The doc fields holding the label text: generation targets' fields; for multiple choice, the
    prompt's fields that the decontamination query leaves out (MC-TACO: the candidate answer)."""
    if spec.output_type == "generate_until":
        return spec.template_fields("doc_to_target")
    query = "doc_to_decontamination_query" if spec.doc_to_decontamination_query else "doc_to_text"
    in_query = set(spec.template_fields(query))
    return [f for f in spec.template_fields("doc_to_text") if f not in in_query]


def find_index(manifest: dict[str, Any] | None, prep_dir: Path) -> Path | None:
    """The index prep_manifest.json names, looked for as given, beside PREP_DIR and inside it."""
    index = (manifest or {}).get("index")
    where = index.get("path", index.get("dir")) if isinstance(index, dict) else index
    if not where:
        return None
    for cand in (Path(where), prep_dir / where, prep_dir.parent / where):
        if (cand / "docs.parquet").is_file():
            return cand
    return None


def corpus_texts(index_dir: Path, refs: set[str]) -> dict[str, str]:
    """The text of the corpus docs named by ``refs``: from the index's text store when it has one,
    else read back from its inputs (``docs.parquet``: input file and row)."""
    from tcqa_data.decontam.readers.documents import iter_documents
    from tcqa_data.decontam.readers.inputs import resolve_inputs
    from tcqa_data.decontam.textstore.store import TextStore
    from tcqa_data.errors import TcqaError
    from tcqa_data.io_utils import read_json
    from tcqa_data.prep.doc_refs import portable_ref

    # PREP_DIR records refs as portable_ref writes them (file name, not the path given to index-corpus)
    to_prep_ref = portable_ref(index_dir)
    docs = pq.read_table(index_dir / "docs.parquet", columns=["doc_ordinal", "doc_ref", "input", "row"]
                         ).to_pylist()
    wanted = [d for d in docs if to_prep_ref(d["doc_ref"]) in refs]
    try:
        store = TextStore.open(index_dir)
        texts = store.texts([int(d["doc_ordinal"]) for d in wanted])
        return {to_prep_ref(d["doc_ref"]): t for d, t in zip(wanted, texts, strict=True)}
    except TcqaError:
        pass  # no (or a stale) text store: scan the inputs
    manifest = read_json(index_dir / "manifest.json")
    want: dict[str, set[int]] = {}
    for d in wanted:
        want.setdefault(d["input"], set()).add(int(d["row"]))
    out: dict[str, str] = {}
    for inp_path, rows in sorted(want.items()):
        path = next((c for c in (Path(inp_path), index_dir / inp_path, index_dir.parent / inp_path)
                     if c.is_file()), None)
        if path is None:
            raise FileNotFoundError(inp_path)
        for inp in resolve_inputs([str(path)]):
            for doc in iter_documents(inp, text_field=manifest.get("text_field", "text"),
                                      id_field=manifest.get("id_field"), on_error="skip"):
                ref = to_prep_ref(doc.ref)
                if doc.row in rows and ref in refs:
                    out[ref] = doc.text
    return out


def _locate(hay: list[str], needle: list[str], lo: int = 0, hi: int | None = None) -> int:
    """First position of ``needle`` as a contiguous run inside ``hay[lo:hi]``, else -1."""
    m = len(needle)
    hi = len(hay) if hi is None else min(len(hay), hi)
    if m == 0:
        return -1
    for i in range(max(0, lo), hi - m + 1):
        if hay[i] == needle[0] and hay[i:i + m] == needle:
            return i
    return -1


def doc_label_status(spec: TaskSpec, docs: list[dict[str, Any]], cont: pa.Table, scheme: str,
                     texts: dict[str, str]) -> list[str]:
    """Per doc: 'clean' (not flagged), 'input' or 'input+label'."""
    from tcqa_data.decontam.core.normalize import token_char_spans, tokenize

    fields = label_fields(spec)
    dirty = cont.column("doc_dirty").to_pylist()
    queries = cont.column("query").to_pylist()
    spans = cont.column("match_spans").to_pylist()
    refs = cont.column("matched_doc_refs").to_pylist()
    mh_ref = cont.column("minhash_doc_ref").to_pylist() if "minhash_doc_ref" in cont.column_names else None
    corpus_tokens: dict[str, list[str]] = {}
    where: dict[tuple, int] = {}
    out = []
    for i, doc in enumerate(docs):
        if not dirty[i]:
            out.append("clean")
            continue
        label = [t for f in fields for t in tokenize(str(doc.get(f, "")), scheme)]
        q_tokens = tokenize(queries[i], scheme)
        starts = [a for a, _ in token_char_spans(queries[i], scheme)]
        # matched runs of query words, longest first (a passage may match in several pieces, and
        # the label may sit next to any of them)
        runs = [(int(np.searchsorted(starts, a)), int(np.searchsorted(starts, b))) for a, b in spans[i] or []]
        runs = sorted(runs, key=lambda r: (r[0] - r[1], r[0]))[:MAX_RUNS]
        cands = list(refs[i] or []) + ([mh_ref[i]] if mh_ref and mh_ref[i] else [])
        found = False
        for ref in cands:
            if ref not in texts:
                continue
            if ref not in corpus_tokens:
                corpus_tokens[ref] = tokenize(texts[ref], scheme)
            hay = corpus_tokens[ref]
            if not runs:  # MinHash evidence only: the whole doc is the match
                found = _locate(hay, label) >= 0
            for run in runs:
                needle = q_tokens[run[0]:run[1]]
                key = (ref, tuple(needle))
                if key not in where:  # MC-TACO candidates share their question's query
                    where[key] = _locate(hay, needle)
                pos = where[key]
                found = pos >= 0 and _locate(hay, label, pos - WINDOW_WORDS,
                                              pos + len(needle) + WINDOW_WORDS) >= 0
                if found:
                    break
            if found:
                break
        out.append("input+label" if found else "input")
    return out


def group_categories(status: list[str], units: np.ndarray, n_units: int) -> np.ndarray:
    """Per unit: 0 clean, 1 input, 2 input+label (the group's most contaminated member)."""
    level = np.asarray([CATEGORIES.index(s) for s in status], dtype=np.int64)
    out = np.zeros(n_units, dtype=np.int64)
    np.maximum.at(out, units, level)
    return out
