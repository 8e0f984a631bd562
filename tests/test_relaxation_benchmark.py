"""Smoke test of benchmarks/relaxation_vs_cma.py (bookkeeping only; the goal is checked by running it)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest


def _load():
    spec = importlib.util.spec_from_file_location(
        "_relaxation_vs_cma", Path(__file__).resolve().parents[1] / "benchmarks" / "relaxation_vs_cma.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_evaluation_counter_and_problem_set():
    bench = _load()
    f = bench.Counted(bench.sphere)
    f(np.ones((3, 4)))
    f(np.zeros((2, 4)))
    assert f.n == 5 and f.best == 0.0
    probs = bench.problems(quick=False)
    assert {(p.name, p.d) for p in probs} >= {("sphere", 10), ("rot-ellipsoid", 20), ("rosenbrock", 20),
                                              ("rastrigin-ipop", 10), ("sep-ellipsoid", 100)}
    ell = next(p for p in probs if p.name == "rot-ellipsoid" and p.d == 10)
    H = np.array([[ell.f(np.eye(10)[[i]] + np.eye(10)[[j]])[0] for j in range(10)] for i in range(10)])
    diag = np.array([ell.f(np.eye(10)[[i]])[0] for i in range(10)])
    quad = 0.5 * (H - diag[:, None] - diag[None, :])                      # polarisation: off-diagonal entries
    np.fill_diagonal(quad, diag)
    ev = np.linalg.eigvalsh(0.5 * (quad + quad.T))
    assert ev.max() / ev.min() == pytest.approx(1e6, rel=1e-6)           # condition 1e6


def test_quick_run_bookkeeping(capsys):
    pytest.importorskip("cma")
    bench = _load()
    (row,) = bench.main(["--quick"])
    assert row["ratio"] == pytest.approx(row["ours"] / row["cma"])
    assert 0 <= row["succ_ours"] <= 2 and 0 <= row["succ_cma"] <= 2
    assert row["verdict"] == ("PASS" if row["ratio"] <= 1 and row["succ_ours"] >= row["succ_cma"] else "FAIL")
    assert "sphere" in capsys.readouterr().out
