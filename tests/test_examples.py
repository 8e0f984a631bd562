"""Every script in examples/ runs (small sizes) and writes its figures."""
import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rosenbrock_example_reproduces_the_story(tmp_path):
    pytest.importorskip("matplotlib")
    res = load("rosenbrock").main(["--quick", "--out", str(tmp_path)])
    for fig in res["figures"]:
        assert Path(fig).stat().st_size > 10_000
    assert res["gauss_newton_error"] < 1e-8 and res["gauss_newton_iterations"] <= 10
    assert res["gd_error"] > 1e-2  # gradient descent on the inputs is still in the valley
    assert res["proximal_error"] < res["gd_error"]


def test_nn_digits_example_trains_and_draws(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    res = load("nn_digits").run(full=False, out=tmp_path, quiet=True)
    pngs = sorted(tmp_path.glob("nn_digits_*.png"))
    assert len(pngs) == 2 and all(p.stat().st_size > 10_000 for p in pngs)
    assert res[("classifier", "kfac")]["test_accuracy"] >= 0.97
    # natural gradient ends lower than Adam on the autoencoder at the same iteration budget
    assert res[("autoencoder", "kfac")]["loss"][-1] < res[("autoencoder", "adam")]["loss"][-1]
