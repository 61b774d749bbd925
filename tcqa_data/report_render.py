"""One model of a human-readable report, rendered to Markdown and to HTML.

A report is built once as a list of blocks (headings, bullet lists, tables, quotes with highlighted
spans, figures); ``to_markdown`` and ``to_html`` render the same blocks, so the two files can never
drift apart. Figures are drawn only for HTML (Markdown says where the plot is), and lazily, so
rendering Markdown never imports matplotlib.

Inline text is a plain ``str`` or a sequence of ``str`` / ``Code`` / ``Mark`` pieces.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Code:
    """Inline code: backticks in Markdown, <code> in HTML."""
    text: str


@dataclass(frozen=True)
class Mark:
    """Highlighted text (e.g. the words found in the corpus): bold in Markdown, <mark> in HTML."""
    text: str


Inline = Union[str, Sequence[Union[str, Code, Mark]]]  # noqa: UP007 - readable alias at runtime


@dataclass(frozen=True)
class Heading:
    level: int
    text: Inline


@dataclass(frozen=True)
class Paragraph:
    text: Inline


@dataclass(frozen=True)
class Bullets:
    items: Sequence[Inline]


@dataclass(frozen=True)
class Table:
    header: Sequence[Inline]
    rows: Sequence[Sequence[Inline]]
    # "l" or "r" per column (numbers right-aligned); default: first column left, the rest right
    align: Sequence[str] | None = None


@dataclass(frozen=True)
class Quote:
    """A quoted text under an item (a benchmark query with its matched words marked)."""
    text: Inline


@dataclass(frozen=True)
class Preformatted:
    """Fixed-width text kept as is (a plain-text table)."""
    text: str


@dataclass(frozen=True)
class Figure:
    """A plot: ``draw`` returns PNG bytes; called only by the HTML renderer."""
    title: str
    draw: Callable[[], bytes] = field(compare=False)


Block = Union[Heading, Paragraph, Bullets, Table, Quote, Preformatted, Figure]  # noqa: UP007


def highlight(text: str, spans: Sequence[Sequence[int]]) -> list[str | Mark]:
    """``text`` cut into plain and ``Mark`` pieces at character ``spans`` (overlaps merged)."""
    out: list[str | Mark] = []
    pos = 0
    for s, e in sorted((int(a), int(b)) for a, b in spans):
        s = max(s, pos)
        if e <= s:
            continue
        if s > pos:
            out.append(text[pos:s])
        out.append(Mark(text[s:e]))
        pos = e
    if pos < len(text):
        out.append(text[pos:])
    return out


def percent(v: float | None, signed: bool = False) -> str:
    """A share in percent with one decimal, "n/a" for none; ``signed``: a difference in points (+/-)."""
    if v is None:
        return "n/a"
    return f"{v * 100:+.1f}" if signed else f"{v * 100:.1f}"


def percent_ci(m: Mapping[str, Any] | None, signed: bool = False) -> str:
    """A metric entry ``{"value", "ci95"}`` as "value [low, high]" in percent ("n/a" without a value;
    no interval where it is undefined)."""
    if not m or m.get("value") is None:
        return "n/a"
    lo, hi = m.get("ci95") or [None, None]
    ci = f" [{percent(lo, signed)}, {percent(hi, signed)}]" if lo is not None and hi is not None else ""
    return percent(m["value"], signed) + ci


def png_bytes(fig: Any, dpi: int = 80) -> bytes:
    """A matplotlib figure as PNG bytes without Software/date metadata (bytes depend on data only)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


# ---- Markdown --------------------------------------------------------------------------------
def _pieces(text: Inline) -> list[str | Code | Mark]:
    return [text] if isinstance(text, str) else list(text)


def _md_code(s: str) -> str:
    fence = "`"
    while fence in s:
        fence += "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _md_inline(text: Inline, *, cell: bool = False) -> str:
    out = []
    for p in _pieces(text):
        if isinstance(p, Code):
            s = _md_code(p.text.replace("\n", "\\n"))
        elif isinstance(p, Mark):
            # spaces around the marked words stay outside the ** (CommonMark emphasis rules)
            core = p.text.strip()
            s = p.text.replace(core, f"**{core}**", 1) if core else p.text
        else:
            s = p
        out.append(s)
    s = "".join(out).replace("\n", " ")
    return s.replace("|", "\\|") if cell else s


def to_markdown(blocks: Sequence[Block]) -> str:
    """Render ``blocks`` as CommonMark/GitHub Markdown."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + _md_inline(b.text), ""]
        elif isinstance(b, Paragraph):
            out += [_md_inline(b.text), ""]
        elif isinstance(b, Bullets):
            out += [f"- {_md_inline(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            align = _align(b)
            out.append("| " + " | ".join(_md_inline(h, cell=True) for h in b.header) + " |")
            out.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
            out += ["| " + " | ".join(_md_inline(c, cell=True) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Quote):
            out += [f"> {_md_inline(b.text)}", ""]
        elif isinstance(b, Preformatted):
            fence = "```"
            while fence in b.text:
                fence += "`"
            out += [fence, b.text.rstrip("\n"), fence, ""]
        elif isinstance(b, Figure):
            out += [f"*Figure: {b.title} (in report.html)*", ""]
        else:
            raise TypeError(f"unknown report block {b!r}")
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


# ---- HTML ------------------------------------------------------------------------------------
_STYLE = ("body{font-family:sans-serif;max-width:60em;margin:auto}mark{background:#fc8}"
          "td,th{padding:2px 8px;border-bottom:1px solid #ddd}td.r,th.r{text-align:right}"
          "blockquote{font-family:serif;margin:4px 0 12px 1em}")


def _html_inline(text: Inline) -> str:
    out = []
    for p in _pieces(text):
        if isinstance(p, Code):
            out.append(f"<code>{html.escape(p.text)}</code>")
        elif isinstance(p, Mark):
            out.append(f"<mark>{html.escape(p.text)}</mark>")
        else:
            out.append(html.escape(p))
    return "".join(out).replace("\n", "<br>")


def _align(t: Table) -> list[str]:
    return list(t.align) if t.align is not None else ["l"] + ["r"] * (len(t.header) - 1)


def to_html(blocks: Sequence[Block], title: str) -> str:
    """Render ``blocks`` as one self-contained HTML page (figures inlined as PNG data URIs)."""
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{_html_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            parts.append(f"<p>{_html_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            cls = [" class='r'" if a == "r" else "" for a in _align(b)]
            rows = ["<tr>" + "".join(f"<th{cls[j]}>{_html_inline(h)}</th>" for j, h in enumerate(b.header))
                    + "</tr>"]
            rows += ["<tr>" + "".join(f"<td{cls[j]}>{_html_inline(c)}</td>" for j, c in enumerate(row))
                     + "</tr>" for row in b.rows]
            parts.append("<table>" + "".join(rows) + "</table>")
        elif isinstance(b, Quote):
            parts.append(f"<blockquote>{_html_inline(b.text)}</blockquote>")
        elif isinstance(b, Preformatted):
            parts.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Figure):
            b64 = base64.b64encode(b.draw()).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(b.title)}' src='data:image/png;base64,{b64}'>"
                         f"<figcaption>{html.escape(b.title)}</figcaption></figure>")
        else:
            raise TypeError(f"unknown report block {b!r}")
    parts.append("</body></html>\n")
    return "\n".join(parts)
