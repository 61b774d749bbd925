"""The eval stage: score a model on the prepared full / clean / dirty splits in one pass.

``run_evaluation`` selects the groups, loads the model, scores every doc once and computes each task's
table (``eval.tables``), writing nothing; ``evaluate`` writes that pass (results.json, samples.jsonl,
report.md, report.html). ``tcqa_data.workflow.evaluate`` (``tcqa-data evaluate``) analyzes the pass too.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.deprecation import moved_to_top
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval import in_prompt
from tcqa_data.eval import metrics as M
from tcqa_data.eval.calibration import Calibration
from tcqa_data.eval.memorization import (
    DEFAULT_CONTEXT,
    HEADLINE_TEXT,
    KS,
    SCORE_NAMES,
    STANDALONE_SUFFIX,
    TokenStats,
    add_headline,
    doc_memorization,
)
from tcqa_data.eval.models import LoadedModel, load_model, model_name
from tcqa_data.eval.scoring import (
    Engine,
    LLRequest,
    encode_pairs,
    generate_until,
    loglikelihoods,
    tok_encode_batch,
)
from tcqa_data.eval.tables import TaskTable, empty_table, task_metric_names, task_table
from tcqa_data.outputs import (
    check_output_dir,
    claimed_output,
    output_target,
    safe_model_dirname,
    staged_output,
)
from tcqa_data.prep.prepared import (
    TaskData,
    available_tasks,
    load_task,
    read_manifest,
    require_prep_dir,
    take_groups,
)
from tcqa_data.prep.taskspec import TaskSpec
from tcqa_data.progress import note, progress_bar, progress_enabled, rate_text, stage
from tcqa_data.report_render import Block


# ---- which docs ------------------------------------------------------------------------------
def _group_order(data: TaskData) -> tuple[list[int], set[int]]:
    """Group ids in order of first appearance, and the dirty ones (a group with any dirty doc)."""
    order: list[int] = []
    seen: set[int] = set()
    dirty: set[int] = set()
    for d, c in zip(data.docs, data.clean, strict=True):
        g = int(d["group_id"])
        if g not in seen:
            seen.add(g)
            order.append(g)
        if not c:
            dirty.add(g)
    return order, dirty


def _sample(rng: np.random.Generator, groups: list[int], k: int) -> list[int]:
    if k >= len(groups):
        return list(groups)
    return [groups[i] for i in sorted(rng.choice(len(groups), size=k, replace=False).tolist())]


def select_groups(data: TaskData, *, clean_only: bool = False, limit_groups: int | None = None,
                  sample_groups: int | None = None, sample_seed: int = 0) -> tuple[TaskData, dict[str, Any]]:
    """The docs to evaluate and a record of how they were chosen (results.json's ``selection``).

    With ``clean_only`` only clean docs are candidates, so ``limit_groups`` N means the first N
    clean groups. ``sample_groups`` N takes every dirty group (at most half of N when there are
    more; then a seeded sample of them) and a seeded sample of clean groups for the rest, in the
    split's order: a small run that still has a dirty slice to compare.
    """
    if limit_groups is not None and sample_groups is not None:
        raise ConfigError("--limit-groups and --sample-groups choose the groups in two ways; give one")
    for opt, n in (("--limit-groups", limit_groups), ("--sample-groups", sample_groups)):
        if n is not None and n < 1:
            raise ConfigError(f"{opt} must be a positive number of groups, not {n}")
    if clean_only:
        keep = np.flatnonzero(data.clean)
        data = TaskData(data.task, data.split, data.spec, [data.docs[i] for i in keep], data.clean[keep],
                        data.path)
    order, dirty = _group_order(data)
    clean_groups = [g for g in order if g not in dirty]
    dirty_groups = [g for g in order if g in dirty]
    pool = "clean groups" if clean_only else "groups"
    record: dict[str, Any] = {"method": "all", "clean_only": clean_only,
                              "groups_available": len(order), "dirty_groups_available": len(dirty_groups)}
    if limit_groups is not None:
        taken = order[:limit_groups]
        record.update(method="first", requested=limit_groups)
        how = f"first {len(taken):,} of {len(order):,} {pool}"
    elif sample_groups is not None:
        rng = np.random.default_rng(sample_seed)
        n_dirty = min(len(dirty_groups), max(sample_groups - len(clean_groups), sample_groups // 2))
        took_dirty = _sample(rng, dirty_groups, n_dirty)
        took_clean = _sample(rng, clean_groups, sample_groups - len(took_dirty))
        picked = set(took_dirty) | set(took_clean)
        taken = [g for g in order if g in picked]
        record.update(method="sample", requested=sample_groups, seed=sample_seed)
        every = "all" if len(took_dirty) == len(dirty_groups) else f"{len(took_dirty):,} of"
        how = f"seeded sample (seed {sample_seed}) of {len(taken):,} of {len(order):,} {pool}"
        if not clean_only:
            how += (f": {every} {len(dirty_groups):,} dirty + {len(took_clean):,} of "
                    f"{len(clean_groups):,} clean")
    else:
        taken = order
        how = f"all {len(order):,} {pool}"
    if taken is not order:
        data = take_groups(data, taken)
        record["group_ids"] = taken
    record.update(groups=len(taken), dirty_groups=sum(1 for g in taken if g in dirty), docs=len(data.docs))
    record["description"] = f"{how}; {len(data.docs):,} docs"
    return data, record


def describe_groups(group_ids: list[int], limit: int = 12) -> str:
    """'0-19, 25, 31-40, ...' for a log line (results.json has the full list)."""
    runs: list[str] = []
    start = prev = None
    for g in [*sorted(group_ids), None]:
        if g is not None and prev is not None and g == prev + 1:
            prev = g
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = g
    return ", ".join(runs[:limit]) + (f", ... ({len(runs) - limit} more runs)" if len(runs) > limit else "")


MEMORIZATION_CONTEXTS = ("fields", "prompt", "standalone", "both")
CONTEXT_DEFINITIONS = {
    "prompt": "in-prompt (tcqa_data.eval.in_prompt): each text's tokens where it occurs in the doc's "
              "prompt (offset mapping inside the field's occurrence; query = its template's fields), each "
              "predicted from the prompt tokens before it, read from the task's own forward pass; the "
              "prompt's first token is not scored; a text not located there is scored standalone "
              "(tasks.<task>.memorization_context counts them; samples' memorization_context says which)",
    "standalone": "standalone: each text alone after the prefix token (BOS, else EOS), every token scored, "
                  "cut to the model's context, in a separate packed pass",
    "both": "both: TEXT in-prompt as 'prompt' says, and TEXT@standalone as 'standalone' says; each "
            "distinct text scored once per context; a text that begins its prompt (nothing before it "
            "there either) or was scored standalone already keeps those scores as its standalone ones "
            "(samples' memorization_context says where each came from)",
    "fields": "fields (the default): every TEXT in-prompt as 'prompt' says, and each field the query's "
              "template renders also alone, FIELD@standalone as 'standalone' says (the query itself when "
              "it renders none: SQuAD's is the prompt); each distinct text scored once; a text that "
              "begins its prompt keeps its in-prompt scores as its standalone ones. The query's "
              "standalone evidence is its fields': MC-TACO's query '{question} {sentence}' begins "
              "with the question alone, and a source passage holds the sentence, which begins the prompt",
}


def standalone_names(spec: TaskSpec, texts: dict[str, str], context: str) -> list[str]:
    """The texts that also get a ``TEXT@standalone`` under ``context`` (``both``: all; ``fields``: the
    fields the query's template renders that are memorization texts, MC-TACO's question and sentence,
    else the query itself; otherwise none)."""
    if context == "both":
        return list(texts)
    if context == "fields":
        return [n for n in query_field_names(spec) if n in texts] or [HEADLINE_TEXT]
    return []


def query_field_names(spec: TaskSpec) -> list[str]:
    """The fields the memorization query's template renders, in template order ([] for a template of
    the task's own, ``memorization_text``)."""
    template = spec.memorization_query_template()
    if template not in ("doc_to_text", "doc_to_decontamination_query"):
        return []
    return [f for f in spec.template_fields(template) if f != HEADLINE_TEXT]


def query_fields_standalone(spec: TaskSpec, texts: list[dict[str, str]]) -> list[str]:
    """``FIELD@standalone`` for each field the query's template renders (MC-TACO's question and
    sentence) that every doc has as a memorization text: the headline's standalone views of the
    query's parts."""
    return [f + STANDALONE_SUFFIX for f in query_field_names(spec) if texts and all(f in ts for ts in texts)]


def memorization_record(on: bool, only: bool, context: str = DEFAULT_CONTEXT) -> dict[str, Any]:
    """results.json's ``memorization``: whether the per-doc scores were computed, and how."""
    if not on:
        return {"computed": False, "why": "--no-memorization"}
    return {
        "computed": True, "only": only, "context": context,
        "context_definition": CONTEXT_DEFINITIONS[context],
        "scores": list(SCORE_NAMES), "k_percent": list(KS),
        "definitions": "tcqa_data.eval.memorization (docs/ARCHITECTURE.md, Memorization scores): higher "
                       "= more likely seen; loss = mean token log-prob (Carlini et al. 2021, negated as "
                       "MIMIR), "
                       "zlib = that / zlib-compressed bytes, min_k_K = mean of the K% lowest token log-probs "
                       "(Shi et al. 2024), min_k_pp_K = the same over log-probs standardized by the "
                       "next-token distribution's mean and std (Zhang et al. 2025); which tokens: "
                       "context_definition",
        "texts": "query: the decontamination query (or the task's memorization_text); each attribution "
                 "field on its own",
        "headline": "memorization.headline: Fisher's combination (sum of -log p) of the rank p-values, "
                    "among the docs of this pass, of min_k_pp_20 of query in the prompt, "
                    "query@standalone and each query field's FIELD@standalone where they ran, "
                    "rank-normalised (tcqa_data.eval.memorization.add_headline); higher = more likely seen",
    }


def add_standalone_scores(engine: Engine, per_doc: list[dict[str, Any]],
                          texts: list[dict[str, str]]) -> dict[str, int]:
    """Completes each doc's ``memorization`` (the in-prompt scores the task's pass gave, if any) with
    the standalone scores of its other texts, in ``texts`` order, and records per doc where each came
    from (``memorization_context``: TEXT -> prompt|standalone); returns how many (doc, text) pairs
    came from each."""
    missing = [{n: t for n, t in ts.items() if n not in (o.get("memorization") or {})}
               for o, ts in zip(per_doc, texts, strict=True)]
    alone = doc_memorization(engine, missing) if any(missing) else [{} for _ in per_doc]
    count = {"prompt": 0, "standalone": 0}
    for o, ts, own, extra in zip(per_doc, texts, missing, alone, strict=True):
        got = {**(o.get("memorization") or {}), **extra}
        o["memorization"] = {n: got[n] for n in ts}
        o["memorization_context"] = {n: "standalone" if n in own else "prompt" for n in ts}
        for n in ts:
            count["standalone" if n in own else "prompt"] += 1
    return count


def add_standalone_context(engine: Engine, spec: TaskSpec, docs: list[dict[str, Any]],
                           per_doc: list[dict[str, Any]], texts: list[dict[str, str]],
                           context: str = "both") -> int:
    """``--memorization-context both`` or ``fields``: each doc's ``TEXT@standalone`` beside its
    in-prompt ``TEXT`` for the texts :func:`standalone_names` picks (after :func:`add_standalone_scores`).
    A text scored standalone already, or one that begins the
    doc's prompt (nothing precedes it there either: the contexts differ by the prefix token alone),
    keeps its scores; the others are scored alone, each distinct text once. Returns how many
    (doc, text) pairs the standalone pass scored."""
    need: list[dict[str, str]] = []
    names: list[list[str]] = []
    for doc, o, ts in zip(docs, per_doc, texts, strict=True):
        prompt = spec.text(doc)
        where = o["memorization_context"]
        names.append(standalone_names(spec, ts, context))
        need.append({n: ts[n] for n in names[-1]
                     if where[n] != "standalone" and not prompt.startswith(ts[n])})
    alone = doc_memorization(engine, need) if any(need) else [{} for _ in per_doc]
    for o, ns, own, scored in zip(per_doc, names, need, alone, strict=True):
        for n in ns:
            o["memorization"][n + STANDALONE_SUFFIX] = scored[n] if n in own else o["memorization"][n]
            o["memorization_context"][n + STANDALONE_SUFFIX] = \
                "standalone" if n in own else o["memorization_context"][n]
    return sum(len(x) for x in need)


# ---- running one task ----------------------------------------------------------------------
def score_multiple_choice(engine: Engine, spec: TaskSpec, docs: list[dict[str, Any]],
                          progress: Any = None,
                          memorization_texts: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Per doc: loglikelihood of each choice, greedy flags, argmax prediction, gold index; with
    ``memorization_texts``, ``memorization`` = the scores of those located in the doc's prompt, read
    from its first choice's forward pass (``eval.in_prompt``)."""
    pairs, owners, shares = [], [], []
    for i, doc in enumerate(docs):
        ctx = spec.text(doc)
        for c in spec.choices(doc):
            pairs.append((ctx, spec.target_delimiter + c))
            owners.append(i)
            shares.append(int(doc["group_id"]))
    enc = encode_pairs(engine.tokenizer, pairs)
    first: dict[int, int] = {}
    for k, i in enumerate(owners):
        first.setdefault(i, k)
    plans: dict[int, in_prompt.PromptPlan] = {}
    if memorization_texts is not None:
        for i, k in first.items():
            ctx_enc, cont_enc = enc[k]
            # encode_pairs moved the context's trailing whitespace into the continuation
            plans[k] = in_prompt.plan(engine.tokenizer, spec, docs[i], pairs[k][0].rstrip(), ctx_enc,
                                      memorization_texts[i],
                                      fits=len(ctx_enc) + len(cont_enc) <= engine.lm.max_length + 1)
    reqs = [LLRequest(c, cont, s, f"doc_id {docs[i]['doc_id']}",
                      stats_at=plans[k].positions if k in plans else ())
            for k, ((c, cont), s, i) in enumerate(zip(enc, shares, owners, strict=True))]
    stats: dict[int, TokenStats] | None = {} if plans else None
    res = loglikelihoods(engine, reqs, progress=progress, stats=stats)
    out: list[dict[str, Any]] = [{"loglikelihoods": [], "is_greedy": []} for _ in docs]
    for i, (ll, greedy) in zip(owners, res, strict=True):
        out[i]["loglikelihoods"].append(ll)
        out[i]["is_greedy"].append(greedy)
    for i, (doc, o) in enumerate(zip(docs, out, strict=True)):
        o["pred"] = int(np.argmax(o["loglikelihoods"]))  # first max on ties, as np.argmax in lm-eval
        o["gold"] = spec.target_index(doc)
        o["correct"] = int(o["pred"] == o["gold"])
        if memorization_texts is not None:
            k = first[i]
            o["memorization"] = in_prompt.plan_scores(plans[k], (stats or {}).get(k), memorization_texts[i])
    return out


def score_generation(engine: Engine, spec: TaskSpec, docs: list[dict[str, Any]], progress: Any = None,
                     memorization_texts: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Per doc: the greedy generation, its target and ``contains``; with ``memorization_texts``,
    ``memorization`` = the scores of those located in the prompt, read from its prefill."""
    gk = dict(spec.generation_kwargs)
    until = gk.get("until", ["\n"])
    until = [until] if isinstance(until, str) else list(until)
    if gk.get("do_sample"):
        raise ConfigError(f"task {spec.task!r} asks for sampling; only greedy generation is supported")
    max_gen = int(gk.get("max_gen_toks", 48))
    prompts = [spec.text(d) for d in docs]
    ctxs = tok_encode_batch(engine.tokenizer, prompts, for_generation=True)
    plans: list[in_prompt.PromptPlan] = []
    if memorization_texts is not None:
        plans = [in_prompt.plan(engine.tokenizer, spec, d, p, c, t,
                                fits=len(c) <= engine.lm.max_length - max_gen)
                 for d, p, c, t in zip(docs, prompts, ctxs, memorization_texts, strict=True)]
    stats: dict[int, TokenStats] | None = {} if plans else None
    gens = generate_until(engine, ctxs, until, max_gen, progress=progress,
                          names=[f"doc_id {d['doc_id']}" for d in docs],
                          stats_at=[p.positions for p in plans] if plans else None, stats=stats)
    out = []
    for i, (doc, g) in enumerate(zip(docs, gens, strict=True)):
        target = spec.target(doc).strip()
        out.append({"generation": g, "target": target, "contains": M.contains_score(g, target)})
        if memorization_texts is not None:
            out[-1]["memorization"] = in_prompt.plan_scores(plans[i], (stats or {}).get(i),
                                                            memorization_texts[i])
    return out


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "tcqa-data": __version__}
    for pkg in ("torch", "transformers", "accelerate", "gguf", "numpy", "scikit-learn", "tokenizers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _upstream(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    if manifest is None:
        return None
    # the whole manifest: index summary, rule, n-gram per task, counts (small, and all of it matters)
    return dict(manifest)


def default_output(prep_dir: Path, model_name: str) -> Path:
    # a model named ".." or "/abs/path" must still land in a folder of its own under PREP_DIR/eval
    return prep_dir / "eval" / safe_model_dirname(model_name)


@dataclass
class EvaluatedTask:
    """One task of a model pass: its evaluated docs, the model's per-doc outputs (full order) and their
    clean / full / dirty table (None where no doc was selected)."""

    data: TaskData
    per_doc: list[dict[str, Any]]
    table: TaskTable | None


@dataclass
class Evaluation:
    """One model pass over the prepared tasks, nothing written yet: the eval stage's work, which
    ``evaluate`` writes alone and ``tcqa_data.workflow.evaluate`` writes with its analysis."""

    prep_dir: Path
    results: dict[str, Any]  # the results.json object
    samples: list[dict[str, Any]]  # samples.jsonl: one record per doc
    tasks: list[EvaluatedTask]

    @contextmanager
    def committing(self, out_dir: Path, *, locked: bool = False) -> Iterator[Path]:
        """EVAL_DIR written whole: yields a staging folder to write into, committed as ``out_dir`` in
        one step at the end (one writer at a time; a failed or killed run leaves the previous folder
        as it was); ``results["output_dir"]`` names ``out_dir`` afterwards. ``locked``: an
        :class:`OutputClaim` holds its lock already."""
        with staged_output(out_dir, "evaluate", locked=locked) as stage:
            yield stage
        self.results["output_dir"] = str(out_dir)

    def write(self, folder: Path, extra: Sequence[Block] = (), at: Path | None = None) -> None:
        """results.json, samples.jsonl, report.md and report.html into ``folder`` (``extra`` blocks after
        the evaluation's own in both reports; ``at``: the folder they are committed as, for the links)."""
        from tcqa_data.eval.results import write_outputs

        write_outputs(folder, self.results, self.samples, extra, at)

    def returned(self) -> dict[str, Any]:
        """What ``evaluate`` returns: the results.json object, the per-doc samples under ``"_samples"``."""
        self.results["_samples"] = self.samples
        return self.results


class OutputClaim:
    """EVAL_DIR's lock, taken before the model loads and held until the commit: a second
    ``evaluate`` into the same folder, a folder another command wrote or a link is refused at once,
    not after the model has loaded or scored. A folder given (``output``) is claimed on entry; so is
    the default folder ``PREP_DIR/eval/<model>`` when ``model_name`` (``models.model_name``, the name
    the loaded model will carry) is given, else once the model is loaded: pass the claim as
    ``run_evaluation``'s ``before_scoring``. ``folder`` is then the folder to commit (``locked=True``)."""

    def __init__(self, output: str | Path | None, prep_dir: str | Path | None = None,
                 model_name: str | None = None) -> None:
        self.output = output
        self.prep_dir = prep_dir
        self.model_name = model_name
        self.folder: Path | None = None
        self._held = ExitStack()

    def __call__(self, default: Path) -> None:
        if self.folder is None:
            # a default folder (PREP_DIR/eval/<model>) is ours to name: a link there is refused
            self._claim(default, follow_link=False)

    def _claim(self, folder: Path, *, follow_link: bool = True) -> None:
        self._held.enter_context(claimed_output(folder, "evaluate", follow_link=follow_link))
        self.folder = folder

    def __enter__(self) -> OutputClaim:
        if self.output is not None:  # a folder named: claimed before the model loads
            self._claim(Path(self.output))
        elif self.prep_dir is not None:
            # PREP_DIR/eval: a folder of PREP_DIR, never a link out of it, writable; then the model's
            # own folder, whose name the model argument gives (models.model_name)
            evals = output_target(Path(self.prep_dir) / "eval", follow_link=False)
            check_output_dir(evals)
            if self.model_name is not None:
                self(default_output(Path(self.prep_dir), self.model_name))
        return self

    def __exit__(self, *exc: object) -> None:
        self._held.close()


def run_evaluation(prep_dir: str | Path, model: str | LoadedModel, tasks: list[str] | None = None,
                   clean_only: bool = False, device: str = "auto", dtype: str = "auto",
                   batch_size: int | str = "auto", limit_groups: int | None = None, *,
                   gguf_file: str | None = None, trust_remote_code: bool = False, split: str | None = None,
                   bootstrap: int = M.BOOTSTRAP_SAMPLES, seed: int = M.BOOTSTRAP_SEED, quiet: bool = False,
                   packing: bool | None = None, sample_groups: int | None = None,
                   sample_seed: int = 0, memorization: bool = True,
                   memorization_only: bool = False, memorization_context: str = DEFAULT_CONTEXT,
                   reference_model: str | None = None, reference_frequencies: str = "none",
                   before_scoring: Callable[[Path], None] | None = None) -> Evaluation:
    """The eval stage: score ``model`` once on the prepared tasks in ``prep_dir`` and compute each task's
    clean / full / dirty table; writes nothing (see ``evaluate`` for the parameters).
    ``before_scoring`` is called with the default output folder once the model is loaded (an
    :class:`OutputClaim`)."""
    if memorization_only and not memorization:
        raise ConfigError("--memorization-only and --no-memorization leave nothing to compute; give one")
    if memorization_context not in MEMORIZATION_CONTEXTS:
        raise ConfigError(f"--memorization-context must be one of {', '.join(MEMORIZATION_CONTEXTS)}, "
                          f"not {memorization_context!r}")
    Calibration.check(memorization, reference_model, reference_frequencies)
    prep_dir = require_prep_dir(prep_dir)
    manifest = read_manifest(prep_dir)
    names = tasks or available_tasks(prep_dir)
    if not names:
        raise TcqaError(f"{prep_dir} holds no prepared tasks (no */task.yaml)")
    datas, selections = [], {}
    for t in names:
        data, selections[t] = select_groups(load_task(prep_dir, t, split), clean_only=clean_only,
                                            limit_groups=limit_groups, sample_groups=sample_groups,
                                            sample_seed=sample_seed)
        datas.append(data)
    for data in datas:
        task_metric_names(data.spec)  # refuse unsupported metrics before the model loads
    for data in datas:
        record = selections[data.task]
        which = f" (group_id {describe_groups(record['group_ids'])})" if "group_ids" in record else ""
        note(f"{data.task} ({data.split}): {record['description']}{which}", quiet)

    t0 = time.perf_counter()
    what = model.name if isinstance(model, LoadedModel) else str(model if gguf_file is None
                                                                 else Path(model) / gguf_file)
    with stage(f"loading model {what}", quiet):
        lm = model if isinstance(model, LoadedModel) else load_model(
            model, gguf_file=gguf_file, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
            show_progress=progress_enabled(quiet))
        engine = Engine(lm, batch_size, packing=packing)
    calibration = Calibration.load(engine, memorization, reference_model, reference_frequencies, manifest,
                                   device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                   batch_size=batch_size, quiet=quiet)
    load_s = time.perf_counter() - t0
    if before_scoring is not None:
        before_scoring(default_output(prep_dir, lm.name))

    results: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "model": {"name": lm.name, "source": lm.source, "gguf_file": lm.gguf_file, "device": str(lm.device),
                  "dtype": str(lm.dtype).replace("torch.", ""), "max_length": lm.max_length,
                  "batch_size": batch_size, "packing": engine.packing, **lm.info},
        "versions": _versions(),
        "upstream": _upstream(manifest),
        "prep_dir": str(prep_dir),
        "clean_only": clean_only,
        "limit_groups": limit_groups,
        "sample_groups": None if sample_groups is None else {"groups": sample_groups, "seed": sample_seed},
        "bootstrap": {"samples": bootstrap, "seed": seed, "level": M.LEVEL, "unit": M.BOOTSTRAP_UNIT,
                      "difference": "paired: clean and full from the same resample of full's groups"},
        "metric_families": {
            "lm_eval": "lm-evaluation-harness 0.4: acc per candidate, f1 = sklearn binary F1 pooled "
                       "over candidates (yes positive), contains per doc",
            "official": "CogComp MC-TACO evaluator: strict_acc = share of questions with every candidate "
                        "right; f1 = per-question F1 averaged over questions",
        },
        "memorization": {**memorization_record(memorization, memorization_only, memorization_context),
                         **calibration.record()},
        "tasks": {},
        "timings": {"model_load_s": round(load_s, 3)},
    }
    samples: list[dict[str, Any]] = []
    evaluated: list[EvaluatedTask] = []
    for data in datas:
        docs, clean = data.docs, data.clean  # select_groups already dropped dirty docs for --clean-only
        t1 = time.perf_counter()
        with progress_bar(quiet) as bar:
            bar_task = bar.add_task(f"{data.task} ({data.split})", total=len(docs), rate="")
            n_req_per_doc = len(data.spec.choices()) if data.spec.output_type == "multiple_choice" else 1
            done = [0]

            def tick(n: int, _task=bar_task, _per=n_req_per_doc, _done=done, _t1=t1) -> None:
                _done[0] += n
                docs_done = _done[0] / _per
                bar.update(_task, completed=docs_done,
                           rate=rate_text(docs_done, time.perf_counter() - _t1, "docs"))

            texts = [data.spec.memorization_texts(d) for d in docs] if memorization else None
            in_pass = texts if memorization_context != "standalone" else None
            if not docs or (memorization_only and in_pass is None):
                per_doc: list[dict[str, Any]] = [{} for _ in docs]
            elif data.spec.output_type == "multiple_choice":
                per_doc = score_multiple_choice(engine, data.spec, docs, progress=tick,
                                                memorization_texts=in_pass)
            elif data.spec.output_type == "generate_until":
                per_doc = score_generation(engine, data.spec, docs, progress=tick, memorization_texts=in_pass)
            else:
                raise ConfigError(f"task {data.task!r}: output_type {data.spec.output_type!r} "
                                  "is not supported")
            if memorization_only:  # the task's pass ran for the scores only
                per_doc = [{k: v for k, v in o.items() if k == "memorization"} for o in per_doc]
        run_s = time.perf_counter() - t1
        mem_s = None
        mem_count = None
        if texts is not None and docs:
            t2 = time.perf_counter()
            with stage(f"{data.task}: memorization scores", quiet):
                mem_count = add_standalone_scores(engine, per_doc, texts)
                if memorization_context in ("both", "fields"):
                    mem_count["standalone_pass"] = add_standalone_context(engine, data.spec, docs, per_doc,
                                                                          texts, memorization_context)
                calibration.add(per_doc, texts)
                add_headline(per_doc, also=query_fields_standalone(data.spec, texts))
            mem_s = time.perf_counter() - t2
        table = task_table(data.spec, docs, per_doc, clean, bootstrap, seed) \
            if docs and not memorization_only else None
        entry = {**(table.table if table is not None else empty_table(data.spec)), "split": data.split,
                 "output_type": data.spec.output_type, "source": str(data.path),
                 "selection": selections[data.task]}
        if clean_only:
            # Only clean docs were scored: a "full" computed from them would be the clean score (a new
            # dict: the task's TaskTable keeps its whole table)
            entry["subsets"] = {k: v for k, v in entry["subsets"].items() if k not in ("full", "dirty")}
            entry.pop("clean_minus_full", None)
        results["tasks"][data.task] = entry
        if memorization:
            entry["memorization_texts"] = list(texts[0]) if texts else ["query"]
            entry["memorization_context"] = mem_count or {"prompt": 0, "standalone": 0}
        results["timings"][data.task] = {"run_s": round(run_s, 3), "docs": len(docs),
                                         "docs_per_s": round(len(docs) / run_s, 2) if run_s > 0 else None}
        if mem_s is not None:
            results["timings"][data.task]["memorization_s"] = round(mem_s, 3)
        for doc, c, o in zip(docs, clean, per_doc, strict=True):
            samples.append({"task": data.task, "doc_id": int(doc["doc_id"]), "group_id": int(doc["group_id"]),
                            "subset": "clean" if c else "dirty", **o})
        evaluated.append(EvaluatedTask(data, per_doc, table))
    results["effective_batch_size"] = engine.batch_size
    return Evaluation(prep_dir, results, samples, evaluated)


@moved_to_top("evaluate")
def evaluate(prep_dir: str | Path, model: str | LoadedModel, tasks: list[str] | None = None,
             clean_only: bool = False, device: str = "auto", dtype: str = "auto",
             batch_size: int | str = "auto", output: str | Path | None = None,
             limit_groups: int | None = None, *, gguf_file: str | None = None,
             trust_remote_code: bool = False, split: str | None = None, bootstrap: int = M.BOOTSTRAP_SAMPLES,
             seed: int = M.BOOTSTRAP_SEED, quiet: bool = False, write: bool = True,
             packing: bool | None = None, sample_groups: int | None = None,
             sample_seed: int = 0, memorization: bool = True,
             memorization_only: bool = False, memorization_context: str = DEFAULT_CONTEXT,
             reference_model: str | None = None, reference_frequencies: str = "none",
             extend: Callable[[Evaluation, Path, Path], Sequence[Block]] | None = None) -> dict[str, Any]:
    """The eval stage alone: score ``model`` on the prepared tasks in ``prep_dir``; write results to
    ``output``. ``tcqa_data.workflow.evaluate`` (the CLI's ``evaluate``) also analyzes the pass,
    through ``extend``: called inside EVAL_DIR's commit with the run, the staging folder and the
    final folder; what it writes into the staging folder is committed with EVAL_DIR, and the blocks
    it returns end both reports.

    ``limit_groups`` (the first N groups) or ``sample_groups`` (every dirty group plus a seeded
    sample of clean ones, see ``select_groups``) evaluate part of each split; with ``clean_only``
    both choose among the clean groups. What was taken is printed and recorded per task.

    The model runs once over full = clean + dirty (or only the clean docs with ``clean_only``);
    every subset's metrics are sliced from that one pass. ``memorization`` (on by default) adds per doc
    the model-side scores of ``eval.memorization`` over the doc's query and attribution fields
    (samples.jsonl's ``memorization``); ``memorization_only`` computes those alone;
    ``reference_model`` and ``reference_frequencies`` add the calibrated scores of
    ``eval.calibration`` to each doc's ``memorization.query``. Returns the
    results.json object, with the per-doc samples under the key ``"_samples"``
    (not written into results.json).
    """
    name = model.name if isinstance(model, LoadedModel) else model_name(str(model), gguf_file)
    with OutputClaim(output, prep_dir if write else None, name) as claim:
        run = run_evaluation(prep_dir, model, tasks, clean_only, device, dtype, batch_size, limit_groups,
                             gguf_file=gguf_file, trust_remote_code=trust_remote_code, split=split,
                             bootstrap=bootstrap, seed=seed, quiet=quiet, packing=packing,
                             sample_groups=sample_groups, sample_seed=sample_seed,
                             memorization=memorization, memorization_only=memorization_only,
                             memorization_context=memorization_context, reference_model=reference_model,
                             reference_frequencies=reference_frequencies,
                             before_scoring=claim if write else None)
        if write:
            with run.committing(claim.folder, locked=True) as stage:
                run.write(stage, extend(run, stage, claim.folder) if extend is not None else (), claim.folder)
    return run.returned()
