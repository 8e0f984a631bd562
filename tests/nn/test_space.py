"""ParameterSpace, output metrics and every curvature representation against a dense jacrev reference."""
import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from .conftest import (TinyConv, TinyTransformer, categorical_Gz, flat, mlp, params_of,  # noqa: E402
                      reference_metric)

EXACT = 1e-10


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def rand_like(space, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in space.point.items()}


def check_consistent(C, space, damping=1e-2):
    """mv, solve, diagonal agree with to_dense (mv, inverse, diagonal of the same matrix)."""
    M = C.to_dense()
    v = rand_like(space)
    names = space.names
    assert rel(flat(C.mv(None, v), names), M @ flat(v, names)) < EXACT
    Minv = torch.linalg.solve(M + damping * torch.eye(M.shape[0], dtype=M.dtype), flat(v, names))
    assert rel(flat(C.solve(None, v, damping), names), Minv) < 1e-8
    assert rel(flat(C.diagonal(), names), torch.diagonal(M)) < EXACT
    return M


def test_ig_nn_attribute():
    assert hasattr(ig, "nn") and ig.nn.ParameterSpace is not None


def test_metric_is_pullback_and_matches_reference(small_mlp):
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    assert isinstance(space.metric, ig.PullbackMetric) and isinstance(space.metric, ig.Metric)
    G = reference_metric(model, X, categorical_Gz)
    v = rand_like(space)
    assert rel(flat(space.metric.mv(None, v), space.names), G @ flat(v, space.names)) < EXACT
    assert rel(space.metric.matrix(), G) < EXACT
    # sharp is the damped inverse, flat the product; sharp(flat(v)) = v with damping 0 on a full-rank G + λI
    w = space.covector(v)
    u = space.metric.sharp(w, damping=1e-2)
    assert rel(flat(u.components, space.names),
               torch.linalg.solve(G + 1e-2 * torch.eye(G.shape[0], dtype=G.dtype), flat(v, space.names))) < 1e-7
    back = space.metric.flat(u)
    assert rel(flat(back.components, space.names) + 1e-2 * flat(u.components, space.names), flat(v, space.names)) < 1e-7


@pytest.mark.parametrize("kind", ["implicit", "dense"])
def test_full_representations_exact(kind, small_mlp):
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    C = space.curvature(kind)
    M = check_consistent(C, space)
    assert rel(M, reference_metric(model, X, categorical_Gz)) < EXACT


@pytest.mark.parametrize("make", [lambda: (mlp(), torch.randn(6, 4, dtype=torch.float64)),
                                  lambda: (TinyConv().double(), torch.randn(5, 2, 6, 6, dtype=torch.float64)),
                                  lambda: (TinyTransformer().double(), torch.randint(0, 7, (5, 3)))],
                         ids=["mlp", "conv", "transformer"])
def test_diag_and_block_exact(make):
    torch.manual_seed(0)
    model, X = make()
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = reference_metric(model, X, categorical_Gz)
    D = space.curvature("diag")
    check_consistent(D, space)
    assert rel(flat(D.diagonal(), space.names), torch.diagonal(G)) < EXACT
    B = space.curvature("block")
    MB = check_consistent(B, space)
    # each block equals the reference's block; everything off the blocks is zero
    mask = MB != 0
    assert rel(MB, G * mask) < EXACT
    lay = space.layout
    for blk in B.blocks:
        idx = torch.cat([torch.arange(lay.offsets[n], lay.offsets[n] + lay.numels[n]) for n in blk.names])
        assert rel(MB[idx][:, idx], G[idx][:, idx]) < EXACT


def test_kfac_single_linear_euclidean_is_exact():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    X = torch.randn(7, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    K = space.curvature("kfac")
    M = check_consistent(K, space)
    assert rel(M, reference_metric(model, X, lambda z: torch.eye(3, dtype=z.dtype).expand(7, 3, 3))) < EXACT


@pytest.mark.parametrize("make", [lambda: (mlp(), torch.randn(6, 4, dtype=torch.float64)),
                                  lambda: (TinyConv().double(), torch.randn(5, 2, 6, 6, dtype=torch.float64))],
                         ids=["mlp", "conv"])
def test_kfac_factors(make):
    """Each K-FAC block is G ⊗ A built from independently recomputed layer inputs and output gradients."""
    model, X = make()
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    K = space.curvature("kfac")
    check_consistent(K, space)
    kinds = {b.kind for b in K.blocks}
    assert kinds == {"kfac"}
    # reference for the last Linear layer: A from its inputs, G from softmax sqrt columns (its outputs are z)
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    acts = {}
    h = last.register_forward_hook(lambda m, i, o: acts.update(a=i[0].detach()))  # returns None: output kept
    z = model(X).detach()
    h.remove()
    a = torch.cat([acts["a"], torch.ones(len(X), 1, dtype=X.dtype)], 1)
    A = a.T @ a / len(X)
    G = categorical_Gz(z).mean(0)  # sum_k s_k s_k^T averaged over examples
    blk = K.blocks[-1]
    assert rel(blk.A, A) < EXACT and rel(blk.G, G) < EXACT


def test_kfac_mixed_fallback_on_transformer():
    torch.manual_seed(0)
    model = TinyTransformer().double()
    X = torch.randint(0, 7, (5, 3))
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    K = space.curvature("kfac")
    check_consistent(K, space)
    kinds = {n: b.kind for b in K.blocks for n in b.names}
    assert kinds["q.weight"] == "kfac" and kinds["k.weight"] == "kfac" and kinds["out.weight"] == "kfac"
    assert kinds["emb.weight"] == "kfac"     # diag(token frequencies) ⊗ G
    assert kinds["ln.weight"] == "diag" and kinds["mix.proj"] == "diag"
    G = reference_metric(model, X, categorical_Gz)
    # diagonal blocks are exact diagonals
    D = K.diagonal()
    for n in ("ln.bias", "mix.gain"):
        sl = slice(space.layout.offsets[n], space.layout.offsets[n] + space.layout.numels[n])
        assert rel(D[n].reshape(-1), torch.diagonal(G)[sl]) < EXACT


def test_reused_module_falls_back_to_whole_network():
    """A Linear applied twice cannot be split per call: its diagonal comes from per-example vjps, still exact."""
    torch.manual_seed(0)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.f = torch.nn.Linear(3, 3)
            self.out = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.out(torch.tanh(self.f(torch.tanh(self.f(x)))))

    model = Twice().double()
    X = torch.randn(5, 3, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = reference_metric(model, X, categorical_Gz)
    d = space.curvature("diag").diagonal()
    assert rel(flat(d, space.names), torch.diagonal(G)) < EXACT
    assert not any(t.requires_grad for t in d.values())   # no graph to the model's own parameters
    M = space.curvature("block").to_dense()
    assert rel(M, G * (M != 0)) < EXACT and not M.requires_grad


OUTPUTS = {
    "euclidean": (lambda: ig.nn.EuclideanOutput(), lambda z: torch.eye(z.shape[-1], dtype=z.dtype).expand(z.shape + z.shape[-1:])),
    "gaussian": (lambda: ig.nn.GaussianFisher(variance=0.25), lambda z: 4 * torch.eye(z.shape[-1], dtype=z.dtype).expand(z.shape + z.shape[-1:])),
    "bernoulli": (lambda: "bernoulli", lambda z: torch.diag_embed(torch.sigmoid(z) * (1 - torch.sigmoid(z)))),
    "gaussian_learned": (lambda: "gaussian_learned",
                         lambda z: torch.diag_embed(torch.cat([torch.exp(-z[..., 2:]), 0.5 * torch.ones_like(z[..., 2:])], -1))),
    "bregman": (lambda: ig.nn.DivergenceOutput(ig.Bregman(lambda u: torch.exp(u).sum())),
                lambda z: torch.diag_embed(torch.exp(z))),
    "hvp": (lambda: ig.nn.HessianOutput(lambda z, v: 2 * v + v.sum(-1, keepdim=True)),
            lambda z: (2 * torch.eye(z.shape[-1], dtype=z.dtype) + 1).expand(z.shape + z.shape[-1:])),
}


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_output_metrics(name):
    make, Gz = OUTPUTS[name]
    model = mlp(sizes=(3, 4, 4))
    X = torch.randn(5, 3, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, make(), data=X)
    G = reference_metric(model, X, Gz)
    assert rel(space.curvature("dense").to_dense(), G) < EXACT
    assert rel(flat(space.curvature("diag").diagonal(), space.names), torch.diagonal(G)) < 1e-9


def test_true_fisher_equals_ggn_categorical_and_gaussian():
    """Fisher pullback = J^T (Hessian of the NLL in z) J, the Hessian taken by autodiff of torch's own losses."""
    model, X = mlp(), torch.randn(6, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (6,))
    H = lambda z: torch.stack([torch.func.hessian(lambda u: torch.nn.functional.cross_entropy(u, t))(zi)
                               for zi, t in zip(z, y)])
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    assert rel(space.true_fisher("dense").to_dense(), reference_metric(model, X, H)) < EXACT
    yr = torch.randn(6, 3, dtype=torch.float64)
    Hg = lambda z: torch.stack([torch.func.hessian(lambda u: torch.nn.functional.gaussian_nll_loss(
        u, t, torch.full_like(t, 0.5), reduction="sum"))(zi) for zi, t in zip(z, yr)])
    space = ig.nn.ParameterSpace(model, ig.nn.GaussianFisher(0.5), data=X)
    assert rel(space.true_fisher("dense").to_dense(), reference_metric(model, X, Hg)) < EXACT


def per_example_grads(model, X, y):
    gs = []
    for xi, yi in zip(X, y):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(xi[None]), yi[None]).backward()
        gs.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    model.zero_grad()
    return torch.stack(gs)


@pytest.mark.parametrize("kind", ["dense", "implicit", "diag", "block"])
def test_empirical_fisher_and_gradient_covariance(kind):
    model, X = mlp(), torch.randn(6, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (6,))
    g = per_example_grads(model, X, y)
    Femp = g.T @ g / len(X)
    gbar = g.mean(0)
    Cov = (g - gbar).T @ (g - gbar) / len(X)
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)
    F = space.empirical_fisher(kind).to_dense()
    C = space.gradient_covariance(kind).to_dense()
    mask = (F != 0) if kind == "block" else torch.ones_like(F, dtype=bool)
    if kind == "diag":
        F, C, Femp, Cov = torch.diagonal(F), torch.diagonal(C), torch.diagonal(Femp), torch.diagonal(Cov)
        mask = torch.ones_like(F, dtype=bool)
    assert rel(F, Femp * mask) < EXACT
    assert rel(C, Cov * mask) < 1e-9
    # F_emp = C + gbar gbar^T
    if kind == "dense":
        assert rel(F, C + torch.outer(gbar, gbar)) < EXACT


@pytest.mark.parametrize("kind", ["diag", "kfac", "dense"])
def test_monte_carlo_unbiased(kind):
    """The Pullback Sampling Trick estimate averages to the exact curvature (3 standard errors)."""
    model, X = mlp(), torch.randn(6, 4, dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    exact = space.curvature(kind).to_dense()
    gen = torch.Generator().manual_seed(0)
    w = torch.rand(exact.shape, generator=torch.Generator().manual_seed(1), dtype=exact.dtype)
    if kind == "diag":
        w = torch.diag(torch.diagonal(w))
    R = 200
    est = torch.stack([(space.curvature(kind, "mc", samples=2, generator=gen).to_dense() * w).sum()
                       for _ in range(R)])
    se = est.std() / math.sqrt(R)
    assert abs(est.mean() - (exact * w).sum()) < 3 * se
    assert se > 0  # it is random


def test_sampled_output_metric_mc_only():
    model, X = mlp(), torch.randn(6, 4, dtype=torch.float64)

    def sampler(z, generator):  # the score of a class drawn from the model
        p = torch.softmax(z, -1)
        t = torch.multinomial(p, 1, generator=generator).squeeze(1)
        return p - torch.nn.functional.one_hot(t, p.shape[-1]).to(p.dtype)

    space = ig.nn.ParameterSpace(model, ig.nn.SampledOutput(sampler), data=X)
    exact = ig.nn.ParameterSpace(model, "categorical", data=X).curvature("diag").to_dense().diagonal()
    gen = torch.Generator().manual_seed(0)
    est = torch.stack([space.curvature("diag", "mc", generator=gen).to_dense().diagonal().sum() for _ in range(300)])
    assert abs(est.mean() - exact.sum()) < 3 * est.std() / math.sqrt(300)
    with pytest.raises(NotImplementedError, match="Monte Carlo"):
        space.curvature("diag")


def test_model_untouched_and_hooks_removed(small_mlp):
    model, X = small_mlp
    before = copy.deepcopy(model.state_dict())
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    for kind in ("implicit", "dense", "diag", "kfac", "block"):
        C = space.curvature(kind)
        C.mv(None, rand_like(space))
    space.curvature("diag", "mc")
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(not m._forward_hooks for m in model.modules())
    assert all(p.grad is None for p in model.parameters())


def test_float32():
    model = mlp().float()
    X = torch.randn(6, 4)
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    for kind in ("diag", "kfac", "block", "implicit"):
        C = space.curvature(kind)
        out = C.solve(None, rand_like(space), damping=1e-2)
        assert all(t.dtype == torch.float32 for t in out.values())
    G = reference_metric(model.double(), X.double(), categorical_Gz)
    model.float()
    d = flat(ig.nn.ParameterSpace(model, "categorical", data=X).curvature("diag").diagonal(), space.names)
    assert rel(d.double(), torch.diagonal(G)) < 1e-5


# ----------------------------------------------------------------- bad input
def test_no_trainable_parameters():
    model = mlp()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 4, dtype=torch.float64))


def test_shape_mismatches():
    model = mlp()
    with pytest.raises(ValueError, match=r"data of shape.*\(3, 5\)"):
        ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="even last axis"):
        ig.nn.ParameterSpace(model, "gaussian_learned", data=torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="last axis of size 4"):
        ig.nn.ParameterSpace(model, ig.nn.HessianOutput(lambda z, v: v, dim=4),
                             data=torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="targets must have shape"):
        ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 4, dtype=torch.float64),
                             targets=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"lie in \[0, 3\)"):
        ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 4, dtype=torch.float64),
                             targets=torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="unknown output metric"):
        ig.nn.ParameterSpace(model, "poisson", data=torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="needs training targets"):
        ig.nn.ParameterSpace(model, "categorical", data=torch.randn(3, 4, dtype=torch.float64)).empirical_fisher("diag")


def test_bad_damping_and_vectors(small_mlp):
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    C = space.curvature("diag")
    v = rand_like(space)
    with pytest.raises(ValueError, match="damping must be >= 0"):
        C.solve(None, v, damping=-1.0)
    with pytest.raises(ValueError, match="damping must be >= 0"):
        space.metric.solve(None, v, damping=-1.0)
    bad = dict(v)
    bad.pop(space.names[0])
    with pytest.raises(ValueError, match="keys"):
        C.mv(None, bad)
    with pytest.raises(ValueError, match="unknown curvature kind"):
        space.curvature("lanczos")
    with pytest.raises(ValueError, match="unknown method"):
        space.curvature("diag", "fancy")


# ----------------------------------------------------------------- the manifold and the solvers
def classifier(seed=0):
    torch.manual_seed(seed)
    model = mlp(seed, sizes=(4, 8, 3))
    X = torch.randn(32, 4, dtype=torch.float64)
    y = (X[:, 0] + X[:, 1] > 0).long() + (X[:, 2] > 1).long()
    return model, X, y


def test_parameter_space_is_a_manifold():
    model, X, y = classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    assert isinstance(space, ig.Manifold) and space.dim == space.layout.size
    x = space.point(space.layout.flatten(space.point) * 0.5)          # a flat vector in layout order
    assert isinstance(x, dict) and space.belongs(x) and not space.belongs({"0.weight": x["0.weight"]})
    with pytest.raises(ValueError, match="NaN"):
        space.check_point({n: t * float("nan") for n, t in x.items()})
    # differential(cost, x): backprop at x; with no arguments: the batch loss at the current point
    cost = space.cost()
    df = space.differential(cost, x)
    xs = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    ref = torch.autograd.grad(torch.nn.functional.cross_entropy(torch.func.functional_call(model, xs, (X,)), y),
                              list(xs.values()))
    assert isinstance(df, ig.Covector) and rel(flat(df.components, space.names), torch.cat(
        [g.reshape(-1) for g in ref])) < EXACT
    assert rel(flat(space.differential().components, space.names),
               flat(space.differential(y).components, space.names)) < 1e-15     # the earlier signature
    # retract is addition; geodesics are refused clearly
    v = space.vector(x, rand_like(space))
    moved = space.retract(x, v)
    assert all(torch.equal(moved[n], x[n] + v.components[n]) for n in space.names)
    with pytest.raises(TypeError, match="sharp"):
        space.retract(x, space.covector(x, v.components))
    with pytest.raises(NotImplementedError, match="retract"):
        space.exp(x, v)


def test_gradient_descent_is_the_natural_gradient_optimizer():
    """ig.solvers.GradientDescent on a ParameterSpace: its first step is NaturalGradient's (exact Fisher)."""
    model, X, y = classifier()
    before = copy.deepcopy(model.state_dict())
    lam = 0.1
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    res = ig.solvers.GradientDescent(step_size=1.0, damping=lam, max_iter=8).minimize(space, space.cost(), space.point)
    assert res.fun < 0.7 * res.history[0]["fun"]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())   # the solver moves points only
    first = flat(res.history[1]["x"], space.names)
    # the solvers' NaturalGradient (a deprecated alias of GradientDescent), and GradientDescent under a curvature
    # frozen at x0, take the same first step
    with pytest.warns(DeprecationWarning, match="GradientDescent"):
        nat = ig.solvers.NaturalGradient(step_size=1.0, damping=lam, max_iter=1).minimize(space, space.cost(),
                                                                                         space.point)
    frozen = ig.solvers.GradientDescent(step_size=1.0, damping=lam, max_iter=1).minimize(
        space.with_metric(space.curvature("dense")), space.cost(), space.point)
    assert rel(flat(nat.x, space.names), first) < 1e-9 and rel(flat(frozen.x, space.names), first) < 1e-9
    for curvature in ("dense", "cg"):
        net = copy.deepcopy(model)
        opt = ig.nn.NaturalGradient(net.parameters(), lr=1.0, curvature=curvature, damping=lam, model=net,
                                    fisher="exact", cg_max_iter=500, kl_clip=None, step_rule="clip")
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(X), y).backward()
        opt.step(inputs=X)
        assert rel(flat(params_of(net), space.names), first) < 1e-9


def test_trust_region_and_damped_newton_on_a_network():
    model, X, y = classifier(1)
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    cost, x0 = space.cost(), space.point
    f0 = float(cost(x0))
    # the exact-Hessian model uses Hessian-vector products of the cost at dict points
    v = rand_like(space)
    H = torch.func.hessian(lambda w: cost(space.layout.unflatten(w)))(space.layout.flatten(x0))
    assert rel(flat(ig.backend.hvp(cost, dict(x0), v), space.names), H @ flat(v, space.names)) < EXACT
    for solver in (ig.solvers.TrustRegion(hessian="exact", max_iter=10),
                   ig.solvers.TrustRegion(hessian="metric", max_iter=10),
                   ig.solvers.DampedNewton(damping_newton=10.0, max_iter=10)):
        # Newton's H + lambda G needs a G without null space where H is indefinite: G + I
        M = space.with_metric(space.metric.damped(1.0)) if isinstance(solver, ig.solvers.DampedNewton) else space
        res = solver.minimize(M, cost, x0)
        assert res.fun < f0, (type(solver).__name__, res.message)


@pytest.mark.parametrize("rng", [0, "numpy", "torch"])
def test_random_point_takes_the_generators_of_every_manifold(rng, small_mlp):
    """random_point takes a seed or numpy Generator (as the other manifolds do) or a torch Generator;
    the same seed gives the same point, the noise has the requested scale, the model is untouched."""
    import numpy as np
    model, X = small_mlp
    space = ig.nn.ParameterSpace(model, data=X)
    before = {n: t.clone() for n, t in space.point.items()}

    def make():
        return {0: 0, "numpy": np.random.default_rng(0), "torch": torch.Generator().manual_seed(0)}[rng]

    a, b = space.random_point(make(), scale=0.5), space.random_point(make(), scale=0.5)
    for n in space.names:
        assert torch.equal(a[n], b[n])
        assert torch.equal(space.point[n], before[n])
    noise = torch.cat([(a[n] - before[n]).flatten() for n in space.names])
    assert abs(float(noise.std()) - 0.5) < 0.5 * 6 / noise.numel() ** 0.5   # six standard errors of the std
    space.check_point(a)


@pytest.mark.parametrize("kind", ["implicit", "dense", "diag"])
def test_a_curvature_stays_at_the_point_it_was_built_at(kind):
    """The model's parameters are views that an optimizer step changes in place: a curvature built before keeps
    its point (the implicit one a copy of it), its products and solves those of the metric there."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    X, y = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,))
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    C = space.curvature(kind)
    before = C.to_dense().clone()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    assert torch.equal(C.to_dense(), before)
    if kind == "implicit":   # and the current point's own curvature is the new one
        assert not torch.allclose(space.curvature(kind).to_dense(), before)


def _classifier():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    X, y = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,))
    return model, X, y


@pytest.mark.parametrize("convert", [lambda y: y.tolist(), lambda y: y.numpy(), lambda y: tuple(y.tolist())])
def test_array_like_targets_are_converted(convert):
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=convert(y))
    reference = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    assert torch.equal(space.loss(), reference.loss()) and torch.equal(reference.loss(convert(y)), reference.loss())


@pytest.mark.parametrize("bad", [1.0, "abc", {"y": 1}, None.__class__, [["a"]], [[1, 2], [3]]])
def test_targets_that_are_not_array_like_are_refused_by_name(bad):
    model, X, y = _classifier()
    with pytest.raises(TypeError, match="targets must be"):
        ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=bad)
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    with pytest.raises(TypeError, match="targets must be"):
        space.loss(bad)


_INF, _META = float("inf"), (lambda: torch.tensor(1e-2, device="meta"))


@pytest.mark.parametrize("call,error,match", [
    (lambda sp, m: ig.nn.NaturalGradient(m, lr=_META()), TypeError, "lr must be a real number.*meta"),
    (lambda sp, m: ig.nn.NaturalGradient(m, lr=0.1, damping=_META()), TypeError, "damping .*meta"),
    (lambda sp, m: ig.nn.NaturalGradient(m, lr=0.1, eps=_META()), TypeError, "eps .*meta"),
    (lambda sp, m: sp.curvature("dense").solve(None, {n: torch.ones_like(t) for n, t in sp.point.items()},
                                              damping=_META()), TypeError, "damping .*meta"),
    (lambda sp, m: ig.nn.NaturalGradient(m, lr=0.1, max_factor_dim=_INF), ValueError, "max_factor_dim"),
    (lambda sp, m: ig.nn.NaturalGradient(m, lr=0.1, max_factor_bytes=float("nan")), ValueError, "max_factor_bytes"),
    (lambda sp, m: sp.curvature("diag", "mc", samples=_INF), ValueError, "samples must be an integer"),
    (lambda sp, m: sp.curvature("implicit", max_iter=_INF), ValueError, "max_iter must be an integer"),
    (lambda sp, m: ig.nn.ParameterSpace(m, torch.nn.CrossEntropyLoss(), data=sp.batch.tensors()[0],
                                        cg_max_iter=_INF), ValueError, "cg_max_iter must be an integer"),
    (lambda sp, m: sp.curvature("dense").estimate_trace(_INF), ValueError, "samples must be an integer"),
    (lambda sp, m: sp.curvature("dense").estimate_diagonal(float("nan")), ValueError, "samples must be an integer"),
    (lambda sp, m: sp.curvature("dense").top_eigenvalues(_INF), ValueError, "k must be an integer"),
    (lambda sp, m: sp.curvature("dense").top_eigenvalues(10 ** 6), ValueError, "k must be an integer in"),
])
def test_numbers_without_a_value_are_refused_by_name(call, error, match):
    """An infinite or NaN count (an OverflowError from int()) and a number on the meta device (a RuntimeError from
    Tensor.item()) are refused by the name of the argument."""
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    with pytest.raises(error, match=match):
        call(space, model)


@pytest.mark.parametrize("kind,option,value,error", [
    ("diag", "chunk_elements", "abc", TypeError), ("diag", "chunk_elements", -1, ValueError),
    ("diag", "chunk_elements", float("nan"), ValueError), ("diag", "chunk_elements", None, TypeError),
    ("kfac", "per_position", "no", TypeError), ("kfac", "factors_only", float("nan"), TypeError),
    ("block", "max_block_size", -5, ValueError), ("block", "max_block_size", 0, ValueError),
    ("block", "max_block_size", float("nan"), ValueError),
])
def test_curvature_option_values_are_checked_by_name(kind, option, value, error):
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    with pytest.raises(error, match=option):
        space.curvature(kind, **{option: value})
    with pytest.raises(error, match=option):
        ig.nn.NaturalGradient(model, lr=0.1, curvature=kind, **{option: value})


@pytest.mark.parametrize("kind", ["kfac", "ekfac", "diag", "dense", "implicit"])
def test_averages_of_curvatures_refuse_what_is_not_one(kind):
    """``ema`` and ``pooled`` took anything: a number for the other curvature raised an AttributeError inside, a
    batch of 0 examples a ZeroDivisionError, a decay of 2 an average with a negative weight."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    C = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(5, 3, dtype=torch.float64)).curvature(kind)
    for bad, error in ((lambda: C.ema(0.5, 0.5), TypeError), (lambda: C.ema(C, 2.0), ValueError),
                       (lambda: C.ema(C, float("nan")), ValueError), (lambda: C.pooled(C, 0, 1), ValueError),
                       (lambda: C.pooled(C, 2, 1.5), ValueError), (lambda: C.pooled("C", 2, 1), TypeError)):
        with pytest.raises(error):
            bad()
    assert torch.allclose(C.pooled(C, 2, 3).to_dense(), C.to_dense(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("bad,error", [(0.5, TypeError), (True, TypeError), ("0", TypeError), ([1, 2], TypeError),
                                       (torch.tensor(1), TypeError), (-1, ValueError)])
def test_random_point_refuses_what_is_not_a_seed_or_generator_by_name(bad, error):
    """rng=0.5 reached numpy's "SeedSequence expects int or sequence of ints" (naming no argument); True and a list
    were taken as seeds."""
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    with pytest.raises(error, match="rng must be"):
        space.random_point(rng=bad)
    state = np.random.RandomState(0)   # taken, as by the other manifolds: its state advances
    a, b = space.random_point(rng=state), space.random_point(rng=state)
    assert not torch.equal(a["0.weight"], b["0.weight"])


@pytest.mark.parametrize("bad,error,match", [
    (lambda sp: torch.tensor(1.0), TypeError, "retract takes the point x as a dict.*space.point"),
    (lambda sp: sp.layout.flatten(sp.point), TypeError, "retract takes the point x as a dict.*space.point"),
    (lambda sp: None, TypeError, "the point x of retract must be a dict"),
    (lambda sp: {}, ValueError, "the point x of retract has keys"),
    (lambda sp: {n: t.reshape(-1) for n, t in sp.point.items()}, ValueError,
     r"the point x of retract\['0.weight'\] has shape"),
], ids=["scalar tensor", "flat vector", "None", "empty dict", "flattened tensors"])
def test_retract_refuses_a_point_that_is_not_a_parameter_dict_by_name(bad, error, match):
    """retract(x=tensor) raised 'too many indices for tensor of dimension 0' (IndexError), x={} a KeyError."""
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    v = space.vector({n: torch.ones_like(t) for n, t in space.point.items()})
    with pytest.raises(error, match=match):
        space.retract(bad(space), v)
    moved = space.retract(space.point(space.layout.flatten(space.point)), v)   # a flat point, laid out first
    assert all(torch.equal(moved[n], space.point[n] + 1) for n in space.names)


@pytest.mark.parametrize("bad,error,match", [
    (None, TypeError, "factors takes the outputs z, a floating tensor.*got NoneType"),
    (np.ones((8, 3)), TypeError, "got ndarray"),
    (torch.ones(8, 3, dtype=torch.long), TypeError, "got a torch.int64 tensor"),
    (torch.tensor(1.0), ValueError, r"with a batch axis, got shape \(\)"),
], ids=["None", "numpy", "integers", "scalar"])
def test_factors_refuses_what_is_not_the_outputs_by_name(bad, error, match):
    """factors(None) raised "'NoneType' object has no attribute 'detach'", a 0-d tensor an IndexError inside the
    output metric, integer outputs softmax's NotImplementedError."""
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    with pytest.raises(error, match=match):
        space.factors(bad)
    assert space.factors(space.outputs).shape == (3,) + tuple(space.outputs.shape)


@pytest.mark.parametrize("make", [
    lambda model, X, y: (lambda params: torch.tensor(0.5)),
    lambda model, X, y: (lambda params: torch.tensor(0.5, dtype=torch.float64, requires_grad=True)),
    lambda model, X, y: None,   # the batch loss of outputs cut from the graph by output_fn
], ids=["constant", "a leaf of its own", "detached outputs"])
def test_the_differential_of_a_cost_that_does_not_depend_on_the_parameters_is_zero(make):
    """torch.autograd.grad raised 'element 0 of tensors does not require grad and does not have a grad_fn'."""
    model, X, y = _classifier()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y,
                                 output_fn=lambda out: out.detach())
    before = {n: t.clone() for n, t in space.point.items()}
    value, d = space.value_and_differential(make(model, X, y) or space.cost(), space.point)
    assert value.shape == () and bool(torch.isfinite(value))
    assert set(d.components) == set(space.names)
    for n in space.names:
        assert d.components[n].shape == space.point[n].shape and d.components[n].dtype == space.point[n].dtype
        assert not d.components[n].any() and torch.equal(space.point[n], before[n])
    assert not any(t.any() for t in space.differential(make(model, X, y)).components.values())


class _Sliced(torch.nn.Module):
    """Outputs of a width, and rows, its forward reads from attributes (changes no probe key sees)."""

    def __init__(self):
        super().__init__()
        self.net, self.width = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 5)), 5
        self.twice = False

    def forward(self, x):
        z = self.net(x)[:, :self.width]
        return torch.cat([z, z]) if self.twice else z


def test_a_spaces_meta_probe_is_kept_for_the_next_space_and_bound_again_where_the_outputs_changed():
    """A space probes its outputs' shape by a meta-device forward, kept for the next space on the same model and
    inputs of the same shapes (on a small network that forward costs more than the real one): one meta forward for
    two spaces.  A change the probe's key cannot see (an attribute the forward reads) is met at the first real
    forward, which binds the metric again: the curvature equals that of a space built with nothing kept."""
    from infogeo.nn import _outputs
    torch.manual_seed(0)
    model = _Sliced().double()
    X = torch.randn(7, 4, dtype=torch.float64)
    metas = []
    handle = model.register_forward_pre_hook(lambda m, args: metas.append(args[0].is_meta))
    first = ig.nn.ParameterSpace(model, "categorical", data=X)
    second = ig.nn.ParameterSpace(model, "categorical", data=X)
    handle.remove()
    assert metas == [True] and first.batch_size == second.batch_size == 7
    model.width = 3   # the kept probe (5 outputs) no longer holds
    stale = ig.nn.ParameterSpace(model, "categorical", data=X)
    got = stale.curvature("kfac", "exact").stats()
    assert stale.output_metric.check(stale.outputs) is None and stale.outputs.shape == (7, 3)
    _outputs._PROBED.clear()
    want = ig.nn.ParameterSpace(model, "categorical", data=X).curvature("kfac", "exact").stats()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    # outputs with other rows than the inputs: refused as at construction (with the kept probe's 7 rows the
    # curvature would have been averaged over 7 examples, unseen)
    model.twice = True
    stale = ig.nn.ParameterSpace(model, "categorical", data=X)
    with pytest.raises(ValueError, match="outputs have 14 examples"):
        stale.curvature("diag", "exact")
    _outputs._PROBED.clear()
    with pytest.raises(ValueError, match="outputs have 14 examples"):
        ig.nn.ParameterSpace(model, "categorical", data=X)


def test_a_parameter_whose_tensor_is_replaced_is_seen_by_the_space():
    """``torch.nn.utils.vector_to_parameters`` assigns ``p.data``: the space kept viewing the old tensors, so its
    loss and metric were those of the old point with no sign (a probe found loss 0.796 for 0.693)."""
    torch.manual_seed(0)
    X, y = torch.randn(6, 3, dtype=torch.float64), torch.randint(0, 2, (6,))
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    v = {n: torch.randn_like(p) for n, p in space.point.items()}
    before = space.metric.mv(None, v)
    vec = torch.nn.utils.parameters_to_vector(model.parameters())
    torch.nn.utils.vector_to_parameters(0.5 * vec + 0.1, model.parameters())
    assert float(space.loss()) == pytest.approx(float(torch.nn.functional.cross_entropy(model(X), y)), rel=1e-14)
    fresh = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)
    got, want = space.metric.mv(None, v), fresh.metric.mv(None, v)
    assert all(torch.allclose(got[n], want[n], rtol=1e-12, atol=1e-15) for n in v)
    assert not all(torch.allclose(got[n], before[n]) for n in v)


def test_the_metric_at_a_point_that_is_not_finite_is_refused():
    """``metric.mv(x, v)`` and ``metric.matrix(x)`` at a point with NaN gave NaN with no sign (the numpy pullback
    metric refused it)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(6, 3, dtype=torch.float64))
    v = {n: torch.randn_like(p) for n, p in space.point.items()}
    bad = {n: t * float("nan") for n, t in space.point.items()}
    with pytest.raises(ValueError, match="NaN or inf"):
        space.metric.mv(bad, v)
    with pytest.raises(ValueError, match="NaN or inf"):
        space.metric.matrix(bad)
    x = {n: t + 0.1 for n, t in space.point.items()}   # a finite point other than the model's: taken
    G = space.metric.matrix(x)
    flat = torch.cat([space.metric.mv(x, v)[n].reshape(-1) for n in space.names])
    assert torch.allclose(G @ torch.cat([v[n].reshape(-1) for n in space.names]), flat, rtol=1e-10, atol=1e-12)
