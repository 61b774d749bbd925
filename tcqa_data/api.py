"""The public Python API: one function per stage, named and parametrized as the CLI's commands.

``from tcqa_data import build_index, decontaminate, purify, evaluate, analyze`` gives these functions.
Each takes the parameters of its command (``--out`` is ``out``, ``--data-files`` is ``data_files``,
a positional argument is a positional parameter) with the same defaults, runs the stage function
the command runs, and returns what that stage writes as its record (a dict: the index manifest, the
run summary, results.json, analysis.json, the purify report). Comma lists (``tasks``, ``splits``)
take a Python list too; ``data_files`` and ``group_by`` take a mapping or the CLI's strings.

The stage modules stay importable (``tcqa_data.decontam.build.build_index``, ...), for one release,
with a DeprecationWarning when called from outside the package.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import pandas as pd

PathLike = str | os.PathLike

DEFAULT_TASKS = "mc_taco,squad_completion"
DEFAULT_RULE = "any-ngram"  # decontam.detect.rules.DEFAULT_RULE; a test checks they agree


class IndexManifest(TypedDict, total=False):
    """What `build_index` returns: ``INDEX_DIR/manifest.json`` (the main keys; see the formats
    reference for all)."""

    format_version: int
    counts: dict[str, Any]
    inputs: list[dict[str, Any]]
    skipped: dict[str, Any]
    skipped_inputs: list[dict[str, Any]]
    build: dict[str, Any]


class PrepSummary(TypedDict, total=False):
    """What `decontaminate` returns: the run's settings and, per task and split, its counts
    (``tasks[task][split]``: ``docs``, ``dirty_docs``, ``groups``, ``dirty_groups``,
    ``untestable_docs``)."""

    rule: str
    group_policy: str
    normalization: str
    warnings: list[str]
    tasks: dict[str, dict[str, dict[str, Any]]]


class EvalResults(TypedDict, total=False):
    """What `evaluate` returns: ``EVAL_DIR/results.json``, plus the per-doc samples under
    ``_samples`` (samples.jsonl's rows). ``tasks[task]`` holds ``split``, ``subsets`` (clean, full,
    dirty: ``docs``, ``groups``, ``metrics`` with ``value`` and ``ci95``) and ``clean_minus_full``;
    `clean_vs_full_table` turns it into a table."""

    model: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    bootstrap: dict[str, Any]
    analysis: dict[str, Any]
    output_dir: str
    _samples: list[dict[str, Any]]


class AnalysisResult(TypedDict, total=False):
    """What `analyze` returns: ``analysis.json`` (``tasks[task]``: ``split``, ``conclusion``
    lines, sweeps, Llama 2 subsets, input vs input+label, model side) and ``output_dir``."""

    tasks: dict[str, dict[str, Any]]
    bootstrap: dict[str, Any]
    results: str
    output_dir: str


class PurifyReport(TypedDict, total=False):
    """What `purify` returns: ``purify_report.json`` (``totals``: ``contaminated_docs``,
    ``dropped``, ``cut``, ``bytes_removed``; per input and per task) plus ``shards``
    (``total``, ``reused`` from a killed run)."""

    totals: dict[str, Any]
    inputs: list[dict[str, Any]]
    tasks: dict[str, Any]
    shards: dict[str, int]


def _names(value: str | Sequence[str] | None) -> list[str] | None:
    """A comma list (``"a,b"``) or a list of names -> the list; empty -> None (the default)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(v).strip() for v in items if str(v).strip()]
    return names or None


def _one_split(value: str | Sequence[str] | None, command: str) -> str | None:
    from tcqa_data.errors import ConfigError

    names = _names(value)
    if names and len(names) > 1:
        raise ConfigError(f"{command} reads one prepared split per task; got {', '.join(names)}")
    return names[0] if names else None


def _data_files(value: Mapping[str, Mapping[str, PathLike]] | Sequence[str] | None,
                tasks: list[str]) -> dict[str, dict[str, str]]:
    """``{task: {split: path}}`` as given, or the CLI's ``TASK:SPLIT=PATH`` strings parsed."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {t: {s: os.fspath(p) for s, p in splits.items()} for t, splits in value.items()}
    from tcqa_data.prep.task_jobs import parse_data_files

    return parse_data_files([value] if isinstance(value, str) else list(value), tasks)


def _text_field(preset: str | None, text_field: str | None) -> str:
    from tcqa_data.decontam.readers.presets import text_field_for

    return text_field_for(preset, text_field)


def _paths(value: PathLike | Sequence[PathLike] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value]


def build_index(
    corpus: PathLike | Sequence[PathLike] | None = None,
    *,
    out: PathLike,
    demo: bool = False,
    ngram: int | str | Sequence[int] = 13,
    normalization: str = "janitor",
    text_field: str | None = None,
    preset: str | None = None,
    id_field: str | None = None,
    hf_dataset: str | None = None,
    hf_config: str | None = None,
    hf_split: str = "train",
    workers: int | None = None,
    append: bool = False,
    overwrite: bool = False,
    on_error: str = "raise",
    no_minhash: bool = False,
    num_perm: int = 128,
    provenance: int = 2,
    num_buckets: int = 64,
    ngram_dir_bits: int | None = None,
    text_store: str = "auto",
    quiet: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
) -> IndexManifest:
    """Index a training corpus into ``out`` (INDEX_DIR), as ``tcqa-data index-corpus``.

    Args:
        corpus: Corpus files, globs or folders (``.jsonl[.gz|.zst]``, ``.parquet``, ``.txt``).
        out: The index folder to create (or extend with ``append``).
        demo: Also index the demo corpus shipped with tcqa-data (162 Wikipedia articles).
        ngram: N-gram size(s): ``13``, ``[8, 13]`` or ``"8,13"``.
        normalization: ``janitor`` (exactly lm-eval's Janitor tokens) or ``unicode``.
        text_field: The field holding the document text (default ``text``); ``a.b``: nested.
        preset: A corpus layout's text field: ``dolma``, ``fineweb``, ``dclm``, ``redpajama-v2``.
        id_field: The field used as doc ref (default: ``file:line``).
        hf_dataset: Stream this Hugging Face dataset (``hf_config``, ``hf_split``) as input.
        hf_config: Its config name.
        hf_split: Its split.
        workers: Local worker processes (default: all cores).
        append: Add new inputs to an existing index.
        overwrite: Replace an existing index (only once the new one is complete).
        on_error: ``raise`` stops at a bad record; ``skip`` counts it in the manifest.
        no_minhash: Build only the n-gram index.
        num_perm: MinHash permutations.
        provenance: Doc ordinals kept per n-gram.
        num_buckets: Hash buckets of the n-gram index (reduce tasks), a power of two.
        ngram_dir_bits: Directory bits of the compact n-gram layout (default: from the corpus size).
        text_store: ``auto``, ``copy`` or ``none``: the corpus text kept reachable for alignment.
        quiet: No progress bar.
        engine: ``local`` (worker processes here) or ``ray`` (Ray tasks).
        ray_address: With ``engine="ray"``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    Returns:
        The index's ``manifest.json``.
    """
    from tcqa_data.decontam.build.index import build_index as build
    from tcqa_data.errors import ConfigError

    inputs = _paths(corpus)
    if demo:
        from tcqa_data.data import demo_corpus_path

        inputs.append(demo_corpus_path())
    if not inputs and not hf_dataset:
        raise ConfigError("no corpus to index: name files, globs or folders, hf_dataset, or demo=True")
    if isinstance(ngram, (int, str)):
        try:
            sizes = [int(x) for x in str(ngram).replace(" ", "").split(",") if x]
        except ValueError as e:
            raise ConfigError(f"ngram takes sizes like 13 or 8,13, not {ngram!r}") from e
    else:
        sizes = [int(x) for x in ngram]
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"ngram takes positive sizes like 13 or 8,13, not {ngram!r}")
    return build(inputs, out, ngram_sizes=sizes, normalization=normalization,
                 text_field=_text_field(preset, text_field), id_field=id_field, workers=workers,
                 append=append, overwrite=overwrite, on_error=on_error, minhash=not no_minhash,
                 num_perm=num_perm, quiet=quiet, hf_dataset=hf_dataset, hf_config=hf_config,
                 hf_split=hf_split, provenance=provenance, engine=engine, ray_address=ray_address,
                 text_store=text_store, num_buckets=num_buckets, ngram_dir_bits=ngram_dir_bits)  # type: ignore[return-value]


def decontaminate(
    index_dir: PathLike | None = None,
    *,
    out: PathLike,
    corpus: PathLike | Sequence[PathLike] | None = None,
    hf_dataset: str | None = None,
    hf_config: str | None = None,
    hf_split: str = "train",
    text_field: str | None = None,
    preset: str | None = None,
    id_field: str | None = None,
    on_error: str = "raise",
    tasks: str | Sequence[str] = DEFAULT_TASKS,
    data_files: Mapping[str, Mapping[str, PathLike]] | Sequence[str] | None = None,
    splits: str | Sequence[str] | None = None,
    rule: str = DEFAULT_RULE,
    ngram: int | str = "13",
    max_corpus_freq: int | None = None,
    group_policy: str = "any",
    normalization: str | None = None,
    lm_eval_include: PathLike | Sequence[PathLike] | None = None,
    group_by: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    workers: int = 1,
    engine: str = "local",
    ray_address: str | None = None,
    short_min_words: int = 8,
    source_name: str | None = None,
    quiet: bool = False,
    allow_task_code: bool = False,
    embedding_model: str | None = None,
    judge: str | None = None,
    judge_top: int = 200,  # decontam.semantic.judge.JUDGE_TOP; tests/test_api.py checks the CLI agrees
    labels: PathLike | None = None,
) -> PrepSummary:
    """Flag the benchmark docs that overlap the corpus and write PREP_DIR to ``out``, as
    ``tcqa-data decontaminate``.

    Args:
        index_dir: An index written by `build_index`; or ``None`` with ``corpus`` /
            ``hf_dataset`` (stream mode: the corpus is read once, no index).
        out: The output folder (PREP_DIR).
        corpus: Stream mode: corpus files, globs or folders.
        hf_dataset: Stream mode: a Hugging Face dataset too (``hf_config``, ``hf_split``).
        hf_config: Its config name.
        hf_split: Its split.
        text_field: Stream mode: the document text field (default ``text``); ``a.b``: nested.
        preset: Stream mode: a corpus layout's text field (``dolma``, ``fineweb``, ``dclm``,
            ``redpajama-v2``).
        id_field: Stream mode: the field used as doc ref (default ``file:line``).
        on_error: Stream mode: ``raise`` or ``skip`` a bad record.
        tasks: Built-in task names, task YAML paths, or lm-eval task, group or tag names.
        data_files: Local data instead of the hub: ``{task: {split: path}}`` or the CLI's
            ``"TASK:SPLIT=PATH"`` strings.
        splits: The split names to process (default: all).
        rule: The flag rule, e.g. ``any-ngram`` or ``any-ngram|aligned-field>=0.8`` (see
            `Rule`).
        ngram: The n-gram size the index holds, or ``"auto"`` (GPT-3's choice per benchmark).
        max_corpus_freq: Ignore n-grams found in more than this many corpus docs.
        group_policy: A question group is dirty when ``any`` | ``all`` | ``majority`` of its docs are.
        normalization: Require the index to use this normalization.
        lm_eval_include: Folders of your own lm-eval task YAMLs (lm-eval's ``--include_path``).
        group_by: Question groups: ``{task: [field, ...]}`` or ``"TASK:FIELD[,FIELD...]"`` strings.
        workers: Stream mode: local processes reading the corpus shards.
        engine: ``local`` or ``ray``.
        ray_address: With ``engine="ray"``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.
        short_min_words: A query of this many words up to n-1 is matched whole (0: off).
        source_name: The corpus as ``contamination_report.csv`` names it (e.g. ``allenai/c4``).
        quiet: No progress bars.
        allow_task_code: Run the Python that task YAMLs outside the installed lm-eval name
            (``!function``, ``class:``); refused by default.
        embedding_model: With a ``semantic`` rule term: the sentence-transformers model (name, folder
            or hub id) that scores candidate windows (default: all-MiniLM-L6-v2 from the semantic
            extra, its weights sha256 pinned).
        judge: With a ``semantic`` rule term: a causal LM (local folder, ``.gguf`` file, hub id, or
            ``smollm2-135m-gguf``) asked whether each of the top item / window pairs is the same
            item, rephrased or translated (LLM Decontaminator's question); its verdict is the rule
            term ``judge``, e.g. ``any-ngram|semantic&judge``. Default: no judge.
        judge_top: With ``judge``: how many pairs each split has judged, highest cosine first
            (pairs under cosine 0.5 are not judged).
        labels: Ground truth: a CSV, JSONL or Parquet file with ``task``, ``doc_id`` (or
            ``group_id``: a label per question group), ``contaminated`` and optionally ``split``;
            each labelled split's report measures the rule, each of its terms and a
            precision / recall curve per score against it. Flags and splits do not change.

    Returns:
        The run summary, with each task and split's counts under ``tasks``.
    """
    from tcqa_data.decontam.index_files import reading
    from tcqa_data.outputs import check_apart
    from tcqa_data.prep.lm_eval_tasks import parse_group_by
    from tcqa_data.prep.pipeline import decontaminate as run

    task_list = _names(tasks) or []
    groups: Mapping[str, Sequence[str]] | None
    if group_by is None or isinstance(group_by, Mapping):
        groups = group_by
    else:
        groups = parse_group_by([group_by] if isinstance(group_by, str) else list(group_by))
    corpus_list = _paths(corpus) or None
    if index_dir is not None:
        check_apart(Path(out), Path(index_dir), "index", "--out")  # never write PREP_DIR over the index
    kwargs: dict[str, Any] = dict(
        data_files=_data_files(data_files, task_list), splits=_names(splits), rule=rule, ngram=ngram,
        max_corpus_freq=max_corpus_freq, group_policy=group_policy, normalization=normalization,
        lm_eval_include=_paths(lm_eval_include), group_by=groups, quiet=quiet, corpus=corpus_list,
        text_field=_text_field(preset, text_field),
        id_field=id_field, on_error=on_error, workers=workers, engine=engine,
        ray_address=ray_address, hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split,
        short_min_words=short_min_words or None, source_name=source_name,
        allow_task_code=allow_task_code, embedding_model=embedding_model, judge=judge, judge_top=judge_top,
        labels=labels)
    if index_dir is None:
        return run(None, task_list, out, **kwargs)  # type: ignore[return-value]
    with reading(index_dir):  # an index file damaged with its size kept: found by a full check
        return run(index_dir, task_list, out, **kwargs)  # type: ignore[return-value]


def evaluate(
    prep_dir: PathLike,
    *,
    model: str,
    gguf_file: str | None = None,
    tasks: str | Sequence[str] | None = None,
    clean_only: bool = False,
    device: str = "auto",
    dtype: str = "auto",
    batch_size: int | str = "auto",
    out: PathLike | None = None,
    limit_groups: int | None = None,
    sample_groups: int | None = None,
    sample_seed: int = 0,
    splits: str | Sequence[str] | None = None,
    trust_remote_code: bool = False,
    quiet: bool = False,
    memorization: bool = True,
    memorization_only: bool = False,
    memorization_context: str = "fields",
    reference_model: str | None = None,
    reference_frequencies: str = "none",
    backend: str = "native",
    lm_eval_model: str = "hf",
    model_args: str | None = None,
    allow_modified_code: bool = False,
    analysis: bool = True,
    bootstrap: int | None = None,
    bootstrap_seed: int | None = None,
    allow_task_code: bool = False,
) -> EvalResults:
    """Score ``model`` on the full, clean and dirty splits of PREP_DIR (one pass), then analyze that
    pass, as ``tcqa-data evaluate``.

    Args:
        prep_dir: A folder written by `decontaminate`.
        model: A hub id, a local folder, a ``.gguf`` path, or ``smollm2-135m-gguf`` (the file that
            scripts/install.sh installs).
        gguf_file: A GGUF file name inside the ``model`` folder.
        tasks: The tasks to score (default: all in PREP_DIR).
        clean_only: Score only the clean docs (no analysis: the dirty docs have no outputs).
        device: ``auto``, ``cuda``, ``cpu`` or ``mps``.
        dtype: ``auto`` (bf16 on CUDA where supported, else fp16; fp32 off CUDA), ``float32``,
            ``bfloat16`` or ``float16``.
        batch_size: ``auto`` (halves on out-of-memory) or rows per forward pass.
        out: The output folder (EVAL_DIR; default ``PREP_DIR/eval/MODEL``).
        limit_groups: Only the first N whole question groups.
        sample_groups: N whole groups: every dirty group (at most N/2) and a seeded sample of clean ones.
        sample_seed: The seed of ``sample_groups``.
        splits: The prepared split to score, one name (default: test, else validation).
        trust_remote_code: Run the model repository's own code.
        quiet: No progress bars.
        memorization: Per-doc memorization scores (loss, zlib, Min-K%, Min-K%++).
        memorization_only: Only the memorization scores, no task metric.
        memorization_context: ``fields`` (the default: every text read from the task's own forward
            pass, and each field of the query also alone; the headline score combines their ranks
            per doc), ``prompt`` (the task's forward pass only), ``standalone`` (each text
            alone) or ``both`` (every text in the prompt and alone).
        reference_model: A second model (the same forms as ``model``) whose likelihood calibrates the
            evaluated model's: ``memorization.query.reference_loss_ratio`` (MIMIR's reference attack).
        reference_frequencies: ``none``, ``auto`` (the prepared data's corpus: its index's text store
            or its corpus files, else the shipped demo corpus) or ``demo``: the token frequencies of
            ``memorization.query.dc_pdd`` (DC-PDD).
        backend: ``native`` (tcqa-data's scorer) or ``lm-eval`` (lm-evaluation-harness on the
            exported full YAMLs, then `analyze` of its samples).
        lm_eval_model: With ``backend="lm-eval"``: lm-eval's model type (``hf``, ``vllm``, ...).
        model_args: With ``backend="lm-eval"``: lm-eval's ``--model_args`` (default
            ``pretrained=MODEL``).
        allow_modified_code: With ``backend="lm-eval"``: run exported code whose sha256 changed.
        analysis: Analyze the pass into ``EVAL_DIR/analysis/`` (sweeps, Llama 2 subsets, input vs
            input+label, model side), its summary at the end of both reports.
        bootstrap: Bootstrap resamples of the intervals (default 1,000).
        bootstrap_seed: Their seed.
        allow_task_code: With ``backend="lm-eval"``: run the Python that prepared task YAMLs name
            (``!function``); refused by default.

    Returns:
        results.json as an object (``tasks``, ``model``, ``output_dir``, ``analysis``), the per-doc
        samples under ``_samples``. With ``backend="lm-eval"``: lm-eval's run (``output_dir``,
        ``tasks``, ``results``) and the analysis under ``analysis``.
    """
    from tcqa_data.errors import ConfigError
    from tcqa_data.eval import metrics as M

    names = _names(tasks)
    split = _one_split(splits, "evaluate")
    resamples = bootstrap if bootstrap is not None else M.BOOTSTRAP_SAMPLES
    seed = bootstrap_seed if bootstrap_seed is not None else M.BOOTSTRAP_SEED
    if backend == "lm-eval":
        from tcqa_data.eval.lm_eval_backend import native_only_given, run_lm_eval

        given = native_only_given(clean_only=clean_only, limit_groups=limit_groups, gguf_file=gguf_file,
                                  sample_groups=sample_groups, trust_remote_code=trust_remote_code,
                                  memorization_only=memorization_only,
                                  memorization_context=memorization_context,
                                  reference_model=reference_model,
                                  reference_frequencies=reference_frequencies)
        if given:
            raise ConfigError(f"{', '.join(given)} apply to the native backend only; lm-eval scores every "
                              "doc of the full split")

        run = run_lm_eval(prep_dir, model_args or f"pretrained={model}", model=lm_eval_model, tasks=names,
                          split=split, output=out, batch_size=batch_size,
                          device=None if device == "auto" else device,
                          allow_modified_code=allow_modified_code, allow_task_code=allow_task_code)
        if analysis:
            run["analysis"] = analyze(prep_dir, results=run["output_dir"], tasks=names, splits=split,
                                      bootstrap=bootstrap, bootstrap_seed=bootstrap_seed)
        return run  # type: ignore[return-value]
    if backend != "native":
        raise ConfigError(f"backend {backend!r}: use native or lm-eval")
    if analysis:
        from tcqa_data.workflow import evaluate as run_stage
    else:
        from tcqa_data.eval.runner import evaluate as run_stage
    return run_stage(prep_dir, model, tasks=names, clean_only=clean_only, device=device,  # type: ignore
                     dtype=dtype, batch_size=batch_size, output=out, limit_groups=limit_groups,
                     gguf_file=gguf_file, trust_remote_code=trust_remote_code, split=split,
                     bootstrap=resamples, seed=seed, quiet=quiet, sample_groups=sample_groups,
                     sample_seed=sample_seed, memorization=memorization, memorization_only=memorization_only,
                     memorization_context=memorization_context, reference_model=reference_model,
                     reference_frequencies=reference_frequencies)


def analyze(
    prep_dir: PathLike,
    *,
    results: PathLike,
    out: PathLike | None = None,
    tasks: str | Sequence[str] | None = None,
    splits: str | Sequence[str] | None = None,
    index_dir: PathLike | None = None,
    bootstrap: int | None = None,
    bootstrap_seed: int | None = None,
) -> AnalysisResult:
    """How much of the score is contamination, at every threshold, from one model pass, as
    ``tcqa-data analyze``.

    Args:
        prep_dir: A folder written by `decontaminate`.
        results: An `evaluate` output folder, or lm-eval 0.4 ``--log_samples`` output (a
            ``samples_TASK_DATE.jsonl`` file or its folder).
        out: The output folder (default ``RESULTS/analysis``).
        tasks: The prepared task(s) to analyze; names the prepared task when the lm-eval task has
            another name.
        splits: The prepared split to analyze, one name (default: the one evaluated).
        index_dir: The corpus index, for input vs input+label (default: the one prep_manifest.json
            names, if found).
        bootstrap: Bootstrap resamples (default: evaluate's, else 1,000).
        bootstrap_seed: Their seed (default: evaluate's).

    Returns:
        analysis.json as an object, with ``output_dir``.
    """
    from tcqa_data.analysis.run import analyze as run

    return run(prep_dir, results, out, tasks=_names(tasks), split=_one_split(splits, "analyze"),  # type: ignore
               bootstrap=bootstrap, seed=bootstrap_seed, index_dir=index_dir)


def purify(
    corpus: PathLike | Sequence[PathLike],
    *,
    out: PathLike,
    tasks: str | Sequence[str] = DEFAULT_TASKS,
    mode: str = "excise",
    data_files: Mapping[str, Mapping[str, PathLike]] | Sequence[str] | None = None,
    splits: str | Sequence[str] | None = None,
    lm_eval_include: PathLike | Sequence[PathLike] | None = None,
    rule: str = DEFAULT_RULE,
    ngram: int = 13,
    window: int = 200,
    minimum_slice: int = 200,
    too_dirty_cutoff: int = 10,
    janitor_exact: bool = True,
    text_field: str | None = None,
    preset: str | None = None,
    id_field: str | None = None,
    on_error: str = "raise",
    workers: int = 1,
    engine: str = "local",
    ray_address: str | None = None,
    short_min_words: int = 8,
    quiet: bool = False,
    allow_task_code: bool = False,
    embedding_model: str | None = None,
) -> PurifyReport:
    """Write ``corpus`` minus its contamination by the benchmarks to ``out``, as ``tcqa-data purify``.

    Args:
        corpus: Corpus files, globs or folders (JSONL, Parquet); each is written again under ``out``
            at the same relative path, in its own format.
        out: The output folder (never an input, nor inside or around one).
        tasks: Built-in task names, task YAML paths, or lm-eval task, group or tag names.
        mode: ``excise`` (lm-eval Janitor.clean's cuts) or ``drop`` (whole docs).
        data_files: Local benchmark data: ``{task: {split: path}}`` or ``"TASK:SPLIT=PATH"`` strings.
        splits: The split names to check (default: all).
        lm_eval_include: Folders of your own lm-eval task YAMLs.
        rule: The benchmark docs that count (as `decontaminate`; no ``minhash`` or ``judge``
            term; with a ``semantic`` term the corpus doc holding a flagged item's best window is
            dropped, or with ``mode="excise"`` that window is cut from it as an n-gram match is).
        ngram: The n-gram size (Janitor: 13).
        window: Chars cut on each side of a match (Janitor: 200).
        minimum_slice: Shorter pieces are dropped (Janitor: 200).
        too_dirty_cutoff: More matches drop the doc whole (Janitor: 10).
        janitor_exact: Excise exactly as ``Janitor.clean_python`` (the default); ``False`` also matches
            across an all-punctuation word and short items whole, as `decontaminate` does.
        text_field: The field holding the document text (default ``text``); ``a.b``: nested.
        preset: A corpus layout's text field: ``dolma``, ``fineweb``, ``dclm``, ``redpajama-v2``.
        id_field: The field used as doc ref (default ``file:line``).
        on_error: ``raise`` or ``skip`` a bad record.
        workers: Local processes reading the corpus shards and writing the outputs.
        engine: ``local`` or ``ray``.
        ray_address: With ``engine="ray"``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.
        short_min_words: Benchmark items of this many words up to n-1 are matched whole (0: off).
        quiet: No progress bars.
        allow_task_code: As `decontaminate`.
        embedding_model: With a ``semantic`` rule term: the model, as `decontaminate`'s.

    Returns:
        purify_report.json as an object, plus ``shards`` (written, reused from a killed run).
    """
    from tcqa_data.prep.purify import purify as run

    task_list = _names(tasks) or []
    return run(_paths(corpus), task_list, out, data_files=_data_files(data_files, task_list),  # type: ignore
               splits=_names(splits), rule=rule, ngram=ngram, mode=mode, window=window,
               minimum_slice=minimum_slice, too_dirty_cutoff=too_dirty_cutoff, janitor_exact=janitor_exact,
               text_field=_text_field(preset, text_field), id_field=id_field, on_error=on_error,
               workers=workers, engine=engine, ray_address=ray_address,
               short_min_words=short_min_words or None,
               lm_eval_include=_paths(lm_eval_include), quiet=quiet, allow_task_code=allow_task_code,
               embedding_model=embedding_model)


def clean_vs_full_table(results: EvalResults | Mapping[str, Any], task: str) -> pd.DataFrame:
    """One task's clean vs full vs dirty table from `evaluate`'s results, as a DataFrame.

    Rows are the task's metrics; columns ``clean (n=...)``, ``full (n=...)``, ``dirty (n=...)`` and
    ``clean - full``, each cell the value in percent with its 95% interval, as in report.md. For a
    paper: ``.to_latex()`` or ``.to_markdown()``. ``print`` shows every column (pandas would cut
    the table to the terminal's width, hiding the full and dirty columns).
    """
    import pandas as pd

    from tcqa_data.errors import ConfigError
    from tcqa_data.eval.results import table_rows

    tables = results.get("tasks") or {}
    if task not in tables:
        raise ConfigError(f"no task {task!r} in these results; they hold {sorted(tables)}")
    header, rows = table_rows(tables[task])
    table = pd.DataFrame([r[1:] for r in rows], index=pd.Index([r[0] for r in rows], name=header[0]),
                         columns=header[1:])
    return _whole_table(table)


def _whole_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` whose ``str``/``repr`` is its whole ``to_string()``; any operation on it returns
    a plain DataFrame again."""
    return _whole_table_class()(table)


@functools.cache
def _whole_table_class() -> type[pd.DataFrame]:
    """The DataFrame subclass behind :func:`_whole_table`, made once (pandas is imported lazily)."""
    import pandas as pd

    class WholeTable(pd.DataFrame):
        @property
        def _constructor(self) -> type[pd.DataFrame]:
            return pd.DataFrame

        def __repr__(self) -> str:
            return self.to_string()

        __str__ = __repr__

    return WholeTable
