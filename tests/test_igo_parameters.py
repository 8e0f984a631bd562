"""The IGO search's strategy parameters against the reference implementation (the ``cma`` package)."""
import numpy as np
import pytest

from infogeo.solvers import StrategyParameters


@pytest.mark.parametrize("dim,popsize", [(2, None), (10, None), (20, None), (100, None), (10, 24), (20, 96)])
def test_weights_and_learning_rates_equal_those_of_cma(dim, popsize):
    """Weights (active negative part included), c_1, c_mu, c_c and c_sigma as ``cma`` computes them."""
    cma = pytest.importorskip("cma")
    opts = {"verbose": -9, "seed": 1}
    if popsize:
        opts["popsize"] = popsize
    es = cma.CMAEvolutionStrategy(np.ones(dim), 1.0, opts)
    es.ask()                                   # cma sets its step-size constants lazily
    sp = StrategyParameters.default(dim, popsize)
    assert sp.popsize == es.sp.popsize and sp.mu == es.sp.weights.mu
    np.testing.assert_allclose(sp.weights, np.asarray(es.sp.weights), rtol=1e-12, atol=1e-15)
    assert sp.mueff == pytest.approx(es.sp.weights.mueff, rel=1e-12)
    assert sp.c_1 == pytest.approx(es.sp.c1, rel=1e-12)
    assert sp.c_mu == pytest.approx(es.sp.cmu, rel=1e-12)
    assert sp.c_c == pytest.approx(es.sp.cc, rel=1e-12)
    assert sp.c_sigma == pytest.approx(es.adapt_sigma.cs, rel=1e-12)
    if popsize is None:   # the damping agrees for the default population (cma damps large ones more)
        assert sp.d_sigma == pytest.approx(es.adapt_sigma.damps, rel=1e-12)


def test_closed_forms_at_the_tutorials_example():
    """d = 10, lambda = 10: mu_eff = 3.1672 (Hansen 2016), and the rates from their closed forms."""
    sp = StrategyParameters.default(10)
    me = sp.mueff
    assert me == pytest.approx(3.1672, abs=1e-4)
    assert sp.c_sigma == pytest.approx((me + 2) / (10 + me + 3))
    assert sp.d_sigma == pytest.approx(1 + sp.c_sigma)                 # sqrt((me - 1)/11) < 1
    assert sp.c_1 == pytest.approx(2 / (11.3 ** 2 + me))
    assert sp.c_mu == pytest.approx(2 * (0.25 + me + 1 / me - 2) / (12 ** 2 + me))
    assert sp.c_c == pytest.approx((4 + me / 10) / (14 + 2 * me / 10))
    # c_sigma is bounded by 1/2 for populations far above the default
    assert StrategyParameters.default(5, 200).c_sigma == 0.5
