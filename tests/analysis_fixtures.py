"""A real prepared folder for the analysis tests: slices of real MC-TACO and SQuAD data
decontaminated against the real wiki sample index (so some groups really are dirty)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path


def mc_taco_slice(src: Path, dst: Path, n_groups: int) -> Path:
    """The first ``n_groups`` whole questions of an official MC-TACO TSV, as a TSV."""
    groups: set[tuple[str, str]] = set()
    lines = []
    with open(src, encoding="utf-8", newline="") as fh:
        for line in fh:
            rec = line.rstrip("\n").split("\t")
            key = (rec[0], rec[1])
            if key not in groups:
                if len(groups) == n_groups:
                    break
                groups.add(key)
            lines.append(line)
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


def squad_slice(src: Path, dst: Path, first: int, count: int, only: Sequence[int] | None = None) -> Path:
    """Lines ``first .. first + count - 1`` (0-based) of the SQuAD JSONL, or the lines ``only``."""
    keep = set(only) if only is not None else set(range(first, first + count))
    with open(src, encoding="utf-8") as fh:
        lines = [line for i, line in enumerate(fh) if i in keep]
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


# dev_3783.tsv: groups 0-4 and 17-21 share sentences with the wiki sample; validation.jsonl from
# line 3821 on is SQuAD's Apollo_program article, which the wiki sample holds
def build_prep(wiki_index: Path, shared: Path, out: Path, mc_groups: int = 24, squad_first: int = 3812,
               squad_docs: int = 16, squad_lines: Sequence[int] | None = None) -> Path:
    from tcqa_data.prep.pipeline import decontaminate

    out.mkdir(parents=True, exist_ok=True)
    data = {"mc_taco": {"validation": mc_taco_slice(shared / "mc_taco" / "dev_3783.tsv", out / "mc.tsv",
                                                     mc_groups)}}
    tasks = ["mc_taco"]
    if squad_docs:
        data["squad_completion"] = {"validation": squad_slice(shared / "based_squad" / "validation.jsonl",
                                                              out / "squad.jsonl", squad_first, squad_docs,
                                                              squad_lines)}
        tasks.append("squad_completion")
    decontaminate(wiki_index, tasks, out / "prep", data_files=data, quiet=True)
    return out / "prep"


def read_tsv_rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
