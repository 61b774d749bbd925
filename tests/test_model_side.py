"""The model side of the analysis: the weighted AUROC / Spearman of the group bootstrap equal
sklearn's and scipy's on replicated docs, and, on known ground truth, a tiny model fine-tuned on the
prompts of half of a real MC-TACO sample (the benchmark as the task shows it, which the default
in-prompt scores read) ranks those docs above the other half, and `analyze` says so."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from conftest import SHARED_DATA, shared_file
from eval_fixtures import fine_tuned_tiny_model, read_mc_taco, write_task
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from tcqa_data import FORMAT_VERSION
from tcqa_data.analysis.model_side import weighted_auc, weighted_pearson, weighted_ranks
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic
from tcqa_data.prep.prepared import load_task


def test_weighted_auroc_and_spearman_equal_sklearn_and_scipy_on_replicated_docs():
    rng = np.random.default_rng(0)
    n = 60
    x = np.round(rng.normal(size=n), 1)  # ties, as scores of shared texts have
    y = np.round(x + rng.normal(size=n), 1)
    pos = rng.random(n) < 0.4
    w = rng.integers(0, 4, size=(5, n)).astype(float)
    auc = weighted_auc(x, pos, w)
    rho = weighted_pearson(weighted_ranks(x, w), weighted_ranks(y, w), w)
    for b in range(len(w)):
        rep = np.repeat(np.arange(n), w[b].astype(int))  # the resample as docs drawn again
        assert auc[b] == pytest.approx(roc_auc_score(pos[rep], x[rep]))
        assert auc[b] == pytest.approx(roc_auc_score(pos, x, sample_weight=w[b]))
        assert rho[b] == pytest.approx(spearmanr(x[rep], y[rep]).statistic)
    assert np.isnan(weighted_auc(x, np.zeros(n, dtype=bool), w)).all()  # no positive: undefined


# 12 trained and 12 unseen questions (MIN_GROUPS_FOR_INTERVAL = 10 of each give an interval); about
# 30 s of training on a shared CPU
N_GROUPS = 24


def test_memorization_scores_find_the_docs_a_model_was_trained_on(tmp_path):
    shared_file("mc_taco/test_9442.tsv")
    from tcqa_data.workflow import evaluate

    prep = tmp_path / "prep"
    # even groups "dirty": the model is trained on their queries; odd groups are never seen
    write_task(prep, "mc_taco", "test", read_mc_taco(SHARED_DATA / "mc_taco" / "test_9442.tsv", N_GROUPS),
               dirty_every=2)
    data = load_task(prep, "mc_taco", "test")
    dirty = ~np.asarray(data.clean)
    trained = sorted({data.spec.decontamination_query(d) for d, x in zip(data.docs, dirty, strict=True) if x})
    assert len(trained) == N_GROUPS // 2
    # the corpus evidence of this ground truth: the rule flags exactly the trained docs
    write_parquet_atomic(prep / "mc_taco" / "test" / "contamination.parquet", pa.table({
        "doc_id": [int(d["doc_id"]) for d in data.docs], "group_id": [int(d["group_id"]) for d in data.docs],
        "doc_dirty": dirty, "ngram_fraction": dirty.astype(float)}))
    write_json_atomic(prep / "prep_manifest.json",
                      {"format_version": FORMAT_VERSION, "rule": "ngram_fraction >= 1"})
    # contamination as a leaked test set: the model trained on the dirty docs' prompts
    leaked = sorted({data.spec.text(d) for d, x in zip(data.docs, dirty, strict=True) if x})
    model = fine_tuned_tiny_model(tmp_path / "model", leaked)

    res = evaluate(prep, str(model), device="cpu", batch_size=8, output=tmp_path / "eval", quiet=True,
                   bootstrap=200)
    samples = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    for score, least in (("min_k_pp_20", 0.8), ("loss", 0.7), ("min_k_20", 0.7),
                         # zlib divides by the compressed length, which differs between the halves more
                         # than this short training moves the loss: above chance only
                         ("zlib", 0.5)):
        x = [s["memorization"]["query"][score] for s in samples]
        assert roc_auc_score([s["subset"] == "dirty" for s in samples], x) > least, score
    analysis = json.loads((tmp_path / "eval" / "analysis" / "analysis.json").read_text())
    side = analysis["tasks"]["mc_taco"]["model_side"]
    a = side["agreement"]["model:query:min_k_pp_20"]["auroc"]["dirty"]
    assert a["value"] > 0.8 and a["ci95"][0] > 0.5, a
    assert side["agreement"]["model:query:loss"]["spearman"]["ngram_fraction"]["value"] > 0.4
    # every text has its rank correlation, and says which tokens its scores read
    # (a sentence can be shared by trained and unseen questions, so its own value is weaker)
    for text in ("sentence", "question"):
        rho = side["agreement"][f"model:{text}:loss"]["spearman"]["ngram_fraction"]
        assert isinstance(rho["value"], float), (text, rho)
    # the default context (fields): the question also alone; the sentence begins the prompt, so its
    # standalone scores are its in-prompt ones
    assert side["contexts"] == {**dict.fromkeys(("query", "sentence", "question", "sentence@standalone"),
                                                {"prompt": len(samples), "standalone": 0}),
                                "question@standalone": {"prompt": 0, "standalone": len(samples)}}
    assert "model:query:min_k_pp_20" in analysis["tasks"]["mc_taco"]["sweeps"]
    md = (tmp_path / "eval" / "analysis" / "report.md").read_text()
    assert "separates corpus-dirty from clean docs with AUROC" in md
    assert "strong signs of having memorized the flagged docs" in md
    assert (tmp_path / "eval" / "report.md").read_text().count("strong signs of having memorized") == 1
