"""The network examples run in their --quick mode, draw their figures and show what they claim."""
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")
from .conftest import _load_example  # noqa: E402


def test_nn_transformer_quick(tmp_path):
    res = _load_example("nn_transformer").main(["--quick", "--out", str(tmp_path)])
    (png,) = res["figures"]
    assert Path(png).stat().st_size > 10_000
    # CG natural gradient makes real progress in 40 iterations; the mixed K-FAC/diagonal curvature trains too
    assert res["cg_loss"] < 0.85 * res["cg_initial_loss"]
    assert res["kfac_loss"] < 0.95 * res["kfac_initial_loss"]
    # better than predicting the majority class (about 56 % of test sequences have no repeated token)
    assert res["cg_test_accuracy"] > max(res["test_fraction_repeated"], 1 - res["test_fraction_repeated"]) + 0.05
    kinds = res["kfac_blocks"]
    assert {kinds["q.weight"], kinds["out.weight"]} == {"kfac"}
    assert {kinds["emb.weight"], kinds["ln.weight"], kinds["mix.proj"]} == {"diag"}
