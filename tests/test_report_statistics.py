"""The statistics the reports print: intervals valid at the sample size (none from 2 groups; at 200
groups the group bootstrap's percentile interval, close to scipy's), corrections across thresholds
named and applied, an AUROC below 0.5 explained, verdicts worded by what the interval supports,
progress totals that the read text cannot pass."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from tcqa_data.analysis.model_side import plain_line
from tcqa_data.analysis.run import threshold_claim
from tcqa_data.decontam.readers.inputs import resolve_inputs, text_progress_total
from tcqa_data.eval import metrics as M
from tcqa_data.eval.results import plot_title, table_figure, table_plot, verdict
from tcqa_data.report_render import percent_ci


def _accuracy_table(right: np.ndarray, clean: np.ndarray, samples: int = 1000) -> dict:
    """summarize() of one doc per group: ``right`` per group, ``clean`` per group."""
    n = len(right)
    stats = M.unit_stats(M.LM_ACC, right.astype(int), np.ones(n, dtype=int), np.arange(n), n)
    subsets = {"full": np.ones(n, dtype=bool), "clean": clean, "dirty": ~clean}
    return M.summarize(M.LM_ACC, stats, subsets, M.bootstrap_weights(n, samples, seed=5))


def test_two_groups_give_values_and_no_interval():
    # the case: a value from 2 groups printed with an interval that excluded it
    out = _accuracy_table(np.array([1, 0]), np.array([True, False]))
    for sub in ("full", "clean", "dirty", "clean_minus_full"):
        m = out[sub]
        assert m["value"] is not None and m["ci95"] == [None, None], (sub, m)
        assert m["note"].startswith("too few groups"), (sub, m)
    assert out["full"]["value"] == pytest.approx(0.5)
    assert percent_ci(out["full"]) == "50.0 (too few groups: 2)"
    assert "[" not in percent_ci(out["clean_minus_full"], signed=True)


def test_two_hundred_groups_give_the_percentile_interval_around_the_estimate():
    rng = np.random.default_rng(3)
    right = (rng.random(200) < 0.7).astype(int)
    clean = np.arange(200) < 120
    out = _accuracy_table(right, clean, samples=2000)
    for sub in ("full", "clean", "dirty", "clean_minus_full"):
        m = out[sub]
        lo, hi = m["ci95"]
        assert lo < m["value"] < hi and "note" not in m, (sub, m)
    # the group bootstrap of a mean of 200 groups agrees with scipy's percentile bootstrap
    from scipy.stats import bootstrap

    ref = bootstrap((right.astype(float),), np.mean, n_resamples=4000, method="percentile",
                    random_state=np.random.default_rng(9)).confidence_interval
    assert out["full"]["ci95"][0] == pytest.approx(ref.low, abs=0.02)
    assert out["full"]["ci95"][1] == pytest.approx(ref.high, abs=0.02)
    # a subset with 80 groups has an interval, one under the minimum does not
    few = _accuracy_table(right[:30], np.arange(30) < M.MIN_GROUPS_FOR_INTERVAL + 5)
    assert few["clean"]["ci95"][0] is not None
    assert few["dirty"]["ci95"] == [None, None] and few["clean_minus_full"]["ci95"] == [None, None]


def test_an_interval_that_leaves_out_its_estimate_or_has_no_width_says_why():
    skewed = M.estimate(0.5, np.linspace(0.6, 0.9, 101), groups=50)
    assert not skewed["ci95"][0] <= 0.5 <= skewed["ci95"][1]
    assert "outside" in skewed["note"] and "skewed" in percent_ci(skewed)
    flat = M.estimate(0.875, np.full(100, 0.875), groups=50)
    assert flat["ci95"] == [0.875, 0.875] and "same value" in percent_ci(flat)


def _sweep_entry(pvalues: list[float]) -> dict:
    epg = [{"value": 0.05, "ci95": [0.01, 0.09], "p": p} for p in pvalues]
    epg.append({"value": 0.2, "ci95": [None, None], "note": M.too_few_groups(3)})  # not tested
    return {"sweeps": {"ngram_fraction": {"thresholds": [i / 10 for i in range(len(epg))],
                                          "metrics": {"m": {"epg": epg}}}}}


def test_claims_across_thresholds_carry_benjamini_hochberg():
    # ten thresholds, four with p < 0.05: Benjamini-Hochberg keeps only the first
    # (p_(i) * 10 / i: 0.01, 0.15, 0.13, 0.11, ... none of the others <= 0.05)
    p = [0.001, 0.03, 0.04, 0.045, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    claim = threshold_claim(_sweep_entry(p), "m", model=False)
    assert "Benjamini-Hochberg" in claim and "1 of 10 score thresholds" in claim, claim
    assert "ngram_fraction >= 0:" in claim and "ngram_fraction >= 0.1:" not in claim
    # evenly small p-values all survive (p_(i) * m / i <= 0.05 for every i)
    claim = threshold_claim(_sweep_entry([0.01, 0.02, 0.03, 0.04]), "m", model=False)
    assert "4 of 4 score thresholds" in claim
    assert threshold_claim(_sweep_entry([]), "m", model=False) is None  # nothing had enough groups


def test_bootstrap_p_value_is_two_sided_and_never_zero():
    assert M.bootstrap_p(np.linspace(0.1, 1.0, 999)) == pytest.approx(2 / 1000)
    assert M.bootstrap_p(np.linspace(-1, 1, 1001)) == pytest.approx(1.0)


def _agreement(value: float, ci: list[float]) -> dict:
    return {"model:query:min_k_pp_20": {"auroc": {"dirty": {"value": value, "ci95": ci}}}}


def test_an_auroc_below_one_half_is_explained():
    low = plain_line(_agreement(0.26, [0.12, 0.41]))
    assert "less familiar" in low and "no sign of memorization" in low
    chance = plain_line(_agreement(0.45, [0.3, 0.6]))
    assert "within chance" in chance
    high = plain_line(_agreement(0.8, [0.7, 0.9]))
    assert "strong signs" in high


def _table(clean: tuple, full: tuple, dirty_groups: int, diff: tuple, groups: int = 100) -> dict:
    def m(v):
        return {"value": v[0], "ci95": list(v[1:]) if len(v) == 3 else [None, None],
                **({"note": M.too_few_groups(dirty_groups)} if len(v) == 1 else {})}
    return {"subsets": {"clean": {"groups": groups - dirty_groups, "docs": groups - dirty_groups,
                                  "metrics": {"acc": m(clean)}},
                        "full": {"groups": groups, "docs": groups, "metrics": {"acc": m(full)}},
                        "dirty": {"groups": dirty_groups, "docs": dirty_groups,
                                  "metrics": {"acc": m((0.9,))}}},
            "clean_minus_full": {"acc": m(diff)}}


def test_verdict_says_only_what_the_interval_supports():
    inflated = verdict(_table((0.6, 0.5, 0.7), (0.7, 0.6, 0.8), 40, (-0.1, -0.15, -0.05)))
    assert inflated.startswith("Contamination inflates acc") and "40 of 100 groups (40.0%)" in inflated
    none = verdict(_table((0.6, 0.5, 0.7), (0.61, 0.5, 0.7), 30, (-0.01, -0.04, 0.02)))
    assert none.startswith("No measurable effect") and "contains 0" in none
    few = verdict(_table((0.6, 0.5, 0.7), (0.65, 0.55, 0.75), 2, (-0.05,)))
    assert "too few groups" in few and "inflates" not in few and "[" not in few
    only = {"value": 0.5, "ci95": [0.4, 0.6]}
    clean_only = {"subsets": {"clean": {"groups": 30, "docs": 30, "metrics": {"acc": only}}}}
    assert "cannot say" in verdict(clean_only)


def test_a_clean_only_plot_names_only_clean():
    clean_only = {"t": {"subsets": {"clean": {"groups": 30, "docs": 30, "metrics": {
        "a very long metric name/acc": {"value": 0.5, "ci95": [0.4, 0.6]}}}}}}
    title = plot_title(clean_only, "model")
    assert "clean" in title and "full" not in title and "dirty" not in title
    png = table_plot(clean_only, title)
    assert png.startswith(b"\x89PNG")


def test_the_plot_draws_an_error_bar_only_where_there_is_an_interval():
    # too few groups: the bar alone (a zero-length error bar would read as a [v, v] interval)
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    few = _accuracy_table(np.array([1, 0]), np.array([True, False]))
    many = _accuracy_table(np.arange(200) % 3 == 0, np.arange(200) % 2 == 0)
    tables = {name: {"subsets": {s: {"groups": 1, "docs": 1, "metrics": {"acc": out[s]}}
                                 for s in ("clean", "full", "dirty")}}
              for name, out in (("few", few), ("many", many))}
    fig = table_figure(tables, plot_title(tables, "t"))
    try:
        ax = fig.axes[0]
        bars = [c for c in ax.containers if not isinstance(c, ErrorbarContainer)]
        errs = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 3 and all(len(b) == 2 for b in bars)  # a bar per subset and task
        assert len(errs) == 3  # one error bar per subset: the 200-group task's
        for err in errs:
            (segments,) = [c.get_segments() for c in err.lines[2]]
            assert len(segments) == 1
            (x, lo), (_, hi) = segments[0]
            assert x > 0.5 and lo < hi  # at the second task, a real interval
    finally:
        plt.close(fig)


def test_progress_total_of_compressed_text_is_unknown(tmp_path):
    plain = tmp_path / "a.jsonl"
    docs = [json.dumps({"text": "word " * 200}) + "\n" for _ in range(50)]
    plain.write_text("".join(docs))
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(docs).encode()))
    text_chars = sum(len(json.loads(d)["text"]) for d in docs)
    plain_in = resolve_inputs([str(plain)])
    total = text_progress_total(plain_in)
    assert total == plain.stat().st_size and text_chars <= total  # the bar cannot pass 100%
    both = resolve_inputs([str(plain), str(packed)])
    assert packed.stat().st_size < text_chars  # a total in file bytes would run past 100%
    assert text_progress_total(both) is None


def test_indexing_a_compressed_corpus_never_reports_past_100_percent(tmp_path, capsys, monkeypatch):
    from tcqa_data.decontam.build.index import build_index

    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    docs = "".join(json.dumps({"text": f"doc {i} " + "the river floods every spring " * 40}) + "\n"
                   for i in range(300))
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(docs.encode()))
    build_index([str(tmp_path / "c.jsonl.gz")], tmp_path / "idx", workers=1, minhash=False, text_store="none")
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[progress] indexing")]
    shares = [int(p) for x in lines for p in re.findall(r"(\d+)%", x)]
    assert shares and max(shares) == 100 and lines[-1].endswith("done"), lines


def _metrics_table(diffs: dict[str, tuple], dirty_groups: int = 64, groups: int = 128) -> dict:
    """A clean / full / dirty table with one entry per metric: clean - full = diffs[metric]
    (value, low, high), the clean and full values around it."""
    def m(v, lo=None, hi=None):
        return {"value": v, "ci95": [lo, hi]}
    return {"subsets": {"clean": {"groups": groups - dirty_groups, "docs": groups - dirty_groups,
                                  "metrics": {k: m(0.5 + d[0]) for k, d in diffs.items()}},
                        "full": {"groups": groups, "docs": groups, "metrics": {k: m(0.5) for k in diffs}},
                        "dirty": {"groups": dirty_groups, "docs": dirty_groups,
                                  "metrics": {k: m(0.5 - d[0]) for k, d in diffs.items()}}},
            "clean_minus_full": {k: m(*d) for k, d in diffs.items()}}


def test_the_verdict_names_every_metric_whose_interval_excludes_0_with_its_sign():
    # the quick start's MC-TACO: official/strict_acc inflated, the other three within chance, and one
    # metric the dirty groups score lower on
    table = _metrics_table({"lm_eval/acc": (-0.016, -0.063, 0.031), "lm_eval/f1": (0.053, -0.005, 0.109),
                            "official/strict_acc": (-0.070, -0.142, -0.008),
                            "official/f1": (0.05, 0.01, 0.09)})
    text = verdict(table)
    assert "Contamination inflates official/strict_acc" in text and "-7.0 [-14.2, -0.8]" in text
    assert "lower than the clean ones on official/f1" in text and "+5.0 [+1.0, +9.0]" in text
    effect, _, rest = text.partition("No measurable effect")
    assert "official/strict_acc" in effect and "official/f1" in effect
    assert "lm_eval/acc (-1.6 [-6.3, +3.1])" in rest and "lm_eval/f1 (+5.3 [-0.5, +10.9])" in rest
    assert "official/" not in rest.split(":")[0]  # the metrics that differ are not called "no effect"
    assert text.endswith("64 of 128 groups (50.0%) are dirty.")
    # restricted to metrics within chance: no effect is claimed
    within = verdict(table, ["lm_eval/acc", "lm_eval/f1"])
    assert within.startswith("No measurable effect") and "inflates" not in within
    # one metric keeps its one sentence
    assert verdict(table, ["official/strict_acc"]).startswith("Contamination inflates official/strict_acc")


def test_an_auroc_that_prints_as_0_50_is_at_chance_not_below_it():
    for value in (0.5, 0.497, 0.503):
        line = plain_line(_agreement(value, [0.4, 0.6]))
        assert "AUROC 0.50 [0.40, 0.60]" in line and "at chance" in line and "below 0.5" not in line
    below = plain_line(_agreement(0.494, [0.4, 0.6]))
    assert "AUROC 0.49" in below and "below 0.5, within chance" in below
    assert "chance" not in plain_line(_agreement(0.55, [0.45, 0.65]))


def test_the_printed_report_is_text_without_markup():
    from tcqa_data.report_render import Bullets, Code, Details, Heading, Link, Paragraph, Table, to_text

    text = to_text([Heading(2, "mc_taco (test)"), Paragraph(["rule ", Code("any-ngram"), "."]),
                    Table(["metric", "clean"], [["lm_eval/acc", "56.7"], ["official/strict_acc", "9.4"]]),
                    Details("findings", [Bullets(["one", "two"]),
                                         Paragraph(["see ", Link("the report", "analysis/report.html")])])])
    assert "<" not in text and "|" not in text and "**" not in text
    lines = text.splitlines()
    # columns aligned: names padded to the longest, numbers right-aligned under their header
    assert "metric" + " " * 15 + "clean" in lines and "official/strict_acc" + " " * 4 + "9.4" in lines
    assert "findings:" in lines and "  - two" in lines and "  see the report (analysis/report.html)" in lines


def test_printed_clean_vs_full_table_shows_every_column_on_a_narrow_terminal():
    import pandas as pd

    from tcqa_data.api import clean_vs_full_table

    results = {"tasks": {"mc_taco": _table((0.6, 0.5, 0.7), (0.7, 0.6, 0.8), 40, (-0.1, -0.15, -0.05))}}
    table = clean_vs_full_table(results, "mc_taco")
    with pd.option_context("display.width", 40, "display.max_columns", 2):
        printed = str(table)
    assert "..." not in printed and "columns]" not in printed
    for column in table.columns:
        assert column in printed
    assert "-10.0 [-15.0, -5.0]" in printed
    assert type(table.head(1)) is pd.DataFrame  # operations give a plain DataFrame
