"""Stage 3: score a model on the prepared full / clean / dirty splits.

``tcqa_data.eval.runner.evaluate`` is the entry point; ``metrics`` holds the pure metric
functions (lm-eval's and CogComp's MC-TACO families, bootstrap); ``scoring`` the engines;
``models`` loading; ``results`` the output files; ``score_file`` external MC-TACO predictions.
Submodules import torch lazily from here, so ``import tcqa_data.eval`` stays cheap.
"""
