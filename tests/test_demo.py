"""The demo runs end to end (quick mode) and writes every figure and the numbers."""
import re
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")


def test_demo_quick(tmp_path):
    from infogeo.__main__ import main
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out), "--no-progress"]) == 0
    report = (out / "report.md").read_text()
    pngs = re.findall(r"\]\(([^)]+\.png)\)", report)
    assert len(pngs) == 7
    for name in pngs:
        assert (out / name).stat().st_size > 5000, name
    # the numbers: natural gradient reaches the Gaussian MLE, Gauss-Newton solves Rosenbrock, GD on inputs does not
    ngd = re.search(r"\| natural gradient \(Fisher\) \| (\d+) \| [^|]+ \| ([\d.]+) \| ([\d.e+-]+) \|", report)
    assert ngd and float(ngd.group(3)) < 1e-8
    gn = re.search(r"\| natural gradient \(pullback, Gauss-Newton\) \| \d+ \| [^|]+ \| ([\d.e+-]+) \|", report)
    gd = re.search(r"\| GD on inputs \| \d+ \| [^|]+ \| ([\d.e+-]+) \|", report)
    assert float(gn.group(1)) < 1e-6 < float(gd.group(1))
    assert "| 0.02 | (0, 1) |" in report and "1.862460" in report
    # a run that stopped early says so in the table and in the figure's legend
    assert re.search(r"\| standard \| vanilla \| \d+ \| \*\*failed\*\*: ", report)


def test_cli_help_lists_every_option():
    out = subprocess.run([sys.executable, "-m", "infogeo", "demo", "--help"], capture_output=True, text=True,
                         env={"PYTHONPATH": "src"}, check=True).stdout
    for opt in ("--out", "--quick", "--no-progress", "--verbose"):
        assert opt in out
