"""README.md: its Python blocks run as written, in order, in a fresh interpreter, as a reader would paste them."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 4


def test_readme_blocks_run_in_a_fresh_interpreter(tmp_path):
    for module in ("torch", "matplotlib", "pymanopt", "geomstats"):  # what the blocks import (the dev extra)
        pytest.importorskip(module)
    script = "\n\n".join(f"# --- README block {i + 1}\n{block}" for i, block in enumerate(BLOCKS))
    (tmp_path / "readme_blocks.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "readme_blocks.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"a README block failed:\n{proc.stderr[-3000:]}"
    # the "Ten lines" block prints what its comment promises
    assert re.search(r"\[1\. 1\.\] 2", proc.stdout), proc.stdout
    assert (tmp_path / "kl_ball.png").stat().st_size > 10_000  # plt.savefig after ig.viz wrote the picture


def test_readme_says_how_long_the_demo_and_the_tests_take():
    assert re.search(r"demo[^.]*\babout \d+ s\b", README, re.S | re.I)
    assert re.search(r"Run the tests\*\* \(.*?about \d+ minutes on 2 cores", README, re.S)
