"""The same inputs give the same outputs: the whole pipeline against stored fingerprints.

tests/golden/pipeline_digests.json holds one fingerprint per file that index-corpus, decontaminate,
evaluate (with its analysis) and analyze wrote on a small real input (golden_pipeline.py): the
digest of the bytes for the index and PREP_DIR, which every CPU computes exactly, and for the model
outputs (``eval/``, ``analysis/``) the digest of everything but their floats plus the floats,
compared with a tolerance (a model's last float bits differ between CPUs: the digests of 9 files
differed on an AMD EPYC host). A refactor must leave every one unchanged. A change that means to
change an output regenerates the file (``TCQA_UPDATE_GOLDEN=1 pytest tests/test_golden_outputs.py``)
and says why in its commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from eval_fixtures import build_tiny_model, smollm2_gguf
from golden_pipeline import pack, run_pipeline, same_fingerprint, unpack
from typer.testing import CliRunner

from tcqa_data.cli import app

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).parent / "golden" / "pipeline_digests.json"


def _cli(*args) -> None:
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_pipeline_outputs_equal_the_stored_digests(tmp_path, monkeypatch, wiki_sample, mc_taco_dev,
                                                   squad_validation):
    smollm2_gguf()  # the tiny model borrows its tokenizer
    root = tmp_path / "run"
    model = build_tiny_model(root / "model")  # inside root: its path is masked like the rest
    monkeypatch.chdir(root)
    got = run_pipeline(root, wiki_sample, mc_taco_dev, squad_validation, model, _cli)
    if os.environ.get("TCQA_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(pack(got), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = unpack(json.loads(GOLDEN.read_text(encoding="utf-8")))
    assert sorted(got) == sorted(want), {"new": sorted(set(got) - set(want)),
                                         "missing": sorted(set(want) - set(got))}
    changed = {k: why for k in sorted(want) if (why := same_fingerprint(want[k], got[k])) is not None}
    first = dict(list(changed.items())[:20])
    assert not changed, f"{len(changed)} files differ from the stored fingerprints: {first}"


def test_model_numbers_are_compared_with_a_tolerance_and_the_rest_exactly(tmp_path):
    """What another CPU changes (a model float's last bits, a printed digit at a rounding edge) passes;
    a changed word, integer or a float beyond the tolerance does not."""
    from golden_pipeline import model_fingerprint

    root = tmp_path
    (root / "eval").mkdir()

    def fp(name: str, text: str):
        (root / "eval" / name).write_text(text, encoding="utf-8")
        return model_fingerprint(root / "eval" / name, root)

    stored = fp("results.json", json.dumps({"acc": 0.7222222222222222, "docs": 36, "ok": True}))
    assert same_fingerprint(stored, fp("results.json", json.dumps(
        {"acc": 0.7222222222222227, "docs": 36, "ok": True}))) is None
    assert same_fingerprint(stored, fp("results.json", json.dumps({"acc": 0.73, "docs": 36, "ok": True})))
    assert same_fingerprint(stored, fp("results.json", json.dumps({"acc": 0.7222222222222222, "docs": 35,
                                                                   "ok": True})))
    report = fp("report.md", "| full | 72.2 | 36 docs |")
    assert same_fingerprint(report, fp("report.md", "| full | 72.3 | 36 docs |")) is None  # rounding edge
    assert same_fingerprint(report, fp("report.md", "| full | 72.5 | 36 docs |"))
    assert same_fingerprint(report, fp("report.md", "| clean | 72.2 | 36 docs |"))
    assert same_fingerprint(report, fp("report.md", "| full | 72.2 | 37 docs |"))
