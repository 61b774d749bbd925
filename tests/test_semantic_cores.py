"""Shared cores (``decontam/semantic/cores.py``) on the real benchmarks: the questions of one SQuAD
passage, and of one MC-TACO sentence, share a core; every item is exactly its residual plus its
core; and the compiled window kernel, which walks a core once for all its items, keeps exactly
the candidates of the numpy path, which expands every (rare-word hit, item) pair, on the wiki
sample."""

from __future__ import annotations

import json
from itertools import islice

import numpy as np
import pytest

from tcqa_data.decontam.semantic.cores import core_segments
from tcqa_data.decontam.semantic.rarewords import RareWordTable, first_task
from tcqa_data.prep.task_jobs import parse_data_files, task_jobs

pytest.importorskip("wordfreq")

SQUAD_ITEMS = 600
MC_TACO_ITEMS = 300
WIKI_DOCS = 1500


@pytest.fixture(scope="module")
def items(mc_taco_test, squad_validation) -> tuple[list[str], list[int]]:
    """The first decontamination queries of SQuAD validation and MC-TACO test, as decontaminate
    builds them, with each one's task."""
    tasks = ["squad_completion", "mc_taco"]
    data = parse_data_files(
        [f"squad_completion:validation={squad_validation}", f"mc_taco:test={mc_taco_test}"], tasks)
    per_task = []
    for job, keep in zip(task_jobs(tasks, data, None), (SQUAD_ITEMS, MC_TACO_ITEMS), strict=True):
        queries = dict.fromkeys(q for _, qs, _ in job.parts for q in qs)
        per_task.append(list(islice(queries, keep)))
    task = first_task(per_task)
    queries = sorted(task)
    return queries, [task[q] for q in queries]


def test_each_item_is_its_residual_plus_its_shared_core(items):
    queries, groups = items
    rare = RareWordTable.build(queries, "janitor", 0, groups)
    n = rare.num_queries
    need = np.ones(n, np.int64)
    seg = core_segments(rare, need, need)
    word_of_entry = np.repeat(np.arange(len(rare.weight)), np.diff(rare.post_start))
    held = {(int(q), int(w)) for q, w in zip(rare.post_query, word_of_entry, strict=True)}
    word_of_seg = np.repeat(np.arange(len(rare.weight)), np.diff(seg.seg_start))
    words_of: dict[int, set[int]] = {}
    for s, w in zip(seg.seg_post.tolist(), word_of_seg.tolist(), strict=True):
        assert w not in words_of.setdefault(s, set())  # a word once per segment
        words_of[s].add(w)
    rebuilt = set()
    for q in range(n):
        own, core = words_of.get(q, set()), words_of.get(int(seg.item_core[q]), set())
        assert not own & core, q  # disjoint: a shared word is counted once
        rebuilt |= {(q, w) for w in own | core}
    assert rebuilt == held
    # each core's items are the items naming it, and its need is the least of theirs
    for c in range(seg.num_cores):
        members = seg.core_items[seg.core_items_start[c]:seg.core_items_start[c + 1]]
        assert len(members) >= 2 and (seg.item_core[members] == n + c).all()
    # the questions of one passage share it: most SQuAD items, and many MC-TACO ones, have a core
    squad = np.array(groups) == 0
    assert (seg.item_core[squad] >= 0).mean() > 0.8
    assert (seg.item_core[~squad] >= 0).mean() > 0.3
    # a core is most of its items' rare weight (the work the kernel saves)
    core_entries = len(seg.seg_post) - sum(len(words_of.get(q, ())) for q in range(n))
    assert core_entries > 0 and len(seg.seg_post) < 0.5 * len(rare.post_query)


def test_compiled_kernel_over_cores_equals_the_numpy_path(items, wiki_sample, tmp_path, monkeypatch):
    from tcqa_data.decontam.core import kernel
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    if not kernel.enabled():
        pytest.skip("numba is not installed: only the numpy path runs")
    queries, groups = items
    corpus = tmp_path / "wiki.jsonl"
    with wiki_sample.open() as src:
        corpus.write_text("".join(islice(src, WIKI_DOCS)))
    table = BenchmarkTable(queries, StreamConfig(semantic=True), groups=groups)
    inputs = resolve_inputs([str(corpus)])
    compiled = scan_corpus(table, inputs).semantic
    monkeypatch.setenv(kernel.ENV, "numpy")
    plain = scan_corpus(table, inputs).semantic
    assert (compiled.windows, compiled.passed) == (plain.windows, plain.passed)
    for c in compiled.cols:
        assert (compiled.cols[c] == plain.cols[c]).all(), c
    assert compiled.texts == plain.texts
    # the kernel's core path ran: candidates of items with a core, SQuAD's among them
    from tcqa_data.decontam.semantic.windows import _segments

    with_core = _segments(table.rare).item_core[compiled.cols["query"]] >= 0
    assert with_core.sum() > 20, json.dumps({"candidates": len(compiled), "with_core": int(with_core.sum())})


def test_batches_merged_into_the_running_candidates_equal_one_pass(items, wiki_sample):
    """The same 300 docs five times, as five batches each merged into the candidates so far, keep
    what one pass over all 1,500 docs keeps, texts and counts; by the fifth every item with a
    candidate has four docs it ties with (a later doc loses a tie), so that batch adds nothing."""
    from tcqa_data.decontam.core.hashing import normalized_buffer
    from tcqa_data.decontam.semantic.windows import TOP_PER_QUERY, scan_windows

    queries, groups = items
    rare = RareWordTable.build(queries, "janitor", 0, groups)
    with wiki_sample.open() as src:
        texts = [json.loads(line)["text"] for line in islice(src, 300)]
    copies = TOP_PER_QUERY + 1
    one = scan_windows(rare, *normalized_buffer(texts * copies, "janitor"), 0)
    arr, doc_start = normalized_buffer(texts, "janitor")
    batched = before = None
    for k in range(copies):
        before = batched
        batched = scan_windows(rare, arr, doc_start, 0, doc_base=k * len(texts), into=batched)
    assert len(one) > 10
    for c in one.cols:
        assert (batched.cols[c] == one.cols[c]).all(), c
        assert (batched.cols[c] == before.cols[c]).all(), c
    assert batched.texts == one.texts
    assert (batched.windows, batched.passed) == (one.windows, one.passed) == \
        (copies * before.windows // (copies - 1), copies * before.passed // (copies - 1))


def test_english_zipf_equals_wordfreq_on_every_benchmark_word(items, wiki_sample):
    """The table's fast read of wordfreq equals ``wordfreq.zipf_frequency`` on every distinct word
    of the items and of 300 wiki articles, and on words its fast path does not take."""
    from wordfreq import zipf_frequency

    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.semantic.rarewords import english_zipf

    queries, _ = items
    with wiki_sample.open() as src:
        texts = queries + [json.loads(line)["text"] for line in islice(src, 300)]
    words = {w for t in texts for w in tokenize(t, "janitor")}
    words |= {"zzqxv", "1990", "3", "café", "naïve", "x", "qwertyuiopasdf", "the", "ʼs"}
    fast = [w for w in words if w.isascii() and w.isalpha() and w.islower()]
    assert len(fast) > 10_000
    assert [english_zipf(w) for w in sorted(words)] == [zipf_frequency(w, "en") for w in sorted(words)]
