"""The browser's number formats (ConsoleFormat in static/console/console.js, for the figures the
playground adds) read as the server's (apps/console/templatetags/console_dash.py): one table, both
sides, halves included."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from apps.console.templatetags.console_dash import compact, dollars, ms

# Halves that binary floating point holds exactly (0.125) and those it does not (1.005, 0.0145): the
# browser must round both as the server's Decimal does.
MONEY = [
    "0", "0.0125", "0.125", "2.125", "1.005", "2.675", "0.0145", "0.0000235", "0.0002", "0.000153",
    "0.5", "0.999", "1234.5678", "0.00000042", "-0.002", "",
]  # fmt: skip
COUNTS = [0, 950, 1000, 1150, 1250, 2350, 99_950, 99_999, 123_456, 999_500, 999_950, 1_234_567, 5_000_000_000]
DURATIONS = [0.42, 1.05, 2.25, 9.96, 85.4, 100.5, 999.6, 1005, 1250, 9996, 12345, 59960, 125000]


def test_the_browser_formats_every_figure_as_the_server_does(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the console's script")
    script = Path("static/console/console.js").read_text()
    program = tmp_path / "formats.js"
    program.write_text(
        "global.window = {};\n"
        + script[script.index("window.ConsoleFormat") :]
        + f"""
const f = window.ConsoleFormat;
console.log(JSON.stringify({{
  money: {json.dumps(MONEY)}.map(f.dollars),
  counts: {json.dumps(COUNTS)}.map(f.compact),
  durations: {json.dumps(DURATIONS)}.map(f.duration),
}}));
"""
    )
    browser = json.loads(
        subprocess.run([node, str(program)], capture_output=True, text=True, check=True).stdout
    )

    assert browser == {
        "money": [dollars(value) for value in MONEY],
        "counts": [compact(value) for value in COUNTS],
        "durations": [ms(value) for value in DURATIONS],
    }
