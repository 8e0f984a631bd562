"""Smoke test of benchmarks/discrete_search.py (the problems' optima and the bookkeeping; the goal is
checked by running the benchmark)."""
import itertools
import math

import numpy as np
import pytest

from ._helpers import load_benchmark


def _load():
    return load_benchmark("discrete_search")


def _brute_min(f, n):
    X = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
    return float(f(X).min())


def test_known_optima():
    bench = _load()
    for p in (bench.sparse_chain(11), bench.spinglass(9), bench.onemax(7), bench.leadingones(6)):
        assert p.f_star == pytest.approx(_brute_min(p.f, p.n), abs=1e-12), p.name
    p = bench.spinglass(9)
    assert p.edges and all(0 <= i < j < 9 for i, j in p.edges)


def test_counter_and_baselines():
    bench = _load()
    p = bench.onemax(8)
    c = bench.Counted(p.f, p.f_star)
    c(-np.ones((3, 8)))
    c(np.vstack([-np.ones(8), np.ones(8)]))
    assert c.n == 5 and c.hit == 5
    for name in ("cGA", "PBIL", "UMDA"):
        h = bench.run_baseline(name, p, 0, 5000)
        assert h is not None and 1 <= h <= 5000
    assert bench.run_baseline("cGA", bench.leadingones(20), 0, 10) is None   # budget too small: no hit


def test_quick_run_bookkeeping(capsys):
    bench = _load()
    (row,) = bench.main(["--quick", "--no-nevergrad", "--only", "onemax"])
    ours, best = row["median"][row["ours"]], row["median"][row["best"]]
    assert row["ours"] == "ours-indep" and row["best"] in ("cGA", "PBIL", "UMDA")
    assert row["ratio"] == pytest.approx(ours / best) and math.isfinite(ours)
    assert row["verdict"] == ("PASS" if ours <= best and row["ok"]["ours-indep"] >= row["ok"][row["best"]] else "FAIL")
    assert "onemax" in capsys.readouterr().out


def test_nevergrad_runner():
    pytest.importorskip("nevergrad")
    bench = _load()
    h = bench.run_nevergrad("DiscreteOnePlusOne", bench.onemax(6), 0, 2000)
    assert h is not None and h <= 2000
