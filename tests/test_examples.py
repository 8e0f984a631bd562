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
    res = load("nn_digits").main(["--quick", "--out", str(tmp_path)])
    pngs = sorted(tmp_path.glob("nn_digits_*.png"))
    assert len(pngs) == 2 and all(p.stat().st_size > 10_000 for p in pngs)
    # quick sizes (60 iterations): K-FAC's classifier is already above 94 % on the held-out digits
    assert res["classifier_kfac_test_accuracy"] >= 0.94
    # the autoencoder: K-FAC leaves the mean-image plateau (about 27) that Adam and SGD still sit on
    assert res["autoencoder_kfac_loss"] < 0.5 * res["autoencoder_kfac_initial_loss"]
    assert res["autoencoder_kfac_loss"] < 0.85 * min(res["autoencoder_adam_loss"], res["autoencoder_sgd_loss"])


@pytest.mark.slow   # full-Gaussian logs by geodesic shooting: about 15 s of CPU
def test_gaussian_statistics_example_means_and_clusters(tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np
    res = load("gaussian_statistics").main(["--quick", "--out", str(tmp_path)])
    assert [Path(f).name for f in res["figures"]] == ["gaussian_statistics_mean.png", "gaussian_statistics_kmeans.png"]
    assert all(Path(f).stat().st_size > 10_000 for f in res["figures"])
    assert res["mean_info"].success and res["midpoint_error"] < 1e-8
    # the Fisher-Rao mean is not the average of the parameters
    assert np.max(np.abs(res["mean"] - res["average"])) > 0.05
    assert res["agreement"] == 1.0


def test_interaction_flows_example(tmp_path):
    pytest.importorskip("matplotlib")
    res = load("interaction_flows").main(["--quick", "--out", str(tmp_path)])
    assert [Path(f).name for f in res["figures"]] == ["interaction_flows_theta.png", "interaction_flows_eta.png"]
    assert all(Path(f).stat().st_size > 10_000 for f in res["figures"])
    # Malagò & Pistone (2015): f in the span of the statistics -> every flow reaches the minimum
    assert all(r["success"] and r["at_minimum"] for r in res["interaction"])
    # outside the span (independence model), some starts end at the vertex (-1, +1)
    bad = [r for r in res["independence"] if not r["at_minimum"]]
    assert bad and all(r["success"] and list(r["mode"]) == [-1.0, 1.0] for r in bad)
