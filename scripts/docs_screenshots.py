"""Screenshots of the real HTML reports for the documentation site (docs/assets/screenshots/*.png).

Runs the quick start's three commands on the demo corpus with a small seeded sample (unless
``--run`` already holds their outputs), then opens each report in headless Chromium and keeps the
first screen, as a reader sees it on opening the file. The PNGs are reduced to a 64-colour palette
so they stay small in git.

    .venv/bin/python scripts/docs_screenshots.py                  # runs/docs, then the screenshots
    .venv/bin/python scripts/docs_screenshots.py --run runs/quickstart --reuse
    .venv/bin/python scripts/docs_screenshots.py --run runs/docs --reuse --heights   # page heights only

Needs Chromium (``apt-get install -y chromium``) and the benchmark files under ``--data``
(default ../shared/data), as the quick start reads them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "docs" / "assets" / "screenshots"
# (file name, report path relative to the run folder, what it shows)
REPORTS = [
    ("summary.png", "prep/summary.html", "decontaminate's run summary"),
    ("decontaminate-report.png", "prep/mc_taco/test/report.html", "one split's decontamination report"),
    ("evaluate-report.png", "eval/report.html", "evaluate's clean vs full vs dirty report"),
    ("analysis-report.png", "eval/analysis/report.html", "the analysis report's first screen"),
]


def run_pipeline(run: Path, data: Path, sample_groups: int) -> None:
    """The quick start's commands (scripts/quickstart.sh) on a smaller seeded sample."""
    tcqa = [sys.executable, "-m", "tcqa_data"]
    if run.resolve().is_relative_to(ROOT):  # the reports then show paths relative to the checkout
        run = run.resolve().relative_to(ROOT)
    steps = [
        ["index-corpus", "--demo", "--id-field", "title", "--out", str(run / "index"), "--overwrite"],
        ["decontaminate", str(run / "index"), "--tasks", "mc_taco,squad_completion",
         "--splits", "test,validation",
         "--data-files", f"mc_taco:test={data / 'mc_taco' / 'test_9442.tsv'}",
         "--data-files", f"squad_completion:validation={data / 'based_squad' / 'validation.jsonl'}",
         "--out", str(run / "prep")],
        ["evaluate", str(run / "prep"), "--model", "smollm2-135m-gguf", "--sample-groups", str(sample_groups),
         "--sample-seed", "0", "--out", str(run / "eval"), "--quiet"],
    ]
    for step in steps:
        print("+ tcqa-data", " ".join(step), flush=True)
        subprocess.run([*tcqa, *step], check=True, cwd=ROOT)


def screenshot(browser: str, page: Path, png: Path, width: int, height: int) -> None:
    """The first ``width`` x ``height`` pixels of ``page`` in headless Chromium, as a 64-colour PNG
    (maximum coverage keeps a plot's small coloured areas: median cut merged its green into grey)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "shot.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                        # wait for the embedded plots: without it the shot can catch a half-painted page
                        "--virtual-time-budget=10000", f"--screenshot={raw}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        with Image.open(raw) as img:
            img.convert("RGB").quantize(colors=64, method=Image.Quantize.MAXCOVERAGE).save(png, optimize=True)


def page_height(browser: str, page: Path, width: int) -> int:
    """The full height of ``page`` in CSS pixels at ``width``, as opened (every <details> folded).

    A copy of the page next to it (so its relative links and images resolve) records
    ``scrollHeight`` once everything has loaded; Chromium's ``--dump-dom`` prints it back."""
    probe = page.with_name(f".height-probe-{page.name}")
    script = ("<script>addEventListener('load',()=>document.documentElement.setAttribute("
              "'data-height',document.documentElement.scrollHeight))</script>")
    probe.write_text(page.read_text(encoding="utf-8") + script, encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                  f"--user-data-dir={tmp}/profile", f"--window-size={width},900",
                                  "--virtual-time-budget=10000", "--dump-dom", probe.resolve().as_uri()],
                                 check=True, capture_output=True, text=True, timeout=300).stdout
    finally:
        probe.unlink(missing_ok=True)
    found = re.search(r'data-height="(\d+)"', dom)
    if found is None:
        raise RuntimeError(f"{page}: Chromium reported no height")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "docs",
                    help="Run folder (index/, prep/, eval/).")
    ap.add_argument("--reuse", action="store_true", help="Use the reports already in --run; run nothing.")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="Benchmark files (mc_taco/test_9442.tsv, based_squad/validation.jsonl).")
    ap.add_argument("--sample-groups", type=int, default=40,
                    help="evaluate --sample-groups (whole groups; half dirty, so 20 a side: intervals).")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--out", type=Path, default=SHOTS, help="Where the PNGs go.")
    ap.add_argument("--heights", action="store_true",
                    help="Print each report's full height in pixels at --width (folds closed); no PNGs.")
    args = ap.parse_args(argv)

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("Error: no Chromium on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.reuse:
        run_pipeline(args.run, args.data, args.sample_groups)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rel, what in REPORTS:
        page = args.run / rel
        if not page.is_file():
            print(f"Error: {page} is missing ({what}); run without --reuse", file=sys.stderr)
            return 2
        if args.heights:
            print(f"{rel}: {page_height(browser, page, args.width):,} px tall at {args.width} px "
                  f"({page.stat().st_size / 1e3:,.0f} kB)")
            continue
        screenshot(browser, page, args.out / name, args.width, args.height)
        print(f"{args.out / name}: {what} ({(args.out / name).stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
