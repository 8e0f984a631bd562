"""Curvature as operators: one protocol, algebra, SciPy operators and randomised estimators against dense matrices."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import operators  # noqa: E402
from .conftest import flat, mlp  # noqa: E402
from .test_space import EXACT, rand_like, rel  # noqa: E402

KINDS = ["dense", "implicit", "diag", "kfac", "block"]


@pytest.fixture(scope="module")
def space():
    torch.manual_seed(0)
    model = mlp(sizes=(4, 6, 3))
    X = torch.randn(10, 4, dtype=torch.float64)
    return ig.nn.ParameterSpace(model, "categorical", data=X)


@pytest.mark.parametrize("kind", KINDS)
def test_protocol_is_the_metric_protocol(space, kind):
    """A curvature takes geometry.Metric's signatures mv(x, v), solve(x, b, damping), and works as a
    solver's metric; the operator forms C @ v and C.inverse(λ) @ b agree; the 0.1 one-argument forms warn."""
    C = space.curvature(kind)
    M = C.to_dense()
    v = rand_like(space)
    tv, cv = space.vector(v), space.covector(v)
    Mv = M @ flat(v, space.names)
    inv = torch.linalg.solve(M + 0.1 * torch.eye(M.shape[0], dtype=M.dtype), flat(v, space.names))
    for x in (None, space.point, {n: t.clone() for n, t in space.point.items()}):
        assert rel(flat(C.mv(x, v), space.names), Mv) < EXACT
        assert rel(flat(C.solve(x, v, 0.1), space.names), inv) < 1e-8
    assert rel(flat(C.mv(None, tv), space.names), Mv) < EXACT       # vector types accepted
    assert rel(flat(C @ v, space.names), Mv) < EXACT
    assert rel(flat(C.flat(tv).components, space.names), Mv) < EXACT
    assert rel(flat(C.solve(None, cv, damping=0.1), space.names), inv) < 1e-8
    assert rel(flat(C.inverse(0.1) @ v, space.names), inv) < 1e-8
    assert rel(C.inverse(0.1) @ flat(v, space.names), inv) < 1e-8
    assert rel(flat(C.sharp(cv, damping=0.1).components, space.names), inv) < 1e-8
    assert abs(float(C.inner(tv, tv)) - float(flat(v, space.names) @ M @ flat(v, space.names))) < 1e-9
    assert C.is_finite() and C.dim == space.dim
    with pytest.warns(FutureWarning, match=r"mv\(x, \.\.\.\)"):
        old = C.mv(v)
    assert rel(flat(old, space.names), Mv) < EXACT
    with pytest.warns(FutureWarning, match="deprecated"):
        old = C.solve(v, damping=0.1)
    assert rel(flat(old, space.names), inv) < 1e-8
    with pytest.raises(TypeError):
        C.mv(None, cv)                    # a covector is not a vector
    with pytest.raises(TypeError):
        C.mv(flat(v, space.names), v)     # a point is a dict
    with pytest.raises(ValueError):
        C.mv({"nope": torch.zeros(1)}, v)


@pytest.mark.parametrize("kind", ["kfac", "diag"])
def test_a_curvature_is_a_solvers_metric(space, kind):
    """Handed to a solver as its metric, a curvature preconditions gradient descent (a fixed metric): the
    first step is -(C + λI)^{-1} df scaled by the line search, and the cost decreases."""
    C = space.curvature(kind)
    cost = space.cost(torch.randint(0, 3, (10,)))
    res = ig.solvers.GradientDescent(metric=C, damping=1e-2, max_iter=5).minimize(space, cost, space.point)
    assert res.fun < float(cost(space.point))


@pytest.mark.parametrize("kind", KINDS)
def test_matmul_and_scipy_operator(space, kind):
    C = space.curvature(kind)
    M = C.to_dense()
    g = torch.Generator().manual_seed(2)
    v, V = torch.randn(space.dim, dtype=torch.float64, generator=g), torch.randn(space.dim, 3, dtype=torch.float64)
    assert rel(C @ v, M @ v) < EXACT and rel(C @ V, M @ V) < EXACT
    L = C.to_scipy()
    assert L.shape == (space.dim, space.dim)
    assert np.allclose(L @ v.numpy(), (M @ v).numpy(), rtol=1e-12, atol=1e-14)
    assert np.allclose(L.matmat(V.numpy()), (M @ V).numpy(), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="shape"):
        C @ torch.zeros(space.dim + 1, dtype=torch.float64)


def test_linear_combinations(space):
    A, B = space.curvature("kfac"), space.curvature("diag")
    MA, MB = A.to_dense(), B.to_dense()
    for C, ref in ((A + B, MA + MB), (2.5 * A, 2.5 * MA), (A - 0.5 * B, MA - 0.5 * MB), (A * 3, 3 * MA),
                   (A.ema(space.metric.at(), 0.9), 0.9 * MA + 0.1 * space.metric.matrix())):
        assert rel(C.to_dense(), ref) < EXACT
        v = rand_like(space)
        assert rel(flat(C.mv(None, v), space.names), ref @ flat(v, space.names)) < EXACT
        assert rel(flat(C.diagonal(), space.names), torch.diagonal(ref)) < EXACT
    D = (A + B).damped(0.2)
    w = rand_like(space)
    ref = torch.linalg.solve(MA + MB + 0.2 * torch.eye(space.dim, dtype=MA.dtype), flat(w, space.names))
    assert rel(flat(D.solve(None, w), space.names), ref) < 1e-8
    assert rel(D.to_dense(), MA + MB + 0.2 * torch.eye(space.dim, dtype=MA.dtype)) < EXACT


def test_network_metric_as_operator(space):
    G = space.metric.matrix()
    v = torch.randn(space.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert rel(space.metric @ v, G @ v) < EXACT
    assert np.allclose(space.metric.to_scipy() @ v.numpy(), (G @ v).numpy(), rtol=1e-12, atol=1e-14)
    assert rel((space.metric + space.curvature("diag")).to_dense(), G + torch.diag(torch.diagonal(G))) < EXACT
    # space.metric.mv accepts the TangentVector that sharp returns (the README's use)
    nat = space.metric.sharp(space.covector(space.layout.unflatten(v)), damping=1e-2)
    back = space.metric.mv(None, nat)
    assert rel(flat(back, space.names) + 1e-2 * flat(nat.components, space.names), v) < 1e-7


def within(est, truth, k=3.0):
    return float((est.value - truth).abs()) <= k * float(est.stderr) + 1e-12 * float(truth.abs())


@pytest.mark.parametrize("kind", ["dense", "implicit", "kfac"])
def test_trace_estimators_unbiased(space, kind):
    C = space.curvature(kind).damped(0.05)       # full rank: the deflated rest is not empty
    tr = torch.trace(C.to_dense())
    g = torch.Generator().manual_seed(7)
    hutch = operators.hutchinson_trace(C, 60, generator=g)
    hpp = C.estimate_trace(60, method="hutch++", generator=g)
    assert within(hutch, tr) and within(hpp, tr)
    assert 0 < float(hpp.stderr) < float(hutch.stderr)      # deflation helps on a low-rank-plus-small curvature
    if kind == "kfac":
        return
    # the GGN has rank <= N (C - 1) = 20: a sketch of 20 columns captures all of it, and Hutch++ is exact
    C = space.curvature(kind)
    tr = torch.trace(C.to_dense())
    exact = operators.hutchpp_trace(C, 60, generator=g)
    assert abs(float(exact.value - tr)) < 1e-8 * float(tr)


def test_diagonal_estimator_unbiased(space):
    C = space.curvature("block")
    d = torch.diagonal(C.to_dense())
    est = operators.hutchinson_diagonal(C, 200, generator=torch.Generator().manual_seed(11))
    z = (est.value - d) / est.stderr.clamp_min(1e-300)
    informative = est.stderr > 0
    assert float((z[informative].abs() <= 3).double().mean()) >= 0.95
    assert torch.allclose(est.value[~informative], d[~informative], atol=1e-14)
    assert rel(flat(C.estimate_diagonal(400, generator=torch.Generator().manual_seed(1)), space.names), d) < 0.5


@pytest.mark.parametrize("kind", ["dense", "implicit", "kfac"])
def test_top_eigenvalues_by_lanczos(space, kind):
    C = space.curvature(kind)
    ref = torch.linalg.eigvalsh(C.to_dense()).flip(0)[:3]
    assert rel(C.top_eigenvalues(3), ref) < 1e-8
    assert rel(operators.top_eigenvalues(C, space.dim), torch.linalg.eigvalsh(C.to_dense()).flip(0)) < 1e-8
    with pytest.raises(ValueError, match="k must be"):
        C.top_eigenvalues(0)
