"""The natural wake-sleep example runs in its --quick mode, draws its figures and shows what it claims."""
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
from .conftest import _load_example  # noqa: E402


def test_natural_wake_sleep_quick(tmp_path):
    res = _load_example("natural_wake_sleep").main(["--quick", "--out", str(tmp_path)])
    assert len(res["figures"]) == 2 and all(Path(f).stat().st_size > 10_000 for f in res["figures"])
    nat, plain = res["natural_test_ll"], res["plain_test_ll"]
    assert nat[0] == plain[0]                      # same initialisation
    assert nat[-1] > nat[0] + 15                   # from about -45 nats per digit to about -20
    # per epoch the natural gradient is ahead after each of the two quick epochs
    assert all(nat[e] > plain[e] + 1.0 for e in (1, 2))
    # plain wake-sleep goes on until it has trained as long as the natural one (or eight times the epochs)
    assert res["plain_time"][-1] >= res["natural_time"][-1] or res["plain_epochs"][-1] == 16
