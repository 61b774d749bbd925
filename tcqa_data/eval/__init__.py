"""Stage 3: score a model on the prepared full / clean / dirty splits.

``tcqa_data.eval.runner.evaluate`` is the entry point (``run_evaluation``: the pass, nothing
written); ``metrics`` holds the pure metric functions (lm-eval's and CogComp's MC-TACO families,
bootstrap); ``tables`` a task's clean / full / dirty table; ``scoring`` the engines; ``models``
loading; ``results`` the output files; ``score_file`` external MC-TACO predictions. Evaluate then
analyze (``tcqa-data evaluate``) is ``tcqa_data.workflow.evaluate``, above this package.
Submodules import torch lazily from here, so ``import tcqa_data.eval`` stays cheap.
"""
