"""apps/console/charts.py: SVG drawn on the server, escaped, accessible, scalable, without script."""

import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest

from apps.console import charts

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & "quotes" \x01\x1f'


def parse(markup: str) -> ET.Element:
    """Well-formed XML, or the test fails: escaping that went wrong shows here."""
    return ET.fromstring(str(markup))


def all_text(root: ET.Element) -> str:
    return " ".join(text for element in root.iter() for text in (element.text, element.get("title")) if text)


@pytest.mark.parametrize(
    "draw",
    [
        lambda **kw: charts.bar_chart(bars=[(HOSTILE, 3), ("b", Decimal("1.5"))], **kw),
        lambda **kw: charts.horizontal_bar_chart(bars=[(HOSTILE, 3), ("b", 1)], **kw),
        lambda **kw: charts.line_chart(labels=[HOSTILE, "b"], series=[charts.Series(HOSTILE, [1, 2])], **kw),
    ],
    ids=["bars", "horizontal bars", "lines"],
)
def test_every_chart_escapes_labels_and_is_an_accessible_scalable_image(draw):
    markup = draw(chart_id="Spend by team", title=f"Title {HOSTILE}", description=f"About {HOSTILE}")

    assert "<script" not in markup and "alert(&quot;x&quot;)" in markup
    assert "\x01" not in markup and "\x1f" not in markup
    root = parse(markup)
    assert root.tag == f"{SVG}svg"
    # Scales with its box: a viewBox, no fixed size.
    assert (
        root.get("viewBox", "").startswith("0 0 ")
        and root.get("width") is None
        and root.get("height") is None
    )
    # An image labelled by its own title and description.
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "chart-spend-by-team-title chart-spend-by-team-desc"
    title = root.find(f"{SVG}title")
    assert (
        title.get("id") == "chart-spend-by-team-title"
        and title.text == 'Title <script>alert("x")</script> & "quotes" '
    )
    assert root.find(f"{SVG}desc").get("id") == "chart-spend-by-team-desc"
    # No script and no event handler anywhere.
    for element in root.iter():
        assert element.tag != f"{SVG}script"
        assert not any(name.lower().startswith("on") for name in element.attrib)


def test_each_bar_carries_its_label_and_value_as_a_title():
    root = parse(
        charts.bar_chart(
            chart_id="spend",
            title="Spend per day",
            description="d",
            bars=[("11-20", Decimal("0.25")), ("11-21", 0)],
            value_label=lambda value: f"${value}",
        )
    )
    titles = [rect.find(f"{SVG}title").text for rect in root.iter(f"{SVG}rect")]
    assert titles == ["11-20: $0.25", "11-21: $0"]
    heights = [float(rect.get("height")) for rect in root.iter(f"{SVG}rect")]
    assert heights[0] > 0 and heights[1] == 0


def test_horizontal_bars_truncate_long_labels_but_keep_them_whole_in_the_title():
    name = "a-very-long-model-name-from-a-client-" * 3
    root = parse(charts.horizontal_bar_chart(chart_id="m", title="t", description="d", bars=[(name, 2)]))
    labels = [text.text for text in root.iter(f"{SVG}text")]
    assert any(label.endswith("…") and len(label) == 16 for label in labels)
    assert root.find(f".//{SVG}rect/{SVG}title").text == f"{name}: 2"


def test_a_line_breaks_where_a_value_is_missing():
    root = parse(
        charts.line_chart(
            chart_id="latency",
            title="Latency",
            description="d",
            labels=["a", "b", "c", "d", "e"],
            series=[charts.Series("p50", [10, 12, None, 9, 11])],
        )
    )
    runs = [line.get("points").split() for line in root.iter(f"{SVG}polyline")]
    assert [len(run) for run in runs] == [2, 2]
    assert len(list(root.iter(f"{SVG}circle"))) == 4
    assert root.find(f".//{SVG}circle/{SVG}title").text == "p50, a: 10"


def test_the_time_axis_shows_at_most_about_six_labels():
    labels = [f"d{n}" for n in range(90)]
    root = parse(
        charts.bar_chart(
            chart_id="x", title="t", description="d", bars=[(label, n) for n, label in enumerate(labels)]
        )
    )
    axis = [text.text for text in root.iter(f"{SVG}text") if text.text in labels]
    assert 5 <= len(axis) <= 7 and axis[0] == "d0"


@pytest.mark.parametrize(
    "draw",
    [
        lambda: charts.bar_chart(chart_id="x", title="Spend", description="d", bars=[]),
        lambda: charts.horizontal_bar_chart(chart_id="x", title="Spend", description="d", bars=[]),
        lambda: charts.line_chart(
            chart_id="x", title="Spend", description="d", labels=["a"], series=[charts.Series("s", [None])]
        ),
    ],
)
def test_a_chart_without_data_says_so(draw):
    root = parse(draw())
    assert "No data for this period" in all_text(root)
    assert root.find(f"{SVG}title").text == "Spend"


@pytest.mark.parametrize(
    ("maximum", "expected"),
    [
        (0, [0.0, 1.0]),
        (1, [0.0, 0.25, 0.5, 0.75, 1.0]),
        (7, [0.0, 2.0, 4.0, 6.0, 8.0]),
        (0.00042, [0.0, 0.0002, 0.0004, 0.0006]),
        (950, [0.0, 250.0, 500.0, 750.0, 1000.0]),
        (float("nan"), [0.0, 1.0]),
    ],
)
def test_value_axes_use_round_ticks_that_reach_the_maximum(maximum, expected):
    assert charts.nice_ticks(maximum) == pytest.approx(expected)
