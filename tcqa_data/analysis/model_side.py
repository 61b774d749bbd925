"""The model side held against the corpus side: do the docs the corpus flags also look memorized?

Input: per doc, evaluate's memorization scores (``samples.jsonl``'s ``memorization``: ``{TEXT:
{SCORE: value}}``, higher = more likely seen; ``tcqa_data.eval.memorization``) and the corpus
evidence of contamination.parquet. Output, per model score (``model:TEXT:SCORE``):

- AUROC of the model score for corpus-dirty (positive) vs corpus-clean docs, for each corpus flag
  (the prepared split's ``dirty``; the rule's per-doc ``doc_dirty``): 0.5 = the model cannot tell
  them apart, above = the flagged docs look more memorized;
- Spearman rank correlation with each corpus score, for the scores of the query (whose text the
  corpus scores are of; a null corpus score, no evidence, ranks lowest as in the sweeps);

each with a 95% percentile interval from the analysis's group bootstrap (``metrics.bootstrap_weights``,
its seed): a resample's group counts weight the docs, AUROC and Spearman are computed on the
weighted (replicated) docs. Both are vectorized over resamples; the point values are sklearn's
``roc_auc_score`` and scipy's ``spearmanr`` (tests check the weighted forms against both).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from tcqa_data.eval import metrics as M

PREFIX = "model:"
# the per-doc headline evaluate writes (memorization.headline: {"score", "name"}; eval.memorization.
# add_headline), named in the plain-words line; samples without one: Min-K%++ (k=20%) of the query
HEADLINE_NAME = f"{PREFIX}headline:score"
HEADLINE = "query", "min_k_pp_20"
# fewer dirty (or clean) question groups than this: the value is given, no interval (it would be noise);
# an AUROC ranks every dirty doc against every clean one, so fewer groups per class suffice than for a mean
MIN_GROUPS_FOR_INTERVAL = 10
# resamples handled at once ([chunk, docs] float64 arrays)
CHUNK = 200
ABSENT = ("the model side is absent: these samples hold no token log-probabilities; run `tcqa-data "
          "evaluate PREP_DIR --model MODEL` for per-doc memorization scores (Min-K%++, Min-K%, zlib, loss)")


def score_label(name: str) -> str:
    """'model:query:min_k_pp_20' -> 'Min-K%++ (k=20%) of query'."""
    _, text, score = name.split(":", 2)
    if name == HEADLINE_NAME:
        return "headline score (Min-K%++ k=20% of the query and its fields, ranks combined over contexts)"
    if score.startswith("min_k_pp_"):
        what = f"Min-K%++ (k={score.rsplit('_', 1)[1]}%)"
    elif score.startswith("min_k_"):
        what = f"Min-K% (k={score.rsplit('_', 1)[1]}%)"
    else:
        what = {"loss": "negated loss", "zlib": "zlib ratio", "dc_pdd": "DC-PDD",
                "reference_loss_ratio": "reference-model loss ratio"}.get(score, score)
    return f"{what} of {text}"


def model_scores(per_doc: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """``model:TEXT:SCORE`` -> per-doc values (NaN where missing), the headline first
    (``model:headline:score``); {} when no doc has scores."""
    names: list[tuple[str, str]] = []
    out = {}
    if any("headline" in (o.get("memorization") or {}) for o in per_doc):
        v = [((o.get("memorization") or {}).get("headline") or {}).get("score") for o in per_doc]
        out[HEADLINE_NAME] = np.array([np.nan if x is None else float(x) for x in v])
    for o in per_doc:
        for text, scores in (o.get("memorization") or {}).items():
            if text == "headline":
                continue
            for s in scores:
                if (text, s) not in names:
                    names.append((text, s))
    for text, s in names:
        v = [((o.get("memorization") or {}).get(text) or {}).get(s) for o in per_doc]
        out[f"{PREFIX}{text}:{s}"] = np.array([np.nan if x is None else float(x) for x in v])
    return out


# ---- weighted AUROC and Spearman, vectorized over resamples -----------------------------------
def _tie_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort order of ``x``, and per sorted position its tie block's [start, end)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    new = np.r_[True, xs[1:] != xs[:-1]] if len(xs) else np.zeros(0, dtype=bool)
    start = np.flatnonzero(new)
    block = np.cumsum(new) - 1
    end = np.r_[start[1:], len(xs)]
    return order, start[block], end[block]


def _cum(w: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((len(w), 1)), np.cumsum(w, axis=1)], axis=1)


def weighted_auc(x: np.ndarray, positive: np.ndarray, w: np.ndarray) -> np.ndarray:
    """AUROC of ``x`` for ``positive`` per row of doc weights ``w`` [B, N] (ties count half, as the
    trapezoid of sklearn's curve); NaN where a row weighs no positive or no negative doc."""
    order, s, e = _tie_blocks(x)
    pos = positive[order]
    wp, wn = w[:, order] * pos, w[:, order] * ~pos
    cn = _cum(wn)
    num = (wp * (cn[:, s] + 0.5 * (cn[:, e] - cn[:, s]))).sum(1)
    den = wp.sum(1) * wn.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def weighted_ranks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mid-ranks of ``x`` among the docs replicated by the counts ``w`` [B, N], per row."""
    order, s, e = _tie_blocks(x)
    c = _cum(w[:, order])
    out = np.empty_like(w)
    out[:, order] = c[:, s] + (c[:, e] - c[:, s] + 1) / 2
    return out


def weighted_pearson(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    W = w.sum(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ma, mb = (w * a).sum(1, keepdims=True) / W, (w * b).sum(1, keepdims=True) / W
        da, db = a - ma, b - mb
        cov = (w * da * db).sum(1)
        return cov / np.sqrt((w * da * da).sum(1) * (w * db * db).sum(1))


# ---- the agreement tables ---------------------------------------------------------------------
def _ci(point: float | None, boot: np.ndarray, enough: bool, why: str) -> dict[str, Any]:
    if point is None or not np.isfinite(point):
        return {"value": None, "ci95": [None, None], "note": why or "undefined"}
    if enough:  # the caller counted the groups: the interval, with a note where it is odd
        return M.estimate(float(point), boot, M.MIN_GROUPS_FOR_INTERVAL)
    return {"value": float(point), "ci95": [None, None], "note": why}


def agreement(models: dict[str, np.ndarray], flags: dict[str, np.ndarray], corpus: dict[str, np.ndarray],
              units: np.ndarray, n_units: int, weights: np.ndarray) -> dict[str, Any]:
    """Per model score: ``auroc`` per corpus flag and ``spearman`` per corpus score, each
    ``{value, ci95[, note]}`` (+ docs / groups counted for the flags)."""
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    corpus = {k: np.where(np.isfinite(v), v, -np.inf) for k, v in corpus.items()}
    out: dict[str, Any] = {}
    boots: dict[tuple[str, str, str], list[np.ndarray]] = {}
    for name, x in models.items():
        ok = np.isfinite(x)
        entry: dict[str, Any] = {"docs": int(ok.sum()), "auroc": {}, "spearman": {}}
        for fname, f in flags.items():
            f = f.astype(bool)
            dirty_groups = len(np.unique(units[ok & f]))
            clean_groups = len(np.unique(units[ok & ~f]))
            entry["auroc"][fname] = {"dirty_docs": int((ok & f).sum()), "clean_docs": int((ok & ~f).sum()),
                                     "dirty_groups": dirty_groups, "clean_groups": clean_groups}
        out[name] = entry
    # one pass over resample chunks: each variable's weighted ranks computed once per chunk and mask
    for lo in range(0, len(weights), CHUNK):
        w_all = weights[lo:lo + CHUNK][:, units]
        ranks: dict[tuple[str, bytes], np.ndarray] = {}

        def rank(key: str, v: np.ndarray, ok: np.ndarray, w: np.ndarray,
                 ranks: dict[tuple[str, bytes], np.ndarray] = ranks) -> np.ndarray:
            k = (key, hashlib.blake2b(ok.tobytes(), digest_size=8).digest())
            if k not in ranks:
                ranks[k] = weighted_ranks(v[ok], w)
            return ranks[k]

        for name, x in models.items():
            ok = np.isfinite(x)
            w = w_all[:, ok]
            for fname, f in flags.items():
                boots.setdefault((name, "auroc", fname), []).append(
                    weighted_auc(x[ok], f[ok].astype(bool), w))
            rx = rank(name, x, ok, w)
            for cname, c in corpus.items():
                boots.setdefault((name, "spearman", cname), []).append(
                    weighted_pearson(rx, rank(cname, c, ok, w), w))
    for name, x in models.items():
        ok = np.isfinite(x)
        entry = out[name]
        for fname, f in flags.items():
            f = f.astype(bool)[ok]
            n = entry["auroc"][fname]
            point = float(roc_auc_score(f, x[ok])) if 0 < f.sum() < len(f) else None
            few = min(n["dirty_groups"], n["clean_groups"])
            why = "" if few >= MIN_GROUPS_FOR_INTERVAL else (
                f"too few groups for an interval ({n['dirty_groups']} dirty, {n['clean_groups']} clean; "
                f"at least {MIN_GROUPS_FOR_INTERVAL} of each needed)")
            if point is None:
                why = "no corpus-dirty docs" if not f.any() else "no corpus-clean docs"
            n.update(_ci(point, np.concatenate(boots[(name, "auroc", fname)]), not why, why))
        for cname, c in corpus.items():
            cv = c[ok]
            point = None
            if ok.sum() > 2 and np.ptp(x[ok]) > 0 and np.ptp(cv) > 0:
                point = float(spearmanr(x[ok], cv).statistic)
            groups = len(np.unique(units[ok]))
            why = "" if groups >= MIN_GROUPS_FOR_INTERVAL else \
                f"too few groups for an interval ({groups}; at least {MIN_GROUPS_FOR_INTERVAL} needed)"
            if point is None:
                why = "a constant score: no rank correlation"
            entry["spearman"][cname] = _ci(point, np.concatenate(boots[(name, "spearman", cname)]),
                                           not why, why)
    return out


def curves(x: np.ndarray, dirty: np.ndarray, bins: int = 20) -> dict[str, Any]:
    """ROC curve points and the histogram of dirty vs clean docs of one model score (the report's
    plots; kept in analysis.json so they can be redrawn)."""
    from sklearn.metrics import roc_curve

    ok = np.isfinite(x)
    x, dirty = x[ok], dirty[ok].astype(bool)
    out: dict[str, Any] = {}
    if 0 < dirty.sum() < len(dirty):
        fpr, tpr, _ = roc_curve(dirty, x)
        out["roc"] = {"fpr": [float(v) for v in fpr], "tpr": [float(v) for v in tpr]}
    if len(x):
        edges = np.histogram_bin_edges(x, bins=bins)
        out["histogram"] = {"edges": [float(v) for v in edges],
                            "dirty": [int(v) for v in np.histogram(x[dirty], edges)[0]],
                            "clean": [int(v) for v in np.histogram(x[~dirty], edges)[0]]}
    return out


def plain_line(agree: dict[str, Any], flag: str = "dirty") -> str:
    """The report's one line on the headline score against the prepared split."""
    name = HEADLINE_NAME if HEADLINE_NAME in agree else f"{PREFIX}{HEADLINE[0]}:{HEADLINE[1]}"
    if name not in agree:
        name = next(iter(agree))
    a = agree[name]["auroc"][flag]
    label = score_label(name)
    if a["value"] is None:
        return f"{label}: no AUROC against the corpus flags ({a.get('note')})."
    lo, hi = a["ci95"]
    if lo is None:
        return (f"{label} separates corpus-dirty from clean docs with AUROC {a['value']:.2f}, but "
                f"{a['note']}: no conclusion on memorization.")
    head = f"{label} separates corpus-dirty from clean docs with AUROC {a['value']:.2f} [{lo:.2f}, {hi:.2f}]"
    if lo > 0.5:
        strength = "weak" if a["value"] < 0.6 else ("moderate" if a["value"] < 0.7 else "strong")
        return f"{head}: the model shows {strength} signs of having memorized the flagged docs."
    if hi < 0.5:
        return (f"{head}: the flagged docs look less familiar to the model than the clean ones. An AUROC "
                "below 0.5 is no sign of memorization; it usually means the flagged docs differ in kind "
                "(longer or rarer wording, another field or template that the corpus happens to share), "
                "or that the corpus holds them in a form the model did not see in the task's layout.")
    # worded from the value as printed: 0.497 prints as 0.50, which is at chance, not below 0.5
    shown = round(a["value"], 2)
    where = (" (at chance: the flagged docs are no more familiar)" if shown == 0.5 else
             " (below 0.5, within chance: the flagged docs are not more familiar)" if shown < 0.5 else "")
    return f"{head}: no sign that the model memorized the flagged docs more than the others{where}."


def text_contexts(per_doc: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """TEXT -> how many docs' scores were read in the prompt and how many standalone (samples of an
    evaluate without ``memorization_context`` had the standalone definition only)."""
    out: dict[str, dict[str, int]] = {}
    for o in per_doc:
        where = o.get("memorization_context") or {}
        for text in o.get("memorization") or {}:
            if text == "headline":
                continue
            c = out.setdefault(text, {"prompt": 0, "standalone": 0})
            c[where.get(text, "standalone")] += 1
    return out


def context_line(contexts: dict[str, dict[str, int]]) -> str:
    """'query: in the prompt; sentence: in the prompt (9 docs), standalone (1 doc)'."""
    parts = []
    for text, c in contexts.items():
        kinds = [k for k in ("prompt", "standalone") if c[k]]
        label = {"prompt": "in the prompt", "standalone": "standalone"}
        if len(kinds) == 1:
            parts.append(f"{text}: {label[kinds[0]]}")
        else:
            parts.append(f"{text}: " + ", ".join(f"{label[k]} ({c[k]} doc{'s' if c[k] != 1 else ''})"
                                                  for k in kinds))
    return "; ".join(parts)


def model_side(per_doc: list[dict[str, Any]], clean: np.ndarray, cont_flags: dict[str, np.ndarray],
               corpus: dict[str, np.ndarray], units: np.ndarray, n_units: int,
               weights: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(the model scores to sweep, analysis.json's ``model_side``) of one task split."""
    models = model_scores(per_doc)
    if not models:
        return {}, {"absent": ABSENT}
    flags = {"dirty": ~np.asarray(clean, dtype=bool), **cont_flags}
    agree = agreement(models, flags, corpus, units, n_units, weights)
    for name, x in models.items():
        agree[name]["curves"] = curves(x, flags["dirty"])
    return models, {"scores": list(models), "contexts": text_contexts(per_doc),
                    "flags": list(flags), "corpus_scores": list(corpus),
                    "min_groups_for_interval": MIN_GROUPS_FOR_INTERVAL,
                    "agreement": agree, "conclusion": plain_line(agree)}
