"""benchmarks/nn_scale.py: its state count against AdamW's known state, and a quick run's bookkeeping."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")
from .._helpers import load_benchmark  # noqa: E402

@pytest.fixture(scope="module")
def bench():
    return load_benchmark("nn_scale")


def test_held_bytes_counts_adamw_state_as_two_parameter_copies(bench):
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 7)).sum().backward()
    opt.step()
    params = list(model.parameters())
    exclude = {id(p) for p in params} | {p.untyped_storage().data_ptr() for p in params}
    exclude |= {id(p.grad) for p in params}
    n = sum(p.numel() for p in params)
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())   # one scalar per tensor
    assert bench.held_bytes(torch, opt, exclude) == 2 * 4 * n + steps


def test_slope_of_a_power_law(bench):
    assert bench.slope([1, 2, 4, 8], [3 * x ** 1.5 for x in [1, 2, 4, 8]]) == pytest.approx(1.5)


@pytest.mark.slow
def test_quick_run(bench, tmp_path):
    result = bench.main(["--quick", "--widths", "16", "32", "--optimizers", "kfac", "--skip-depth",
                         "--skip-distributed", "--out", str(tmp_path)])
    rows = {(r["width"], r["optimizer"]): r for r in result["width"]}
    assert all("error" not in r for r in rows.values()), rows
    for w in (16, 32):
        assert rows[w, "kfac"]["state_multiple"] > 2.0   # factors, inverses, the grafting moments
        assert rows[w, "kfac"]["median_s"] > 0 and rows[w, "kfac"]["peak_mb"] > 0
    assert set(result["width_exponents"]) == {"kfac"}
    assert (tmp_path / "nn_scale_width.png").stat().st_size > 0
    assert json.loads((tmp_path / "nn_scale.json").read_text())["width"]
