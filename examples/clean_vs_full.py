"""From a corpus to the clean vs full table, in Python: index, decontaminate, evaluate.

    python examples/clean_vs_full.py [CORPUS ...] [--model NAME] [--data FOLDER] [--out FOLDER]

Without CORPUS it indexes the demo corpus shipped with tcqa-data; the model defaults to the
SmolLM2-135M GGUF file that scripts/install.sh installs; MC-TACO's test file is read from --data.
"""

import argparse
from pathlib import Path

from tcqa_data import build_index, clean_vs_full_table, decontaminate, evaluate

ap = argparse.ArgumentParser()
ap.add_argument("corpus", nargs="*", help="corpus files, globs or folders (default: the demo corpus)")
ap.add_argument("--model", default="smollm2-135m-gguf")
ap.add_argument("--data", type=Path, default=Path("../shared/data"), help="holds mc_taco/test_9442.tsv")
ap.add_argument("--out", type=Path, default=Path("runs/example"))
ap.add_argument("--sample-groups", type=int, default=16)
args = ap.parse_args()

demo = not args.corpus  # the demo corpus: its doc refs are article titles
build_index(args.corpus, out=args.out / "index", demo=demo, id_field="title" if demo else None,
            overwrite=True)
decontaminate(args.out / "index", out=args.out / "prep", tasks="mc_taco",
              data_files={"mc_taco": {"test": args.data / "mc_taco" / "test_9442.tsv"}})
results = evaluate(args.out / "prep", model=args.model, sample_groups=args.sample_groups,
                   out=args.out / "eval")
print(clean_vs_full_table(results, "mc_taco").to_string())
