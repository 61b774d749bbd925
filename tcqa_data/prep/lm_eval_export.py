"""lm-eval task YAMLs over the prepared Parquet splits, so lm-eval itself can score the clean split.

lm-eval (0.4.x) loads ``dataset_path: parquet`` with ``dataset_kwargs: {data_files: {split: path}}``
through ``datasets.load_dataset``; the rest of the YAML is the task spec's lm-eval vocabulary.
Run them with ``lm_eval --include_path PREP_DIR/<task>/<split>/lm_eval --tasks <name> ...``.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from tcqa_data.io_utils import write_text_atomic
from tcqa_data.prep.taskspec import TaskSpec

# Keys of a TaskSpec that lm-eval's TaskConfig understands (the tcqa-data extensions are dropped).
LM_EVAL_KEYS = ("output_type", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
                "generation_kwargs", "should_decontaminate", "doc_to_decontamination_query",
                "metric_list", "metadata")

# lm-eval registers no `contains` metric (its squad_completion is a Python class), so the export
# ships a tiny process_results module implementing the same scoring.
_CONTAINS_MODULE = '''"""Written by tcqa-data: squad_completion's `contains` metric for lm-eval YAML tasks."""

import re


def process_results(doc, results):
    """1.0 if the stripped target occurs (case-insensitively) in the generation, else 0.0."""
    target = str(doc["value"]).strip()
    generation = results[0]
    return {"contains": float(bool(re.search(re.escape(target), generation, re.IGNORECASE)))}
'''


def lm_eval_task_name(task: str, split: str, which: str) -> str:
    return f"tcqa_{task}_{split}_{which}"


def export_lm_eval(spec: TaskSpec, split: str, role: str, split_dir: str | os.PathLike) -> list[Path]:
    """Write ``lm_eval/<name>.yaml`` for clean.parquet and full.parquet of one split.

    ``role`` is ``validation`` or ``test``: which lm-eval split key the data is served under.
    Paths are absolute because ``datasets`` resolves relative data_files against the caller's cwd.
    """
    split_dir = Path(split_dir).resolve()
    out_dir = split_dir / "lm_eval"
    raw = spec.to_dict()
    uses_contains = any(m.get("metric") == "contains" for m in spec.metric_list)
    written = []
    for which in ("clean", "full"):
        doc: dict = {"task": lm_eval_task_name(spec.task, split, which),
                     "dataset_path": "parquet",
                     "dataset_kwargs": {"data_files": {split: str(split_dir / f"{which}.parquet")}},
                     f"{role}_split": split}
        for key in LM_EVAL_KEYS:
            if key in raw:
                doc[key] = raw[key]
        if uses_contains:
            doc["metric_list"] = [{"metric": "contains", "aggregation": "mean", "higher_is_better": True}]
        text = ("# Written by tcqa-data from task spec " + spec.task + f" ({which} split of {split}).\n"
                + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        if uses_contains:
            # a YAML tag safe_dump cannot emit: lm-eval resolves it relative to this file
            text += "process_results: !function tcqa_contains.process_results\n"
        path = out_dir / f"{doc['task']}.yaml"
        write_text_atomic(path, text)
        written.append(path)
    if uses_contains:
        write_text_atomic(out_dir / "tcqa_contains.py", _CONTAINS_MODULE)
    return written
