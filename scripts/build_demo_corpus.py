"""Build the demo corpus shipped inside the package (``tcqa_data/data/demo/wiki_demo.jsonl.zst``).

The demo corpus is what ``tcqa-data index-corpus --demo`` and ``scripts/quickstart.sh`` index when
no corpus is named: a small, real part of the English Wikipedia sample in
``../shared/data/corpus/wiki_sample.jsonl`` (1,411 articles, 20.6 MB; CC BY-SA 3.0 / GFDL) that
still holds every article through which the whole sample contaminates the two built-in benchmarks,
so the demo finds the same dirty MC-TACO and SQuAD docs as the whole sample does. The rest are
clean articles, every ``CLEAN_EVERY``-th of the others in the sample's order.

    .venv/bin/python scripts/build_demo_corpus.py            # rewrite the shipped file
    .venv/bin/python scripts/build_demo_corpus.py --check    # exit 1 if the shipped file differs

Lines are copied byte for byte, in the sample's order, so doc refs (``file:line`` aside) and the
text are the sample's. The output is deterministic: the same sample gives the same lines, and the
same zstandard level and library give the same bytes (``--check`` compares the lines, which do not
depend on the library).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "data" / "corpus" / "wiki_sample.jsonl"
OUT = REPO / "tcqa_data" / "data" / "demo" / "wiki_demo.jsonl.zst"
SAMPLE_SHA256 = "98e6dbb392ef7f579bee43e19b0ba0f293f08b0b95b795922768c49692d0d378"

# Every article of the sample that shares a 13-gram with a built-in benchmark's test docs (any-ngram
# against an index of the whole sample, janitor normalization), or whose window is MinHash's best
# match (similarity >= 0.5) for one of them. Measured with tcqa-data itself on the whole sample:
# MC-TACO test 76/1,332 groups dirty, SQuAD validation 273/10,570.
MC_TACO_ARTICLES = (  # hold MC-TACO test sentences verbatim (520 docs of 76 questions)
    "Albert Einstein", "Alexander the Great", "Albania", "Albert Camus", "Albrecht Dürer",
)
SQUAD_ARTICLES = (
    "Apollo program",  # the SQuAD article Apollo_program: 242 of the 273 dirty questions
    # the other 31: a 13-gram shared with a SQuAD passage or question
    "Ames, Iowa", "Astoria, Oregon", "Apollo 11", "Apollo 1", "Asia", "Politics of Angola",
    "Politics of Antigua and Barbuda", "Politics of Armenia", "Andorra", "Anguilla", "Apollo 8",
    "AppleTalk", "Andersonville, Georgia", "Apostolic succession",
)
MINHASH_ARTICLES = (  # MinHash's best window for some SQuAD docs (not dirty under any-ngram)
    "Aberdeen, South Dakota", "Alameda, California", "Abadan, Iran",
)
CONTAMINATING = MC_TACO_ARTICLES + SQUAD_ARTICLES + MINHASH_ARTICLES
CLEAN_EVERY = 10  # about 140 clean articles: the demo stays near 1 MB compressed
ZSTD_LEVEL = 19


def select_lines(sample: Path) -> list[bytes]:
    """The demo's lines of ``sample``, verbatim and in its order."""
    lines = sample.read_bytes().splitlines(keepends=True)
    titles = [json.loads(line)["title"] for line in lines]
    missing = sorted(set(CONTAMINATING) - set(titles))
    if missing:
        raise SystemExit(f"{sample}: articles {missing} are not in the sample; is it the right file?")
    wanted = set(CONTAMINATING)
    out, others = [], 0
    for line, title in zip(lines, titles, strict=True):
        if title in wanted:
            out.append(line)
        else:
            if others % CLEAN_EVERY == 0:
                out.append(line)
            others += 1
    return out


def compress(lines: list[bytes]) -> bytes:
    import zstandard

    # content size in the frame header, no checksum: fixed bytes for fixed input and level
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True).compress(b"".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=Path, default=SAMPLE, help="the Wikipedia sample (wiki_sample.jsonl)")
    ap.add_argument("--out", type=Path, default=OUT, help="the .jsonl.zst to write")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    if not args.sample.is_file():
        raise SystemExit(f"{args.sample}: no such file (the sample is in ../shared/data/corpus)")
    digest = hashlib.sha256(args.sample.read_bytes()).hexdigest()
    if digest != SAMPLE_SHA256:
        print(f"warning: {args.sample} has sha256 {digest}, not the sample's {SAMPLE_SHA256}",
              file=sys.stderr)
    lines = select_lines(args.sample)
    content = b"".join(lines)
    clean = len(lines) - len(CONTAMINATING)
    summary = (f"{len(lines)} articles ({len(CONTAMINATING)} contaminating, {clean} clean), "
               f"{len(content):,} bytes, content sha256 {hashlib.sha256(content).hexdigest()}")
    if args.check:
        import zstandard

        shipped = zstandard.ZstdDecompressor().decompress(args.out.read_bytes())
        if shipped != content:
            print(f"{args.out} differs from the demo built from {args.sample}", file=sys.stderr)
            return 1
        print(f"{args.out}: same content: {summary}")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = compress(lines)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes): {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
