"""README.md renders as intended under CommonMark (what GitHub uses), stays short, lists the site's
pages, and what it names exists; the install page says how Punkt and the model get there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INSTALL_PAGE = ROOT / "docs" / "get-started" / "install.md"
CLOSING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*$")

# Headings a reader navigates by; each must render as a heading (not inside a code block).
EXPECTED_HEADINGS = [
    (2, "Quick start"),
    (2, "Your corpus, any benchmark"),
    (2, "The pipeline"),
    (2, "Documentation"),
    (2, "Development"),
]
MAX_LINES = 150


@pytest.fixture(scope="module")
def readme() -> tuple[list[str], list]:
    text = README.read_text(encoding="utf-8")
    return text.splitlines(), MarkdownIt("commonmark").parse(text)


def _headings(tokens: list) -> list[tuple[int, str, int]]:
    """(level, inline source text, first line) of every heading."""
    out = []
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            out.append((int(t.tag[1:]), tokens[i + 1].content, t.map[0]))
    return out


def _fences(tokens: list) -> list:
    return [t for t in tokens if t.type == "fence"]


def test_every_code_fence_closes(readme):
    lines, tokens = readme
    fences = _fences(tokens)
    assert fences, "the README shows commands in fenced code blocks"
    for t in fences:
        start, end = t.map
        last = lines[end - 1] if end - 1 < len(lines) else ""
        assert end - 1 > start and CLOSING_FENCE.match(last), (
            f"README.md:{start + 1}: the code block opened here is not closed by a line of only "
            f"backticks (CommonMark runs it on to line {end}: {last!r})")
        for k, line in enumerate(t.content.splitlines()):
            # a line inside the block that starts like its fence was meant to close it, but does not
            assert not line.lstrip().startswith(t.markup), (
                f"README.md:{start + 2 + k}: {line[:40]!r} does not close the code block (text after "
                "the backticks); put the closing fence on a line of its own")


def test_expected_headings_render_as_headings_in_order(readme):
    _, tokens = readme
    found = [(level, text) for level, text, _ in _headings(tokens)]
    positions = []
    for want in EXPECTED_HEADINGS:
        assert want in found, f"heading {want} is missing or rendered as something else; found {found}"
        positions.append(found.index(want))
    assert positions == sorted(positions), "the expected headings are out of order"
    for t in _fences(tokens):
        for level, text in EXPECTED_HEADINGS:
            assert f"{'#' * level} {text}" not in t.content.splitlines(), f"{text!r} is inside a code block"


def test_setup_commands_are_in_a_code_block_of_the_quick_start(readme):
    _, tokens = readme
    heads = _headings(tokens)
    start = next(line for level, text, line in heads if text == "Quick start")
    end = min(line for level, text, line in heads if line > start and level <= 2)
    code = "\n".join(t.content for t in _fences(tokens) if start <= t.map[0] < end)
    for command in ("bash scripts/quickstart.sh", ".venv/bin/python -m pytest -q"):
        assert command in code, f"{command!r} is not in a code block of the quick start"


def test_install_page_says_how_punkt_and_the_model_get_there():
    text = INSTALL_PAGE.read_text(encoding="utf-8")
    start = text.index("## On a fresh machine, offline")
    section = text[start:text.index("\n## ", start + 1)]
    assert "NLTK_DATA" in section and "nltk.downloader punkt_tab" in section
    from tcqa_data.eval.models import PACKAGED_MODELS

    named = set(re.findall(r"--model ([\w.-]+)", section))
    assert named and named <= set(PACKAGED_MODELS), f"short model names {named} are not resolved by the CLI"


def test_readme_is_short_and_lists_every_page_of_the_site(readme):
    lines, _ = readme
    assert len(lines) <= MAX_LINES, f"README.md: {len(lines)} lines, over {MAX_LINES}"
    targets = set(re.findall(r"\]\(([^)\s#]+)", "\n".join(lines)))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages -= {"docs/benchmarks.md"}  # BENCHMARKS.md itself, included into the site
    missing = sorted(pages - targets)
    assert not missing, f"README.md's page list lacks {missing}"


def test_commands_and_local_links_exist(readme):
    lines, tokens = readme
    from typer.main import get_command

    from tcqa_data.cli import app

    commands = set(get_command(app).commands)
    for t in _fences(tokens):
        for cmd in re.findall(r"(?:^|\s)tcqa-data ([a-z][\w-]*)", t.content):
            assert cmd in commands, f"README.md:{t.map[0] + 1}: `tcqa-data {cmd}` is not a command"
    slugs = {re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-") for _, text, _ in _headings(tokens)}
    text = "\n".join(lines)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            assert target[1:] in slugs, f"link {target} points to no heading"
        else:
            assert (README.parent / target.split("#")[0]).exists(), f"link {target} points to no file"
