"""The reports' bar charts (``report_render.bar_chart_svg``): one bar per label, bar sizes in the
order of the values on the axis asked for, tick labels, escaped text, the same bytes twice."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from tcqa_data.report_render import Figure, bar_chart_svg, to_html

NS = "{http://www.w3.org/2000/svg}"


def _bars(svg: bytes, size: str) -> list[float]:
    root = ET.fromstring(svg)
    rects = root.findall(f"{NS}rect")[1:]  # the first is the white background
    return [float(r.get(size)) for r in rects]


def _texts(svg: bytes) -> list[str]:
    return [t.text for t in ET.fromstring(svg).iter(f"{NS}text")]


def test_vertical_symlog_bars_follow_the_counts():
    counts = [9000, 0, 1, 10, 100]
    labels = ["0-0", "1-12", "13", "14-18", "a<b & c"]
    svg = bar_chart_svg(labels, counts, xlabel="longest run", ylabel="docs", log=True)
    heights = _bars(svg, "height")
    assert len(heights) == len(counts)
    assert heights[1] == 0 and heights[0] == max(heights)
    # log10(1 + v): 1 -> 10 -> 100 are steps of about the same height (symlog), not 10x each
    step1, step2 = heights[3] - heights[2], heights[4] - heights[3]
    assert step1 > 0 and step2 > 0 and 0.7 < step2 / step1 < 1.5
    expected = math.log10(1 + 100) / math.log10(1 + 9000)
    assert abs(heights[4] / heights[0] - expected) < 0.01
    texts = _texts(svg)
    assert "a<b & c" in texts and "longest run" in texts and "docs" in texts
    assert {"0", "1", "10", "100", "1000"} <= set(texts)  # the count axis's ticks
    assert bar_chart_svg(labels, counts, xlabel="longest run", ylabel="docs", log=True) == svg


def test_horizontal_shares_on_a_fixed_axis():
    svg = bar_chart_svg(["Frequency", "Typical Time"], [0.5, 1.0], xlabel="clean share", horizontal=True,
                        limit=1.0)
    widths = _bars(svg, "width")
    assert abs(widths[1] - 2 * widths[0]) < 0.2
    assert {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "Frequency", "Typical Time"} <= set(_texts(svg))
    # limit 1.0 holds even when every share is smaller
    half = _bars(bar_chart_svg(["Frequency", "Typical Time"], [0.5, 0.25], xlabel="clean share",
                               horizontal=True, limit=1.0), "width")
    assert abs(half[0] - widths[0]) < 0.1


def test_html_inlines_svg_and_png_figures():
    page = to_html([Figure("bars", lambda: bar_chart_svg(["a"], [1], xlabel="x")),
                    Figure("png", lambda: b"\x89PNG\r\n\x1a\n")], title="t")
    assert len(re.findall(r"data:image/svg\+xml;base64,", page)) == 1
    assert len(re.findall(r"data:image/png;base64,", page)) == 1
