"""Benchmark the semantic tier (``--rule 'any-ngram|semantic'``): recall / false positives, and cost.

``recall``: the three MMLU subjects of ../shared/data/paraphrase, a quarter of each subject's items
rephrased and a quarter translated into Chinese, injected into the wiki sample (own documents,
spliced into long articles, re-wrapped; tests/semantic_devset.py), the other half not injected
(hard negatives: same subject, not in the corpus). One stream ``decontaminate`` of the three
subjects with every evidence column, then per subject and injection kind the share flagged by
- ``semantic`` at the shipped threshold (and ``any-ngram|semantic``),
- the lexical rules (``any-ngram``, ``any-ngram|aligned>=0.5``, ``aligned>=0.3``),
- LLM Decontaminator's embedding-only method (Yang et al. 2023): every corpus doc embedded whole
  (the model reads its first 256 word pieces), each item's top-1 neighbour, flagged at a cosine
  threshold (their GPT-4 judge left out),
the threshold calibrated leave-one-subject-out (tuned on two subjects' negatives at <= 1% false
positives, reported on the third: out-of-sample figures), the threshold sweep, and a precision /
recall curve (PNG and CSV in ``--work``). ``--train-verbatim``: a quarter of each subject's items
also sit in the corpus verbatim as "training items" (not checked): same-domain negatives, as a
benchmark's train split beside its rephrased test items. ``--subjects svamp`` (alone or with the
MMLU subjects) adds the math word-problem set (tests/data/svamp_paraphrase: half the test items
rephrased and injected, own documents and spliced; with ``--train-verbatim`` its 200 train items in
the corpus verbatim); ``--scores PATH`` writes every checked item's evidence as JSON and prints the
highest-scoring negatives and lowest-scoring positives with their best windows.

``cost``: the shared wiki sample concatenated ``--copies`` times (10: 207 MB), stream
``decontaminate`` of MC-TACO test + based-squad validation + MMLU sociology (the third task) with
``any-ngram`` and with ``any-ngram|semantic``, each a whole process (CPU seconds of the child:
user + system), side by side; then a projection to 1 TB on 256 cores, with and without a GPU.

    nice .venv/bin/python scripts/bench_semantic.py recall [--work /tmp/bench_semantic]
    nice .venv/bin/python scripts/bench_semantic.py cost [--copies 10]
    nice .venv/bin/python scripts/bench_semantic.py gate [--mixed]

``gate``: the candidate gate alone (no model): on the same injected corpus as ``recall``, the
share of injected items whose true window (the span of the corpus that holds the injected text)
is among the item's kept candidates, and how many windows passed; ``--mixed`` adds the cost
benchmark's MC-TACO and based-squad items to the table (the gate's per-item cut sees them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))

from semantic_devset import (  # noqa: E402
    KINDS,
    SUBJECTS,
    SVAMP,
    SVAMP_FOLDER,
    load_items,
    mmlu_yaml,
    svamp_yaml,
    task_name,
    write_corpus,
)

LEXICAL = ("any-ngram", "any-ngram|aligned>=0.5", "aligned>=0.3")


def mmlu_task(work: Path, subject: str, skip: frozenset[int] = frozenset()) -> tuple[str, str]:
    """A task YAML for one MMLU subject and its ``--data-files`` entry (``skip``: row numbers left
    out of the checked benchmark: the verbatim "training items")."""
    task = work / f"mmlu_{subject}.yaml"
    task.write_text(mmlu_yaml(subject), encoding="utf-8")
    src = DATA / "paraphrase" / f"mmlu_{subject}_test.jsonl"
    if skip:
        rows = [r for r in src.read_text(encoding="utf-8").split("\n") if r.strip()]
        src = work / f"mmlu_{subject}_checked.jsonl"
        src.write_text("".join(r + "\n" for i, r in enumerate(rows) if i not in skip), encoding="utf-8")
    return str(task), f"mmlu_{subject}:test={src}"


def devset_task(work: Path, subject: str, skip: frozenset[int] = frozenset()) -> tuple[str, str]:
    """``mmlu_task`` for an MMLU subject; for ``svamp`` its gsm8k-style YAML and test file (its
    train items are not test rows: nothing to leave out)."""
    if subject != SVAMP:
        return mmlu_task(work, subject, skip)
    task = work / "svamp.yaml"
    task.write_text(svamp_yaml(), encoding="utf-8")
    return str(task), f"svamp:test={SVAMP_FOLDER / 'svamp_test.jsonl'}"


def calibrate(negatives: np.ndarray, max_fp: float = 0.01) -> float:
    """The lowest threshold (0.50..0.99, step 0.01) that flags at most ``max_fp`` of ``negatives``."""
    ok = [t for t in np.round(np.arange(0.5, 1.0, 0.01), 2) if (negatives >= t).mean() <= max_fp]
    return float(ok[0]) if ok else 1.0


def loso(score: np.ndarray, subj: np.ndarray, reph: np.ndarray, neg: np.ndarray, subjects: tuple[str, ...],
         max_fp: float = 0.01) -> list[tuple[str, float, float, float]]:
    """Leave one subject out: per held-out subject, the lowest threshold whose false-positive share
    on the other subjects' negatives is at most ``max_fp`` (the most recall there), and the recall /
    FP it gives on the held-out subject: (subject, threshold, recall, FP)."""
    out = []
    for held in subjects:
        tune = subj != held
        t = calibrate(score[tune & neg], max_fp)
        held_flags = score[~tune] >= t
        out.append((held, t, float(held_flags[reph[~tune]].mean()), float(held_flags[neg[~tune]].mean())))
    return out


def pr_curve(score: np.ndarray, positive: np.ndarray, negative: np.ndarray, shipped: float, path: Path,
             title: str) -> None:
    """Precision / recall of ``score >= T`` over thresholds (rephrased items against the checked
    negatives), as a PNG and the points as CSV beside it; the shipped threshold marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.round(np.arange(0.3, 1.0, 0.01), 2)
    rows = []
    for t in grid:
        tp = int((score[positive] >= t).sum())
        fp = int((score[negative] >= t).sum())
        rows.append((float(t), tp / max(1, positive.sum()), tp / (tp + fp) if tp + fp else 1.0,
                     fp / max(1, negative.sum())))
    path.with_suffix(".csv").write_text("threshold,recall,precision,fp_share\n" + "".join(
        f"{t:.2f},{r:.4f},{p:.4f},{f:.4f}\n" for t, r, p, f in rows), encoding="utf-8")
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot([r for _, r, _, _ in rows], [p for _, _, p, _ in rows], marker=".", lw=1)
    at = min(rows, key=lambda x: abs(x[0] - shipped))
    ax.plot([at[1]], [at[2]], "o", color="red", label=f"shipped semantic>={shipped}")
    ax.set(xlabel="recall (rephrased items)", ylabel="precision (vs same-subject negatives)", title=title,
           xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def recall(args: argparse.Namespace) -> None:
    import pyarrow.parquet as pq

    from tcqa_data import decontaminate
    from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC, Rule
    from tcqa_data.decontam.semantic.prefilter import SAFE_FROM

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    subjects = tuple(args.subjects.split(","))
    items, texts = load_items(DATA / "paraphrase", subjects, train_verbatim=args.train_verbatim)
    corpus = write_corpus(DATA / "corpus" / "wiki_sample.jsonl", items, texts, work / "corpus.jsonl")
    train = {s: frozenset(it.index for it in items if it.subject == s and it.injected == "train")
             for s in subjects}
    items = [it for it in items if it.injected != "train"]  # the checked benchmark
    tasks, files = zip(*(devset_task(work, s, train[s]) for s in subjects), strict=True)
    # the injections as --labels: the reports measure the rule against them, and every item gets
    # its semantic score (a run without labels leaves out the items the rule's other terms decide)
    labels = work / "labels.csv"
    rows = ["task,doc_id,contaminated"]
    for s in subjects:
        checked = [it for it in items if it.subject == s]
        rows += [f"{task_name(s)},{k},{int(it.injected is not None)}" for k, it in enumerate(checked)]
    labels.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = work / "prep"
    t0 = time.process_time()
    if not (args.reuse and (out / "prep_manifest.json").is_file()):
        decontaminate(
            None,
            out=out,
            tasks=list(tasks),
            corpus=[str(corpus)],
            quiet=True,
            data_files=list(files),
            labels=str(labels),
            # semantic>=0.0 scores every item with the transformer alone; with --prefilter the
            # lowest threshold the prefilter keeps exact (scores below it may be stage 1's)
            rule=f"any-ngram|aligned>=0.3|semantic>={SAFE_FROM if args.prefilter else 0.0}",
            embedding_model=args.embedding_model,
        )
    cpu = time.process_time() - t0
    manifest = json.loads((out / "prep_manifest.json").read_text())
    if args.prefilter:
        print(f"with the prefilter: scores below {SAFE_FROM} may be the static model's (semantic_model); the "
              "rows and sweep at or above it compare with a run without --prefilter")
    cols: dict[str, list] = defaultdict(list)
    for s in subjects:
        for r in pq.read_table(out / task_name(s) / "test" / "contamination.parquet").to_pylist():
            for k in ("ngram_hits", "testable", "aligned_share", "aligned_field_share", "semantic_score",
                      "semantic_cosine", "semantic_kept", "semantic_shared_words", "semantic_window",
                      "semantic_doc_ref", "query", "semantic_model", "semantic_source"):
                cols[k].append(r.get(k))
    by_model = {m: cols["semantic_model"].count(m) for m in dict.fromkeys(cols["semantic_model"]) if m}
    print(f"items scored by each model: {by_model}")
    cols["ngram_fraction"] = [0.0] * len(items)
    cols["longest_match"] = [0] * len(items)
    baseline = (np.full(len(items), np.nan) if args.no_baseline
                else llm_decontaminator_top1(corpus, [it.query for it in items], args.embedding_model))

    def flags(rule: str) -> np.ndarray:
        return Rule.parse(rule).evaluate(cols)[0]

    def floats(name: str) -> np.ndarray:
        return np.array([-1.0 if c is None else c for c in cols[name]])

    score, cos = floats("semantic_score"), floats("semantic_cosine")
    subj = np.array([it.subject for it in items])
    # negatives: checked items not injected and with no n-gram match (MMLU history items share
    # their source passage, algebra items their statements: a sibling's passage in the corpus is
    # real contamination, not a false positive of the semantic tier)
    neg = np.array([it.injected is None for it in items]) & ~flags("any-ngram")
    reph = np.array([it.injected == "rephrased" for it in items])
    print(
        f"corpus {corpus} ({corpus.stat().st_size / 1e6:.1f} MB"
        f"{', same-subject training items verbatim' if args.train_verbatim else ''}), one stream pass + "
        f"scoring: {cpu:.0f} CPU-s; candidates: {manifest['semantic']['candidates']}"
    )
    if len(subjects) > 1:
        print("\n## leave one subject out (threshold: FP <= 1% on the other subjects' negatives "
              "without an n-gram match)")
    else:
        print("\n## threshold: the lowest with FP <= 1% on the negatives without an n-gram match")
    for name, values in (("semantic_score", score), ("best cosine alone", cos),
                         ("LLM-Decontaminator top-1", np.nan_to_num(baseline, nan=-1.0))):
        for held, t, r, f in (loso(values, subj, reph, neg, subjects) if len(subjects) > 1 else ()):
            print(f"{name}: held-out {held}: threshold {t:.2f} -> rephrased recall {r:.3f}, FP {f:.3f}")
        t = calibrate(values[neg])
        print(f"{name}: tuned on every subject: threshold {t:.2f} -> rephrased recall "
              f"{(values[reph] >= t).mean():.3f}, FP {(values[neg] >= t).mean():.3f}")
    print("\n## threshold sweep (rephrased recall / FP on same-subject negatives)")
    for t in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        at = score >= t
        print(f"T={t:.2f}: " + "   ".join(
            f"{s} {at[(subj == s) & reph].mean():.2f} / {at[(subj == s) & neg].mean():.3f}"
            for s in subjects))
    rules = {
        f"semantic (>= {DEFAULT_SEMANTIC})": flags("semantic"),
        "any-ngram|semantic": flags("any-ngram|semantic"),
        **{r: flags(r) for r in LEXICAL},
        f"LLM-Decontaminator top-1 (>= {DEFAULT_SEMANTIC})": baseline >= DEFAULT_SEMANTIC,
    }
    groups: dict[str, np.ndarray] = {}
    for s in subjects:
        for how in ("rephrased", "translated"):
            for kind in ("own", "spliced", "rewrapped"):
                groups[f"{s} {how} {kind}"] = np.array(
                    [it.subject == s and it.injected == how and it.kind == kind for it in items]
                )
        groups[f"{s} negatives (FP)"] = np.array([it.subject == s and it.injected is None for it in items])
        groups[f"{s} negatives, no n-gram match (FP)"] = (subj == s) & neg
    print("\n| subject / injected / kind | n | " + " | ".join(rules) + " |")
    print("|---|---|" + "---|" * len(rules))
    for name, g in groups.items():
        if not g.any():  # e.g. no translations or re-wrapped items in the svamp set
            continue
        shares = " | ".join(f"{f[g].mean():.2f}" for f in rules.values())
        print(f"| {name} | {int(g.sum())} | {shares} |")
    transl = np.array([it.injected == "translated" for it in items])
    foreign = np.array([s == "foreign-script" for s in cols["semantic_source"]])
    for s in subjects:
        g = subj == s
        chosen = rules["any-ngram|semantic"]
        by_foreign = chosen & foreign
        print(
            f"{s}: rephrased recall any-ngram|semantic {chosen[g & reph].mean():.3f}, "
            f"FP {chosen[g & neg].mean():.3f}"
            + (f"; translated recall {chosen[g & transl].mean():.3f} ({int(by_foreign[g & transl].sum())} by "
               f"a span in another script); negatives flagged by one {int(by_foreign[g & neg].sum())}"
               if (g & transl).any() else "")
        )
    print_ceiling(items, texts, rules["any-ngram|semantic"], subjects, args.embedding_model)
    if args.scores:
        write_scores(Path(args.scores), items, cols, neg, texts, args)
    curve = work / "semantic_pr_curve.png"
    pr_curve(score, reph, neg, DEFAULT_SEMANTIC, curve, "semantic_score, rephrased vs negatives")
    print(f"\nprecision/recall curve: {curve} (points: {curve.with_suffix('.csv')})")


def ceiling_scores(queries: list[str], injected: list[str], model_name: str | None) -> np.ndarray:
    """Each item's ``semantic_score`` against its injected text itself, as if the candidate pass
    had found that text's exact span: what the score can give the item at best (its views, the
    text's sub-spans, the kept share of its particulars), with the transformer alone."""
    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.semantic.matches import verify
    from tcqa_data.decontam.semantic.model import load_embedding_model
    from tcqa_data.decontam.semantic.rarewords import RareWordTable
    from tcqa_data.decontam.semantic.windows import Candidates

    spans = [" ".join(tokenize(t, "janitor")) for t in injected]
    n = len(queries)
    cols = {"query": np.arange(n, dtype=np.int64), "doc": np.arange(n, dtype=np.int64),
            "window": np.zeros(n, np.int64), "weight": np.zeros(n, np.int64), "shared": np.zeros(n, np.int64),
            "start": np.zeros(n, np.int64), "end": np.array([len(s.split()) for s in spans], np.int64)}
    rare = RareWordTable.build(queries, "janitor", 0)
    found = verify(queries, rare, Candidates(cols, spans), load_embedding_model(model_name), "janitor")
    return np.nan_to_num(found.score, nan=-1.0)


def print_ceiling(items: list, texts: dict, flagged: np.ndarray, subjects: tuple[str, ...],
                  model_name: str | None) -> None:
    """Per subject, the rephrasings whose ceiling (``ceiling_scores``) reaches the shipped threshold,
    and the share of those the run flagged: what the rephrasings' own text allows, against what
    the candidate pass and the scoring of corpus windows found."""
    from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC

    reph = [k for k, it in enumerate(items) if it.injected == "rephrased"]
    top = ceiling_scores([items[k].query for k in reph],
                         [texts[(items[k].subject, items[k].index)] for k in reph], model_name)
    print(f"\n## ceiling: each rephrasing scored against its item directly (>= {DEFAULT_SEMANTIC} reachable)")
    for s in subjects:
        mine = np.array([items[k].subject == s for k in reph])
        if not mine.any():
            continue
        reach = mine & (top >= DEFAULT_SEMANTIC)
        hit = flagged[np.array(reph)][reach]
        print(f"{s}: rephrasings the score can flag {int(reach.sum())}/{int(mine.sum())} "
              f"({reach.sum() / mine.sum():.2f}; median ceiling {np.median(top[mine]):.2f}); of those the "
              f"run flagged {int(hit.sum())} ({hit.mean() if len(hit) else float('nan'):.2f})")


def write_scores(path: Path, items: list, cols: dict, neg: np.ndarray, texts: dict,
                 args: argparse.Namespace) -> None:
    """Every checked item's evidence (score, cosine, kept rare-word share, shared words, best window)
    with whether and how it was injected, as JSON at ``path``; then the 10 highest-scoring negatives
    and the 10 lowest-scoring rephrased items, each with its text and best window."""
    rows = []
    for k, it in enumerate(items):
        rows.append({
            "subject": it.subject, "index": it.index, "injected": it.injected, "kind": it.kind,
            "negative_checked": bool(neg[k]), "ngram_hits": cols["ngram_hits"][k],
            "semantic_score": cols["semantic_score"][k], "semantic_cosine": cols["semantic_cosine"][k],
            "semantic_kept": cols["semantic_kept"][k], "shared_words": cols["semantic_shared_words"][k],
            "semantic_source": cols["semantic_source"][k],
            "query": it.query, "injected_text": texts.get((it.subject, it.index)),
            "best_window": cols["semantic_window"][k], "best_window_doc": cols["semantic_doc_ref"][k],
        })
    meta = {"subjects": args.subjects, "train_verbatim": args.train_verbatim,
            "embedding_model": args.embedding_model}
    path.write_text(json.dumps({"run": meta, "items": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"\nper-item evidence: {path}")

    def key(r: dict) -> float:
        return -1.0 if r["semantic_score"] is None else r["semantic_score"]

    def show(title: str, chosen: list[dict]) -> None:
        print(f"\n## {title}")
        for r in chosen:
            print(f"- {r['subject']} #{r['index']} score {key(r):.3f} cosine {r['semantic_cosine']} kept "
                  f"{r['semantic_kept']} kind {r['kind']} shared {r['shared_words']}\n  item:   "
                  f"{r['query']!r}\n  window: {r['best_window']!r}")

    show("10 highest-scoring negatives (not injected, no n-gram match)",
         sorted((r for r in rows if r["negative_checked"]), key=key, reverse=True)[:10])
    show("10 lowest-scoring rephrased items",
         sorted((r for r in rows if r["injected"] == "rephrased"), key=key)[:10])


def llm_decontaminator_top1(corpus: Path, queries: list[str], model_name: str | None) -> np.ndarray:
    """LLM Decontaminator's embedding step: every corpus doc embedded whole, each item's top-1."""
    from tcqa_data.decontam.semantic.model import load_embedding_model

    model = load_embedding_model(model_name)
    docs = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").split("\n") if line]
    emb_docs = model.encode(docs)
    emb_items = model.encode(queries)
    return (emb_items @ emb_docs.T).max(axis=1).astype(np.float64)


def gate(args: argparse.Namespace) -> None:
    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.semantic.rarewords import first_task
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
    from tcqa_data.prep.task_jobs import parse_data_files, task_jobs

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    subjects = tuple(args.subjects.split(","))
    items, texts = load_items(DATA / "paraphrase", subjects)
    wiki = DATA / "corpus" / "wiki_sample.jsonl"
    corpus = write_corpus(wiki, items, texts, work / "corpus.jsonl")
    per_task = [[it.query for it in items]]
    if args.mixed:
        data = [f"mc_taco:test={DATA / 'mc_taco' / 'test_9442.tsv'}",
                f"squad_completion:validation={DATA / 'based_squad' / 'validation.jsonl'}"]
        tasks = ["mc_taco", "squad_completion"]
        per_task += [[q for _, qs, _ in job.parts for q in qs]
                     for job in task_jobs(tasks, parse_data_files(data, tasks), None)]
    task = first_task(per_task)  # each query's task, as decontaminate counts a word's holders
    queries, groups = list(task), list(task.values())
    number = {q: i for i, q in enumerate(queries)}
    t0 = time.process_time()
    table = BenchmarkTable(queries, StreamConfig(ngram_sizes=(13,), semantic=True), groups=groups)
    t_table = time.process_time() - t0
    t0 = time.process_time()
    sem = scan_corpus(table, resolve_inputs([str(corpus)])).semantic
    t_scan = time.process_time() - t0
    assert sem is not None
    # where each injected text is: (doc ordinal, first word, end word) in normalized words
    docs = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").split("\n") if line]
    extra = {json.loads(line)["id"]: k for k, line in enumerate(
        corpus.read_text(encoding="utf-8").split("\n")) if line.startswith('{"id": "inj-')}
    long_ones = [k for k, line in enumerate(wiki.read_text(encoding="utf-8").split("\n"))
                 if line.strip() and len(json.loads(line)["text"].split()) > 3000]
    where: dict[int, tuple[int, int, int]] = {}
    for j, it in enumerate(x for x in items if x.injected):
        if it.kind == "spliced":
            doc = long_ones[j % len(long_ones)]
        else:
            doc = extra[f"inj-{it.subject}-{it.index}"]
        words = tokenize(docs[doc], "janitor")
        mine = tokenize(texts[(it.subject, it.index)], "janitor")
        if it.kind == "rewrapped":
            mine = tokenize("\n".join("> " + ln for ln in textwrap.wrap(texts[(it.subject, it.index)], 40)),
                            "janitor")
        at = " ".join(words).find(" ".join(mine))
        if at < 0 or not mine:
            continue
        first = " ".join(words)[:at].count(" ")
        where[number[it.query]] = (doc, first, first + len(mine))
    found: dict[int, bool] = {}
    for q, d, a, b in zip(*(sem.cols[c].tolist() for c in ("query", "doc", "start", "end")), strict=True):
        if q in where:
            doc, lo, hi = where[q]
            found[q] = found.get(q, False) or (d == doc and a < hi and b > lo)
    print(f"corpus {corpus.stat().st_size / 1e6:.1f} MB, {len(queries)} items in the table "
          f"({'mixed with MC-TACO and based-squad' if args.mixed else 'the dev set only'}); "
          f"table {t_table:.1f} CPU-s, "
          f"pass with candidate windows {t_scan:.1f} CPU-s; windows {sem.windows}, passed {sem.passed} "
          f"({sem.passed / max(sem.windows, 1):.2%}), pairs kept {len(sem)}, items with a candidate "
          f"{len(set(sem.cols['query'].tolist()))}")
    for how in ("rephrased", "translated"):
        for kind in (*KINDS, None):
            g = [number[it.query] for it in items if it.injected == how and (kind is None or it.kind == kind)
                 and number[it.query] in where]
            if not g:  # e.g. no translations or re-wrapped items in the svamp set
                continue
            hit = sum(found.get(q, False) for q in g)
            print(f"candidate recall, {how} {kind or 'all'}: {hit}/{len(g)} = {hit / max(len(g), 1):.3f}")


def _child_cpu(cmd: list[str], timeout: float | None) -> tuple[float, float, bool]:
    """CPU seconds (user + system) and wall seconds of ``cmd`` as a whole process, and whether it finished."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, check=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})
        done = True
    except subprocess.TimeoutExpired:
        done = False
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            time.perf_counter() - t0, done)


def cost(args: argparse.Namespace) -> None:
    """``any-ngram`` and ``any-ngram|semantic``, each a whole ``decontaminate`` process, side by
    side; then what the semantic one spends, in parts (the pass with candidate windows, in-process,
    and the verification: CPU per text embedded, on a sample of the real texts, times their number)."""
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.semantic.matches import DEFAULT_THRESHOLD, _candidate_pairs, verify
    from tcqa_data.decontam.semantic.model import load_embedding_model
    from tcqa_data.decontam.semantic.prefilter import model_for_rule
    from tcqa_data.decontam.semantic.rarewords import first_task
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
    from tcqa_data.prep.task_jobs import parse_data_files, task_jobs

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"wiki_x{args.copies}.jsonl"
    if not corpus.exists():
        src = (DATA / "corpus" / "wiki_sample.jsonl").read_bytes()
        with corpus.open("wb") as fh:
            for _ in range(args.copies):
                fh.write(src)
    task, files = mmlu_task(work, "sociology")
    data = [
        f"mc_taco:test={DATA / 'mc_taco' / 'test_9442.tsv'}",
        f"squad_completion:validation={DATA / 'based_squad' / 'validation.jsonl'}",
        files,
    ]
    tasks = ["mc_taco", "squad_completion", task]
    cmd = [sys.executable, "-m", "tcqa_data", "decontaminate", "--corpus", str(corpus), "--quiet",
           "--tasks", ",".join(tasks), *[x for d in data for x in ("--data-files", d)]]
    runs: dict[str, tuple[float, float, bool]] = {}
    # the rules alternate, --repeat times, and each keeps its least CPU: a shared machine's noise
    # (another process, a cold cache) only adds time
    for _ in range(args.repeat):
        for rule in ("any-ngram",) if args.parts_only else ("any-ngram", "any-ngram|semantic"):
            out = work / f"out_{rule.replace('|', '_')}"
            subprocess.run(["rm", "-rf", str(out)], check=True)
            run = _child_cpu([*cmd, "--rule", rule, "--out", str(out)],
                             args.timeout if rule != "any-ngram" else None)
            cpu, wall, done = run
            killed = "" if done else f", did NOT finish (killed at --timeout {args.timeout} s)"
            print(f"corpus {corpus.stat().st_size / 1e6:.0f} MB; {rule}, whole process: {cpu:.1f} CPU-s "
                  f"({wall:.0f} s wall){killed}", flush=True)
            if rule not in runs or (done and cpu < runs[rule][0]):
                runs[rule] = run
    base = runs["any-ngram"][0]
    if not args.parts_only:
        sem_cpu, _, sem_done = runs["any-ngram|semantic"]
        print(f"ratio, whole process (least of {args.repeat} each): {sem_cpu:.1f} / {base:.1f} CPU-s = "
              f"{sem_cpu / base:.1f}x{'' if sem_done else ' (at least: not finished)'} (target <= 4x)",
              flush=True)
    if args.no_parts:
        return
    # the same queries as decontaminate's table
    jobs = task_jobs(tasks, parse_data_files(data, tasks), None)
    queries = sorted({q for job in jobs for _, qs, _ in job.parts for q in qs})
    task = first_task([[q for _, qs, _ in job.parts for q in qs] for job in jobs])
    groups = [task[q] for q in queries]
    inputs = resolve_inputs([str(corpus)])
    # each table's build (fixed: the benchmark's) apart from its pass (grows with the corpus)
    t0 = time.process_time()
    plain_table = BenchmarkTable(queries, StreamConfig(ngram_sizes=(13,)))
    t_plain_table = time.process_time() - t0
    t0 = time.process_time()
    plain = scan_corpus(plain_table, inputs)
    t_plain_scan = time.process_time() - t0
    t_plain = t_plain_table + t_plain_scan
    t0 = time.process_time()
    table = BenchmarkTable(queries, StreamConfig(ngram_sizes=(13,), semantic=True), groups=groups)
    t_table = time.process_time() - t0
    t0 = time.process_time()
    sem = scan_corpus(table, inputs).semantic
    t_sem_scan = time.process_time() - t0
    t_sem = t_sem_scan + t_table
    assert sem is not None and plain.num_docs
    pairs = _candidate_pairs(queries, sem, "janitor")
    texts = list(dict.fromkeys(pairs["sub_text"]))  # every candidate's sub-spans (the span itself among them)
    views = list(dict.fromkeys(pairs["view_text"]))
    print(
        f"parts: {len(queries)} queries; pass alone {t_plain:.1f} CPU-s, "
        f"pass with candidate windows {t_sem:.1f} CPU-s (its table {t_table:.1f}); "
        f"windows {sem.windows}, passed {sem.passed} ({sem.passed / sem.windows:.2%}), "
        f"pairs kept {len(sem)}, items with a candidate {len(np.unique(sem.cols['query']))}, "
        f"distinct texts to embed without the prefilter: {len(texts)} sub-spans + {len(views)} item views",
        flush=True,
    )
    t0 = time.process_time()
    model = load_embedding_model(args.embedding_model)
    t_load = time.process_time() - t0
    rng = np.random.default_rng(0)
    pool = texts + views
    sample = [pool[i] for i in rng.choice(len(pool), min(args.sample, len(pool)), replace=False)]
    t0 = time.process_time()
    model.encode(sample)
    per_text = (time.process_time() - t0) / len(sample)
    full = per_text * len(pool)
    print(
        f"model load {t_load:.1f} CPU-s; {per_text * 1000:.1f} CPU-ms per text embedded (a sample of "
        f"{len(sample)} of the sub-spans and views); verification without the prefilter ~{full:.0f} CPU-s "
        f"(estimated: too long to run here)", flush=True)
    # with the prefilter and the rule's threshold as its floor, as decontaminate runs
    # `any-ngram|semantic` (which also leaves out the items n-grams flag: not here)
    model = model_for_rule(args.embedding_model, [DEFAULT_THRESHOLD], judge=False)
    t0 = time.process_time()
    found = verify(queries, table.rare, sem, model, "janitor")
    staged = time.process_time() - t0
    by = {name: sum(m == name for m in found.model) for name in dict.fromkeys(m for m in found.model if m)}
    print(f"verification with the prefilter (measured): {staged:.1f} CPU-s; pairs past the bar "
          f"{found.stats.get('pairs_verified', '-')}, texts the transformer embedded "
          f"{found.stats['texts_embedded']} of {len(pool)}; items scored by {by}", flush=True)
    verify_cpu = staged if model.prefilter is not None else full
    total = base + (t_sem - t_plain) + t_load + verify_cpu
    print(f"any-ngram|semantic from its parts ~ {total:.0f} CPU-s = any-ngram {base:.1f} + candidate pass "
          f"{t_sem - t_plain:.1f} + model load {t_load:.1f} + verification {verify_cpu:.0f}: "
          f"{total / base:.1f}x "
          f"(target <= 4x); without the prefilter ~{(total - verify_cpu + full) / base:.0f}x; without the "
          f"verification {(base + t_sem - t_plain + t_load) / base:.1f}x")
    # at 1 TB the passes grow with the corpus and nothing else does: any-ngram's fixed part is its
    # whole process less its pass here; the semantic run adds its pass's extra per byte, its
    # table's extra build and the model load once, and the verification (bounded by the benchmark)
    tb = 1e12 / corpus.stat().st_size
    any_tb = (base - t_plain_scan) + t_plain_scan * tb
    lexical = (t_sem_scan - t_plain_scan) * tb
    fixed = (t_table - t_plain_table) + t_load
    items = len(np.unique(sem.cols["query"]))
    # at 1 TB every item may have a candidate: as many texts a item as here (views and sub-spans),
    # the transformer's share of them as measured with the prefilter, and stage 1 as measured
    most = table.rare.num_queries * len(pool) / max(items, 1)
    share = found.stats["texts_embedded"] / max(len(pool), 1) if model.prefilter is not None else 1.0
    stage1_tb = (staged - per_text * found.stats["texts_embedded"]) * table.rare.num_queries / max(items, 1)
    verify_tb = per_text * most * share + (max(stage1_tb, 0.0) if model.prefilter is not None else 0.0)
    print(
        f"passes per {corpus.stat().st_size / 1e6:.0f} MB: n-grams {t_plain_scan:.1f} CPU-s, n-grams with "
        f"candidate windows {t_sem_scan:.1f} CPU-s ({t_sem_scan / max(t_plain_scan, 1e-9):.1f}x)\n"
        f"projection to 1 TB ({tb:.0f}x this corpus), 256 cores: any-ngram {any_tb / 3600:.1f} CPU-h "
        f"({any_tb / 256 / 60:.1f} min; its pass {t_plain_scan * tb / 3600:.1f} CPU-h); the candidate pass "
        f"adds {lexical / 3600:.1f} CPU-h ({lexical / 256 / 60:.1f} min); the verification is bounded by "
        f"the benchmark, not the corpus: at most {most:.0f} texts ({table.rare.num_queries} items, each its "
        f"views and sub-spans), {share:.1%} of them past the prefilter: {verify_tb:.0f} CPU-s, run once in "
        f"the driver process (~{verify_tb / 16 / 60:.1f} min on a 16-core driver), or on one GPU at ~5,000 "
        f"texts/s (MiniLM-L6; not measured here) {most * share / 5000:.0f} s. any-ngram|semantic / "
        f"any-ngram at 1 TB: CPU only {(any_tb + lexical + fixed + verify_tb) / any_tb:.1f}x, with a GPU "
        f"{(any_tb + lexical + fixed) / any_tb:.1f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("recall", "cost", "gate"))
    ap.add_argument("--work", default="/tmp/bench_semantic")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--embedding-model", default=None)
    ap.add_argument("--subjects", default=",".join(SUBJECTS),
                    help=f"recall, gate: MMLU subjects and/or {SVAMP!r} (math word problems)")
    ap.add_argument("--scores", default=None,
                    help="recall: write every checked item's evidence to this JSON file")
    ap.add_argument("--no-baseline", action="store_true", help="recall: skip LLM Decontaminator's top-1")
    ap.add_argument("--mixed", action="store_true", help="gate: MC-TACO and based-squad items too")
    ap.add_argument("--reuse", action="store_true",
                    help="recall: read the scores of the last run in --work (only the rules recomputed)")
    ap.add_argument("--train-verbatim", action="store_true",
                    help="recall: a quarter of each MMLU subject's items (svamp: its 200 train items) in "
                         "the corpus verbatim as training items, not checked (same-domain negatives)")
    ap.add_argument("--prefilter", action="store_true",
                    help="recall: rule semantic>=0.7, so the static prefilter screens for the transformer")
    ap.add_argument("--sample", type=int, default=256, help="cost: candidate texts embedded to time it")
    ap.add_argument("--timeout", type=float, default=None, help="cost: seconds the semantic run may take")
    ap.add_argument("--repeat", type=int, default=2,
                    help="cost: runs of each rule, alternating (each keeps its least CPU)")
    ap.add_argument("--no-parts", action="store_true", help="cost: the two whole processes only")
    ap.add_argument("--parts-only", action="store_true", help="cost: the semantic run in parts only")
    args = ap.parse_args()
    {"recall": recall, "cost": cost, "gate": gate}[args.what](args)


if __name__ == "__main__":
    main()
