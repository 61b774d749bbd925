"""`analyze`: how much of a score is contamination, at every threshold, from one model pass.

``analyze(prep_dir, results)`` reads per-doc model outputs (our ``evaluate`` folder, or
lm-evaluation-harness 0.4 ``--log_samples`` files), matches them to the prepared split, and
writes threshold sweeps with EPG (ConTAM), Llama 2's clean/dirty subsets with Zn, and the
input vs input+label table (lm-eval issue #1056). See docs/ARCHITECTURE.md for the outputs.
"""

from tcqa_data.analysis.run import analyze, analyze_task

__all__ = ["analyze", "analyze_task"]
