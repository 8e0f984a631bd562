"""The network examples run in their --quick mode, draw their figures and show what they claim."""
import importlib.util
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
    assert {kinds["q.weight"], kinds["out.weight"], kinds["emb.weight"]} == {"kfac"}
    assert {kinds["ln.weight"], kinds["mix.proj"]} == {"diag"}


def test_training_benchmark_smoke(tmp_path):
    """The benchmark's bookkeeping on a tiny run: targets, first-reach iterations, ratios and their bounds."""
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location(
        "_nn_training", Path(__file__).resolve().parents[2] / "benchmarks" / "nn_training.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.main(["--quick", "--iterations", "20", "--budget", "3", "--batch", "64", "--out", str(tmp_path)])
    (row,) = res["rows"]
    assert 0 < row["kfac_iterations"] <= 20
    if row["adam_reached"]:
        assert row["adam_iterations"] <= 60
        assert row["iteration_ratio"] == pytest.approx(row["adam_iterations"] / row["kfac_iterations"])
    else:
        assert row["iteration_ratio"] == pytest.approx(60 / row["kfac_iterations"])
    assert 0 <= res["classifier_test_accuracy"] <= 1
    assert len(list(tmp_path.glob("*.png"))) == 2


def test_nn_cnn_batchnorm_quick(tmp_path):
    pytest.importorskip("sklearn")
    res = _load_example("nn_cnn_batchnorm").main(["--quick", "--out", str(tmp_path)])
    (png,) = res["figures"]
    assert Path(png).stat().st_size > 10_000
    for label, r in res.items():
        if label == "figures":
            continue
        assert r["loss"] < 0.1 * r["initial_loss"], label     # three epochs with BatchNorm in training mode
        assert r["test_accuracy"] > 0.9, label
