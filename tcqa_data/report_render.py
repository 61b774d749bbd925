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
import math
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
    """A plot: ``draw`` returns PNG bytes or an SVG document (``bar_chart_svg``); called only by
    the HTML renderer."""
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


def bar_chart_svg(labels: Sequence[str], values: Sequence[float], *, xlabel: str, ylabel: str = "",
                  color: str = "#48c", horizontal: bool = False, log: bool = False,
                  limit: float | None = None, width: int = 480) -> bytes:
    """A bar chart as an SVG document: one bar per label (vertical, or ``horizontal`` with the labels
    on the left), the value axis from 0 to ``limit`` (default: the largest value) with ticks;
    ``log``: a symmetric-log axis (log10(1 + v): 0, 1, 10, 100, ... about evenly spaced, as
    matplotlib's symlog). A few kB of text drawn without matplotlib (whose import and layout cost
    ~0.5 CPU-s a process and ~0.1 a figure); the same data give the same bytes."""
    top = max([limit or 0.0, *values, 1.0 if log else 0.0]) or 1.0
    if log:
        ticks = [0.0] + [10.0 ** k for k in range(int(math.floor(math.log10(top))) + 1)]
    else:
        step = _nice_step(top / 5)
        ticks = [i * step for i in range(int(top / step + 1e-9) + 1)]
    whole = log or all(float(t).is_integer() for t in ticks)
    tick_text = [f"{t:g}" if whole else f"{t:.1f}" for t in ticks]

    def share(v: float) -> float:  # a value's place along the value axis, 0..1
        return (math.log10(1.0 + v) / math.log10(1.0 + top)) if log else v / top

    out: list[str] = []
    n = max(1, len(labels))
    axis = "stroke='#000'"
    if horizontal:
        left, right, plot_top, bar_h = 12 + 6 * max([len(x) for x in labels] + [4]), 16, 10, 20
        height = plot_top + bar_h * n + 44
        plot_w, base = width - left - right, plot_top + bar_h * n
        for i, (lab, v) in enumerate(zip(labels, values, strict=True)):
            y = plot_top + bar_h * i
            out.append(f"<rect x='{left}' y='{y + 3}' width='{plot_w * share(v):.1f}' height='{bar_h - 6}' "
                       f"fill='{color}'/><text x='{left - 4}' y='{y + bar_h / 2 + 4:.1f}' "
                       f"text-anchor='end'>{html.escape(lab)}</text>")
        for t, text in zip(ticks, tick_text, strict=True):
            x = left + plot_w * share(t)
            out.append(f"<line x1='{x:.1f}' y1='{base}' x2='{x:.1f}' y2='{base + 4}' {axis}/>"
                       f"<text x='{x:.1f}' y='{base + 16}' text-anchor='middle'>{text}</text>")
    else:
        left, right, plot_top, height = 56, 10, 10, 240
        base = height - 62
        plot_w, plot_h = width - left - right, base - plot_top
        slot = plot_w / n
        for i, (lab, v) in enumerate(zip(labels, values, strict=True)):
            x, h = left + slot * i, plot_h * share(v)
            cx = x + slot / 2
            out.append(f"<rect x='{x + slot * 0.1:.1f}' y='{base - h:.1f}' width='{slot * 0.8:.1f}' "
                       f"height='{h:.1f}' fill='{color}'/><text x='{cx:.1f}' y='{base + 12}' "
                       f"text-anchor='end' font-size='9' transform='rotate(-30 {cx:.1f} {base + 12})'>"
                       f"{html.escape(lab)}</text>")
        for t, text in zip(ticks, tick_text, strict=True):
            y = base - plot_h * share(t)
            out.append(f"<line x1='{left - 4}' y1='{y:.1f}' x2='{left}' y2='{y:.1f}' {axis}/>"
                       f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>{text}</text>")
        if ylabel:
            mid = plot_top + plot_h / 2
            out.append(f"<text x='14' y='{mid:.1f}' text-anchor='middle' "
                       f"transform='rotate(-90 14 {mid:.1f})'>{html.escape(ylabel)}</text>")
    out.append(f"<line x1='{left}' y1='{plot_top}' x2='{left}' y2='{base}' {axis}/>"
               f"<line x1='{left}' y1='{base}' x2='{left + plot_w}' y2='{base}' {axis}/>"
               f"<text x='{left + plot_w / 2:.1f}' y='{height - 6}' text-anchor='middle'>"
               f"{html.escape(xlabel)}</text>")
    head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='11'>"
            f"<rect width='{width}' height='{height}' fill='#fff'/>")
    return (head + "".join(out) + "</svg>").encode("utf-8")


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw`` (a linear axis's tick step)."""
    mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw - 1e-12)


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
    """Render ``blocks`` as one self-contained HTML page (figures inlined as PNG or SVG data URIs)."""
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
            data = b.draw()
            kind = "svg+xml" if data.startswith(b"<svg") else "png"
            b64 = base64.b64encode(data).decode("ascii")
            parts.append(f"<figure><img alt='{html.escape(b.title)}' src='data:image/{kind};base64,{b64}'>"
                         f"<figcaption>{html.escape(b.title)}</figcaption></figure>")
        else:
            raise TypeError(f"unknown report block {b!r}")
    parts.append("</body></html>\n")
    return "\n".join(parts)
