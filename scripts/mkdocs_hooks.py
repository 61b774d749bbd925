"""MkDocs hooks (mkdocs.yml `hooks:`): fixes to the generated CLI reference (docs/reference/cli.md).

mkdocs-typer2 renders Typer's own `utils docs` Markdown to HTML and inserts it into the page, where
the page's inline processors run over it again: a usage line such as
`tcqa-data decontaminate [OPTIONS] [index_dir]` then reads as a Markdown reference link, which
mkdocs-autorefs reports as a broken cross-reference, and the console fence (rendered without the
fenced-code extension) keeps its info string; the metavars Typer writes (`--out <path>`) are read
as HTML tags and vanish. All are put back as the literal text here.
"""

from __future__ import annotations

import re
from typing import Any

AUTOREF = re.compile(r"<autoref (?P<attrs>[^>]*?)>(?P<title>.*?)</autoref>", flags=re.DOTALL)
IDENTIFIER = re.compile(r'identifier="(?P<id>[^"]*)"')
# Typer's metavars: <path>, <str>, <int>, <float>, <list[str]>, ... (no attributes: not an SVG <path d=...>)
METAVAR = re.compile(r"<(?P<name>(?:path|str|int|float|bool|text|list\[\w+\]))>")


def _literal(match: re.Match[str]) -> str:
    ident = IDENTIFIER.search(match["attrs"])
    return f"[{match['title']}] [{ident['id'] if ident else ''}]"


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != "reference/cli.md":
        return html
    html = AUTOREF.sub(_literal, html).replace("<code>console\n$ ", "<code>$ ")
    return METAVAR.sub(r"&lt;\g<name>&gt;", html)
