"""The whole pipeline on a small real input, reduced to one digest per output file.

Used by test_golden_outputs.py to check that a refactor changes no byte of what the four stages
write (index, PREP_DIR, evaluation, analysis). Volatile content is masked before hashing: the
temporary root folder's path, wall-clock timings and dates, and the tool's own version/build
record in manifests. Everything else, Parquet and .npy files included, is hashed as written.
"""

from __future__ import annotations

import hashlib
import json
import re
from itertools import islice
from pathlib import Path

# JSON keys whose values are clocks or host facts, not results; the index manifest's seal (its own
# checksum covers the build times, and "files" lists checksums of files hashed here one by one)
VOLATILE_KEYS = {"seconds", "elapsed", "elapsed_s", "wall_s", "cpu_s", "created", "created_at", "date",
                 "timestamp", "started", "finished", "python", "platform", "host", "torch", "transformers",
                 "numba", "datasets", "build", "timings", "time", "duration_s", "docs_per_s", "rate",
                 "mtime_ns", "manifest_xxh3", "files"}


def _mask(obj):
    if isinstance(obj, dict):
        return {k: ("<volatile>" if k in VOLATILE_KEYS else _mask(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask(v) for v in obj]
    return obj


def file_digest(path: Path, root: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".json", ".jsonl", ".md", ".html", ".yaml", ".txt", ".py"):
        text = data.decode("utf-8").replace(str(root), "<ROOT>")
        if path.suffix == ".json":
            text = json.dumps(_mask(json.loads(text)), sort_keys=True)
        elif path.suffix in (".md", ".html"):
            # reports print timings and rates in prose
            text = re.sub(r"\d+(\.\d+)? ?(s|ms|docs/s|MB/s|minutes?)\b", "<t>", text)
            text = re.sub(r"\d{4}-\d{2}-\d{2}[T ][\d:.]+", "<date>", text)
            text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "<png>", text)
        data = text.encode("utf-8")
    elif path.suffix == ".png":
        return "png"
    return hashlib.sha256(data).hexdigest()


def digests(folder: Path, root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): file_digest(p, root)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_pipeline(root: Path, wiki_sample: Path, mc_taco_dev: Path, squad_validation: Path,
                 model: Path, cli) -> dict[str, str]:
    """index-corpus -> decontaminate -> evaluate (with its analysis) -> analyze, through ``cli``.

    ``cli(*args)`` runs one command and fails the test on a non-zero exit. The caller makes
    ``root`` the working folder: the corpus is named relatively, so the index's doc refs do not
    depend on where the temporary folder lies.
    """
    corpus = root / "corpus.jsonl"
    with open(mc_taco_dev, encoding="utf-8") as fh:
        sentence = next(fh).split("\t")[0]
    with open(squad_validation, encoding="utf-8") as fh:
        squad_rows = [json.loads(line) for line in islice(fh, 60)]
    with open(wiki_sample, encoding="utf-8") as src, open(corpus, "w", encoding="utf-8") as out:
        out.writelines(islice(src, 30))
        out.write(json.dumps({"text": "Copied. " + sentence + " " + squad_rows[0]["context"]}) + "\n")
    squad = root / "squad.jsonl"
    squad.write_text("".join(json.dumps(r) + "\n" for r in squad_rows), encoding="utf-8")
    cli("index-corpus", "corpus.jsonl", "--out", root / "index", "--workers", "1", "--quiet")
    cli("decontaminate", root / "index", "--tasks", "mc_taco,squad_completion", "--out", root / "prep",
        "--data-files", f"mc_taco:validation={mc_taco_dev}",
        "--data-files", f"squad_completion:validation={squad}",
        "--rule", "any-ngram|aligned-field>=0.8", "--quiet")
    cli("evaluate", root / "prep", "--model", model, "--device", "cpu", "--batch-size", "4",
        "--limit-groups", "6", "--out", root / "eval", "--quiet")
    cli("analyze", root / "prep", "--results", root / "eval", "--out", root / "analysis", "--quiet")
    out: dict[str, str] = {}
    for name in ("index", "prep", "eval", "analysis"):
        out.update(digests(root / name, root))
    return out
