"""Benchmark the budgeted template renderer on the whole MC-TACO test split (9,442 docs).

Measured: rendering every doc's decontamination query (what decontaminate always did), and every
template of the task on every doc (what decontaminate now does: prompt, target and query each
checked in the sandbox), through ``tcqa_data.prep.templates.render`` with its budgets (deadline,
loop, call-depth and size checks in the sandbox's hooks, streamed output).
Baseline in the same run: the same templates in Jinja's plain ``ImmutableSandboxedEnvironment``
with lm-eval's settings (the renderer before budgets), rendered with ``Template.render``.
Target: the budgets cost at most 1.5x the baseline per render (a render is tens of microseconds,
against seconds for the n-gram scoring of the same split).

    nice .venv/bin/python scripts/bench_templates.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec
    from tcqa_data.prep.templates import render

    spec = TaskSpec.builtin("mc_taco")
    docs = load_split(spec, "test", DATA / "mc_taco" / "test_9442.tsv").docs()
    templates = spec._templates()
    plain = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined,
                                          keep_trailing_newline=True)
    compiled = {name: plain.from_string(t) for name, t in templates.items()}
    query = templates["doc_to_decontamination_query"]

    # same texts, or the comparison means nothing
    assert all(render(t, d, where="t") == compiled[n].render(**d)
               for d in docs[:200] for n, t in templates.items())
    rows = []
    cases = (("query only", ["doc_to_decontamination_query"]), ("all templates", list(templates)))
    for label, names in cases:
        base = best(lambda names=names: [compiled[n].render(**d) for d in docs for n in names], args.repeat)
        budgeted = best(lambda names=names: [render(templates[n], d, where="t") for d in docs for n in names],
                        args.repeat)
        rows.append((label, base, budgeted))
    print(f"MC-TACO test, {len(docs):,} docs; query template {query!r}; best of {args.repeat}")
    print(f"{'renders':<15}{'baseline s':>12}{'budgeted s':>12}{'ratio':>8}{'us/render':>11}")
    for label, base, budgeted in rows:
        n = len(docs) * (1 if label == "query only" else len(templates))
        print(f"{label:<15}{base:>12.3f}{budgeted:>12.3f}{budgeted / base:>8.2f}{budgeted / n * 1e6:>11.1f}")
    worst = max(b / a for _, a, b in rows)
    print(f"target <= 1.5x: {'met' if worst <= 1.5 else 'MISSED'} ({worst:.2f}x)")


if __name__ == "__main__":
    main()
