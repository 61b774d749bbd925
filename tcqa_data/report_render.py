"""One model of a human-readable report, rendered to Markdown, to HTML and to a terminal's text.

A report is built once as a list of blocks (headings, bullet lists, tables, quotes with highlighted
spans, figures); ``to_markdown``, ``to_html`` and ``to_text`` render the same blocks, so the files and
the printed report can never drift apart. Figures are drawn only for HTML (Markdown and text say where
the plot is), and lazily, so rendering Markdown or text never imports matplotlib.

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


@dataclass(frozen=True)
class Link:
    """A link to another report, by a relative path (it keeps working when the folders move together)."""
    text: str
    href: str


Inline = Union[str, Sequence[Union[str, Code, Mark, Link]]]  # noqa: UP007 - readable alias at runtime


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


@dataclass(frozen=True)
class Details:
    """Detail a reader opens on demand: folded (<details>) in HTML, a titled section in Markdown."""
    summary: Inline
    blocks: Sequence[Block]


Block = Union[Heading, Paragraph, Bullets, Table, Quote, Preformatted, Figure, Details]  # noqa: UP007


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


def interval_note(m: Mapping[str, Any]) -> str:
    """The few words a report prints beside a value whose interval is withheld or odd ("" if none):
    "too few groups: 2", "skewed resamples", ... (``metrics.estimate`` writes the notes)."""
    note = str(m.get("note") or "")
    if note.startswith("too few groups"):
        n = note.split("(", 1)[1].split(";", 1)[0] if "(" in note else ""
        return f"too few groups: {n}" if n.isdigit() else "too few groups"
    if "outside its percentile interval" in note:
        return "estimate outside the interval: skewed resamples"
    return note


def percent_ci(m: Mapping[str, Any] | None, signed: bool = False) -> str:
    """A metric entry ``{"value", "ci95"[, "note"]}`` as "value [low, high]" in percent ("n/a" without a
    value); an interval withheld or odd says why in parentheses ("77.8 (too few groups: 2)")."""
    if not m or m.get("value") is None:
        return "n/a"
    lo, hi = m.get("ci95") or [None, None]
    ci = f" [{percent(lo, signed)}, {percent(hi, signed)}]" if lo is not None and hi is not None else ""
    note = interval_note(m)
    return percent(m["value"], signed) + ci + (f" ({note})" if note else "")


def share(v: float | None, digits: int = 1) -> str:
    """A share (0..1) as a percentage with its sign: 0.764706 -> "76.5%" ("n/a" for none)."""
    return "n/a" if v is None else f"{v * 100:.{digits}f}%"


def png_bytes(fig: Any, dpi: int = 80) -> bytes:
    """A matplotlib figure as PNG bytes without Software/date metadata (bytes depend on data only)."""
    buf = io.BytesIO()
    # tight: the saved area grows to hold every label (a long last tick label is not clipped)
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


# ---- Markdown --------------------------------------------------------------------------------
def _pieces(text: Inline) -> list[str | Code | Mark | Link]:
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
        elif isinstance(p, Link):
            label, target = p.text.replace("]", "\\]"), p.href.replace(" ", "%20").replace(")", "%29")
            s = f"[{label}]({target})"
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
    out = _md_lines(blocks)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def _md_lines(blocks: Sequence[Block]) -> list[str]:
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
        elif isinstance(b, Details):
            # GitHub and most Markdown viewers fold <details> too; the content stays Markdown
            out += [f"<details><summary>{html.escape(_md_inline(b.summary))}</summary>", ""]
            out += _md_lines(b.blocks) + ["</details>", ""]
        else:
            raise TypeError(f"unknown report block {b!r}")
    return out


# ---- plain text (a terminal) --------------------------------------------------------------------
def to_text(blocks: Sequence[Block]) -> str:
    """Render ``blocks`` as plain text for a terminal: no Markdown markup or HTML tags, tables with
    aligned columns, a folded section as its title and its content indented below it."""
    out = _text_lines(blocks, "")
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def _text_inline(text: Inline) -> str:
    out = []
    for p in _pieces(text):
        if isinstance(p, Code):
            out.append(f"`{p.text}`")
        elif isinstance(p, Link):
            out.append(f"{p.text} ({p.href})")
        elif isinstance(p, Mark):
            out.append(p.text)
        else:
            out.append(p)
    return "".join(out).replace("\n", " ")


def _text_lines(blocks: Sequence[Block], indent: str) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += [indent + "#" * b.level + " " + _text_inline(b.text), ""]
        elif isinstance(b, Paragraph):
            out += [indent + _text_inline(b.text), ""]
        elif isinstance(b, Bullets):
            out += [f"{indent}- {_text_inline(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            cells = [[_text_inline(c) for c in row] for row in [b.header, *b.rows]]
            widths = [max(len(row[j]) for row in cells) for j in range(len(b.header))]
            align = _align(b)
            for row in cells:
                padded = [c.rjust(w) if a == "r" else c.ljust(w)
                          for c, w, a in zip(row, widths, align, strict=True)]
                out.append(indent + "  ".join(padded).rstrip())
            out.append("")
        elif isinstance(b, Quote):
            out += [f"{indent}> {_text_inline(b.text)}", ""]
        elif isinstance(b, Preformatted):
            out += [indent + line for line in b.text.rstrip("\n").split("\n")] + [""]
        elif isinstance(b, Figure):
            out += [f"{indent}(figure: {b.title}, in report.html)", ""]
        elif isinstance(b, Details):
            out += [f"{indent}{_text_inline(b.summary)}:", ""] + _text_lines(b.blocks, indent + "  ")
        else:
            raise TypeError(f"unknown report block {b!r}")
    return out


# ---- HTML ------------------------------------------------------------------------------------
_STYLE = ("body{font-family:sans-serif;max-width:60em;margin:auto;padding:0 1em}mark{background:#fc8}"
          "td,th{padding:2px 8px;border-bottom:1px solid #ddd}td.r,th.r{text-align:right}"
          "blockquote{font-family:serif;margin:4px 0 12px 1em}img{max-width:100%}"
          ".wide{overflow-x:auto}details{margin:6px 0}summary{cursor:pointer;font-weight:bold}"
          "details>:not(summary){margin-left:1em}p.verdict{font-size:1.15em}")


def _html_inline(text: Inline) -> str:
    out = []
    for p in _pieces(text):
        if isinstance(p, Code):
            out.append(f"<code>{html.escape(p.text)}</code>")
        elif isinstance(p, Link):
            out.append(f"<a href='{html.escape(p.href, quote=True)}'>{html.escape(p.text)}</a>")
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
    parts += _html_parts(blocks)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _html_parts(blocks: Sequence[Block]) -> list[str]:
    parts: list[str] = []
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
            # a wide table scrolls inside its box instead of widening the page
            parts.append("<div class='wide'><table>" + "".join(rows) + "</table></div>")
        elif isinstance(b, Quote):
            parts.append(f"<blockquote>{_html_inline(b.text)}</blockquote>")
        elif isinstance(b, Preformatted):
            parts.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Figure):
            b64 = base64.b64encode(b.draw()).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(b.title)}' src='data:image/png;base64,{b64}'>"
                         f"<figcaption>{html.escape(b.title)}</figcaption></figure>")
        elif isinstance(b, Details):
            parts.append(f"<details><summary>{_html_inline(b.summary)}</summary>")
            parts += _html_parts(b.blocks)
            parts.append("</details>")
        else:
            raise TypeError(f"unknown report block {b!r}")
    return parts
