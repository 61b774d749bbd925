"""The same inputs give the same bytes: the whole pipeline against digests stored from a5efa79.

tests/golden/pipeline_digests.json holds one digest per file that index-corpus, decontaminate,
evaluate (with its analysis) and analyze wrote on a small real input, from the code before the
package layout moved (issue 29). A refactor must leave every one unchanged. A change that means to
change an output regenerates the file (``TCQA_UPDATE_GOLDEN=1 pytest tests/test_golden_outputs.py``)
and says why in its commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from eval_fixtures import build_tiny_model, smollm2_gguf
from golden_pipeline import run_pipeline
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
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(got) == sorted(want), {"new": sorted(set(got) - set(want)),
                                         "missing": sorted(set(want) - set(got))}
    changed = sorted(k for k in want if got[k] != want[k])
    assert not changed, f"{len(changed)} files differ from the stored digests: {changed[:20]}"
