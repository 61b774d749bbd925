"""The whole pipeline on a small real input, reduced to one fingerprint per output file.

Used by test_golden_outputs.py to check that a refactor changes no byte of what the four stages
write (index, PREP_DIR, evaluation, analysis). Volatile content is masked before hashing: the
temporary root folder's path, wall-clock timings and dates, and the tool's own version/build
record in manifests.

What the index and PREP_DIR hold is computed exactly on every CPU: their files' fingerprints are
digests of the bytes as written (Parquet and .npy included). What ``evaluate`` and ``analyze``
write (``eval/``, ``analysis/``: :data:`MODEL_OUTPUTS`) carries a model's floating-point numbers,
whose last bits differ between CPUs (kernels, threads, SIMD width): their fingerprint is
``{"masked": digest of the file with every float taken out, "numbers": those floats}`` (JSON and
JSONL floats, Parquet float columns, decimal numbers in Markdown, HTML and CSV text), and
:func:`same_fingerprint` compares the numbers with a tolerance (:func:`close`); everything else in
those files (structure, words, integers, booleans) is still compared exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
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


def file_text(path: Path, root: Path) -> str:
    """A text output with its volatile parts masked (the root folder, JSON clocks, report timings)."""
    text = path.read_bytes().decode("utf-8").replace(str(root), "<ROOT>")
    if path.suffix == ".json":
        text = json.dumps(_mask(json.loads(text)), sort_keys=True)
    elif path.suffix in (".md", ".html"):
        # reports print timings and rates in prose
        text = re.sub(r"\d+(\.\d+)? ?(s|ms|docs/s|MB/s|minutes?)\b", "<t>", text)
        text = re.sub(r"\d{4}-\d{2}-\d{2}[T ][\d:.]+", "<date>", text)
        text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "<png>", text)
    return text


def file_digest(path: Path, root: Path) -> str:
    if path.name == "checksums.npy":
        # the index's block checksums cover textstore/meta.json, which records the corpus file's
        # absolute path and mtime (masked there): its count of blocks is compared; every file it
        # covers is compared byte for byte on its own
        import numpy as np

        return f"blocks:{len(np.load(path, allow_pickle=False))}"
    if path.suffix in (".json", ".jsonl", ".md", ".html", ".yaml", ".txt", ".py"):
        data = file_text(path, root).encode("utf-8")
    elif path.suffix == ".png":
        return "png"
    else:
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()


# folders of model outputs (relative to the pipeline's root): compared with a tolerance
MODEL_OUTPUTS = ("eval", "analysis")
REL_TOL = 1e-3  # model floats: relative
ABS_TOL = 1e-6
# a decimal number in text (not inside a word or a hex digest): "72.2", "-0.013", "1.5e-05"
_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")


def _stored(x: float) -> str:
    """A model float as stored: 7 significant digits (far inside ``REL_TOL``; keeps the file small)."""
    return f"{x:.7g}"


def _floats_out(obj, found: list):
    """``obj`` (parsed JSON) with every float replaced by a marker, the floats appended to ``found``."""
    if isinstance(obj, dict):
        return {k: _floats_out(v, found) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_floats_out(v, found) for v in obj]
    if isinstance(obj, float):
        found.append(_stored(obj))
        return "<float>"
    return obj


def _text_numbers(text: str, found: list) -> str:
    def take(m: re.Match) -> str:
        found.append("t:" + m.group(0))
        return "<num>"

    return _DECIMAL.sub(take, text)


def model_fingerprint(path: Path, root: Path) -> dict:
    """``{"masked": sha256, "numbers": [...]}`` of a model-output file (module doc); numbers are
    kept as written (their decimals set the tolerance of text numbers)."""
    numbers: list[str] = []
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        parts = [str(table.schema)]
        for name in table.column_names:
            col = table.column(name)
            if pa.types.is_floating(col.type):
                values = col.to_pylist()
                numbers.extend("nan" if v is None else _stored(float(v)) for v in values)
                parts.append(f"{name}: {len(values)} floats")
            else:
                parts.append(json.dumps(_floats_out(col.to_pylist(), numbers), sort_keys=True, default=str))
        data = "\n".join(parts).encode("utf-8")
    elif path.suffix in (".json", ".jsonl"):
        text = path.read_bytes().decode("utf-8").replace(str(root), "<ROOT>")
        lines = [text] if path.suffix == ".json" else text.splitlines()
        data = "\n".join(json.dumps(_floats_out(_mask(json.loads(x)), numbers), sort_keys=True)
                         for x in lines if x.strip()).encode("utf-8")
    elif path.suffix in (".md", ".html", ".csv", ".txt"):
        text = file_text(path, root)
        data = _text_numbers(text, numbers).encode("utf-8")
    else:
        return {"masked": file_digest(path, root), "numbers": []}
    return {"masked": hashlib.sha256(data).hexdigest(), "numbers": numbers}


def close(want: str, got: str) -> bool:
    """Two numbers of a model-output file agree: within ``REL_TOL``/``ABS_TOL``; a number printed in
    text (``t:`` before it) within one unit of its last printed digit too (a value near a rounding
    edge prints one digit apart on another CPU)."""
    if want == got:
        return True
    text = want.startswith("t:") and got.startswith("t:")
    want, got = want.removeprefix("t:"), got.removeprefix("t:")
    try:
        a, b = float(want), float(got)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    tol = max(ABS_TOL, REL_TOL * max(abs(a), abs(b)))
    printed = re.fullmatch(r"-?\d+\.(\d+)", want) if text else None
    if printed:
        tol = max(tol, 1.0001 * 10.0 ** -len(printed.group(1)))
    return abs(a - b) <= tol


def pack(fingerprints: dict) -> dict:
    """The stored form: each file's numbers as one space-separated string, and a file whose numbers
    equal an earlier file's (the analysis evaluate writes and the one analyze writes) names it."""
    out, seen = {}, {}
    for name in sorted(fingerprints):
        fp = fingerprints[name]
        if isinstance(fp, dict):
            text = " ".join(fp["numbers"])
            same = {"numbers_of": seen[text]} if text in seen else {"numbers": text}
            fp = {"masked": fp["masked"], **same}
            seen.setdefault(text, name)
        out[name] = fp
    return out


def unpack(stored: dict) -> dict:
    """:func:`pack` undone."""
    out = {}
    for name, fp in stored.items():
        if isinstance(fp, dict):
            text = fp["numbers"] if "numbers" in fp else stored[fp["numbers_of"]]["numbers"]
            fp = {"masked": fp["masked"], "numbers": text.split(" ") if text else []}
        out[name] = fp
    return out


def same_fingerprint(want, got) -> str | None:
    """None when two fingerprints agree, else what differs (for the failure message)."""
    if isinstance(want, str) or isinstance(got, str):
        return None if want == got else "digest"
    if want["masked"] != got["masked"]:
        return "text or structure (numbers aside)"
    if len(want["numbers"]) != len(got["numbers"]):
        return f"{len(got['numbers'])} numbers, {len(want['numbers'])} stored"
    for i, (a, b) in enumerate(zip(want["numbers"], got["numbers"], strict=True)):
        if not close(a, b):
            return f"number #{i}: {b}, stored {a}"
    return None


def digests(folder: Path, root: Path) -> dict[str, str | dict]:
    out: dict[str, str | dict] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            rel = p.relative_to(root)
            model = rel.parts[0] in MODEL_OUTPUTS
            out[str(rel)] = model_fingerprint(p, root) if model else file_digest(p, root)
    return out


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
