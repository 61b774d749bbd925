"""The documentation site builds with --strict, and its generated references cannot drift: every
option of every command (read from the Typer app) is in the CLI reference, every public name of
`tcqa_data` in the API reference. Also: the screenshots are the ones scripts/docs_screenshots.py
takes, and the user documents name no issue numbers; BENCHMARKS.md stays a page of today's figures."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module with `mkdocs build --strict` (about 3 CPU-seconds)."""
    if importlib.util.find_spec("mkdocs") is None:
        reason = "needs the docs extra (pip install -e '.[docs]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; .ci/run installs it", pytrace=False)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    bin_dir = str(Path(sys.executable).parent)  # mkdocs-typer2 runs this venv's `typer`
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _text(page: Path) -> str:
    return html.unescape(page.read_text(encoding="utf-8"))


def _commands() -> list[tuple[str, object]]:
    """(command path, click command) of every command and subcommand of the app."""
    from typer.main import get_command

    from tcqa_data.cli import app

    out, todo = [], [("", get_command(app))]
    while todo:
        path, cmd = todo.pop()
        for name, sub in getattr(cmd, "commands", {}).items():
            full = f"{path} {name}".strip()
            out.append((full, sub))
            todo.append((full, sub))
    return out


def test_cli_reference_lists_every_command_and_option(site):
    page = _text(site / "reference" / "cli" / "index.html")
    commands = _commands()
    assert {"index-corpus", "decontaminate", "evaluate", "analyze", "purify"} <= {c for c, _ in commands}
    for path, cmd in commands:
        assert f"tcqa-data {path}" in page, f"`tcqa-data {path}` is not in the CLI reference"
        start = page.index(f"tcqa-data {path}")
        for param in cmd.params:  # type: ignore[attr-defined]
            if getattr(param, "hidden", False):
                assert f"{param.opts[0]} " not in page, f"hidden {param.opts[0]} is in the reference"
                continue
            # an argument shows as its metavar (PREP_DIR: cli/help_format.py's one style)
            names = param.opts if param.param_type_name == "option" else [param.metavar or param.name]
            for name in names:
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", page[start:]), \
                    f"tcqa-data {path}: {name} is not in the CLI reference"


def test_api_reference_documents_every_public_name(site):
    import tcqa_data

    page = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    text = "".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())  # compared without whitespace
    public = [n for n in tcqa_data.__all__ if n not in {"__version__", "FORMAT_VERSION"}]
    assert {"build_index", "decontaminate", "purify", "evaluate", "analyze", "Rule"} <= set(public)
    for name in public:
        obj = getattr(tcqa_data, name)
        anchor = f'id="{obj.__module__}.{obj.__qualname__}"'
        assert anchor in page, f"tcqa_data.{name} ({anchor}) is not in the API reference"
        first_words = "".join(re.sub(r"[`*]", "", obj.__doc__ or "").split()[:6])
        assert first_words in text, f"tcqa_data.{name}'s docstring ({first_words!r}) is not rendered"


def test_screenshots_are_the_scripts_and_small():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from docs_screenshots import REPORTS, SHOTS
    finally:
        sys.path.pop(0)
    pngs = {p.name for p in SHOTS.glob("*.png")}
    assert pngs == {name for name, _, _ in REPORTS}, "files the script does not write"
    reports_page = (ROOT / "docs" / "get-started" / "reports.md").read_text(encoding="utf-8")
    for name in pngs:
        assert (SHOTS / name).stat().st_size < 200_000, f"{name} is large; the script quantizes to 64 colours"
        assert f"screenshots/{name}" in reports_page, f"{name} is not shown on the reports page"


def test_user_documents_name_no_issue_numbers_and_benchmarks_stay_current():
    issue = re.compile(r"\b[Ii]ssues? ?#?\d+|\(#\d+\)|\bh\d\d[a-z]\b")
    for doc in USER_DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            assert not issue.search(line), f"{doc.relative_to(ROOT)}:{n} names an issue: {line.strip()[:80]}"
    bench = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()
    assert len(bench) < 400
    section = ""
    for n, line in enumerate(bench, 1):
        if line.startswith("## "):
            section = line[3:]
        if section == "Summary" or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if cells[0] == "measure":  # a table's header: every table says what reproduces its rows
            assert cells[-1] == "command", f"BENCHMARKS.md:{n}: a table without a command column"
        else:
            assert cells[-1].startswith("`") or cells[-1] == "same", \
                f"BENCHMARKS.md:{n}: a figure without the command that reproduces it"
