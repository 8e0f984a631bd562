"""The gradient-statistics kinds ("shampoo", "soap"): Shampoo's and SOAP's metrics in the optimizers' one loop.

References: Shampoo's direction :math:`L^{-1/4}\\bar GR^{-1/4}` and SOAP's rotate-Adam-rotate-back step written
out by hand with ``torch.linalg.eigh`` / ``svd``; pytorch-optimizer's ``Shampoo`` and ``SOAP`` on the same model
where their definitions and ours coincide (said at each test).
"""
import io

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature import kinds  # noqa: E402

from ._dense_reference import rel  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:kl_clip is set but no lr")


def batch(k, n=16, shape=(4,), classes=3):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(n, *shape, generator=g, dtype=torch.float64), torch.randint(0, classes, (n,), generator=g)


def mlp(bias=True, sizes=(4, 5, 3)):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(a, b, bias=bias), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1]).double()


def conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(12, 3)).double()


def backward(model, k, loss="ce", **shape):
    x, y = batch(k, **shape)
    out = model(x)
    # any loss: the statistics are those of the gradient, not of an output metric
    value = F.cross_entropy(out, y) if loss == "ce" else (out ** 2).mean() + 0.1 * out[:, 0].sin().sum()
    value.backward()


def inverse_root(S, damping, power):
    r""":math:`(S + \lambda\,\mathrm{tr}S/d\,I)^{-p}` by eigh."""
    lam, U = torch.linalg.eigh(S + damping * torch.trace(S) / S.shape[0] * torch.eye(S.shape[0], dtype=S.dtype))
    return U @ torch.diag(lam ** -power) @ U.T


@pytest.mark.parametrize("make, shape", [(mlp, (4,)), (conv_net, (2, 4, 4))])
def test_shampoo_direction_is_the_inverse_fourth_roots_by_hand(make, shape):
    """Two steps of ``Preconditioner("shampoo")``: :math:`(L+\\lambda\\mu_L)^{-1/4}\\bar G(R+\\lambda\\mu_R)^{-1/4}`
    per matrix (a kernel as ``(out, in*kh*kw)``), :math:`g/\\sqrt{d + \\lambda\\bar d}` per vector, the statistics
    averaged over the steps, on a loss that is no output metric's."""
    model, damping, beta = make(), 0.05, 0.8
    pre = ig.nn.Preconditioner(model, "shampoo", damping, kl_clip=None, ema_decay=beta)
    stats = {}
    for k in range(2):
        model.zero_grad()
        backward(model, k, loss="other", shape=shape)
        got = pre.precondition()
        for n, p in model.named_parameters():
            g = p.grad
            if g.dim() >= 2:
                M = g.reshape(g.shape[0], -1)
                new = (M @ M.T, M.T @ M)
                L, R = new if k == 0 else (torch.lerp(new[0], stats[n][0], beta), torch.lerp(new[1], stats[n][1], beta))
                stats[n] = (L, R)
                want = (inverse_root(L, damping, 0.25) @ M @ inverse_root(R, damping, 0.25)).reshape(g.shape)
            else:
                d = g ** 2 if k == 0 else torch.lerp(g ** 2, stats[n], beta)
                stats[n] = d
                want = g / (d + damping * d.mean()).sqrt()
            assert rel(got[n], want) < 1e-10, (k, n)


def test_shampoo_direction_is_unchanged_by_the_scale_of_the_loss():
    """The damping is relative to each factor's mean eigenvalue, so multiplying the loss leaves the direction."""
    dirs = []
    for scale in (1.0, 1e-4):
        model = mlp()
        pre = ig.nn.Preconditioner(model, "shampoo", 1e-3, kl_clip=None)
        x, y = batch(0)
        (scale * F.cross_entropy(model(x), y)).backward()
        dirs.append(torch.cat([d.reshape(-1) for d in pre.precondition().values()]))
    assert rel(dirs[1], dirs[0]) < 1e-9


def test_without_averaging_the_direction_is_the_polar_factor():
    """``ema_decay=0``: :math:`(GG^T)^{-1/4}G(G^TG)^{-1/4} = UV^T` (the steepest descent under the spectral norm
    that Muon approximates), checked against the SVD; a wide 3 x 6 weight has a null space on one side."""
    model = mlp(bias=False, sizes=(6, 3))
    pre = ig.nn.Preconditioner(model, "shampoo", 1e-14, kl_clip=None, ema_decay=0.0, min_damping=1e-16)
    backward(model, 0, loss="other", shape=(6,))   # (a softmax's gradient rows sum to zero: rank 2)
    U, _, Vh = torch.linalg.svd(model[0].weight.grad, full_matrices=False)
    assert rel(pre.precondition()["0.weight"], U @ Vh) < 1e-6


def soap_by_hand(model, steps, lr, betas, eps, beta, period):
    """SOAP written out: factors averaged with ``beta``; their eigenbases renewed at the steps the optimizer renews
    them (every step before ``period``, then every ``period``-th); Adam's first moment kept in the parameters'
    coordinates and rotated in, the second carried to a new basis as :math:`(R\\odot R)v(R\\odot R)^T`; Adam on
    vectors."""
    state = {}
    for k in range(steps):
        model.zero_grad()
        backward(model, k, loss="other")
        with torch.no_grad():
            for n, p in model.named_parameters():
                g, s = p.grad, state.setdefault(n, {"m": torch.zeros_like(p.grad), "v": None})
                if g.dim() >= 2:
                    new = (g @ g.T, g.T @ g)
                    if k:
                        new = (torch.lerp(new[0], s["L"], beta), torch.lerp(new[1], s["R"], beta))
                    s["L"], s["R"] = new
                    if k < period or k % period == 0:
                        Ul, Ur = torch.linalg.eigh(s["L"])[1], torch.linalg.eigh(s["R"])[1]
                        if s["v"] is not None:
                            Rl, Rr = Ul.T @ s["Ul"], Ur.T @ s["Ur"]
                            s["v"] = Rl.square() @ s["v"] @ Rr.square().T
                        s["Ul"], s["Ur"] = Ul, Ur
                    rot, back = (lambda X: s["Ul"].T @ X @ s["Ur"]), (lambda X: s["Ul"] @ X @ s["Ur"].T)
                else:
                    rot = back = (lambda X: X)
                s["m"] = betas[0] * s["m"] + (1 - betas[0]) * g
                gt = rot(g)
                s["v"] = (1 - betas[1]) * gt ** 2 if s["v"] is None else betas[1] * s["v"] + (1 - betas[1]) * gt ** 2
                mhat, vhat = rot(s["m"]) / (1 - betas[0] ** (k + 1)), s["v"] / (1 - betas[1] ** (k + 1))
                p -= lr * back(mhat / (vhat.sqrt() + eps))
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_soap_is_adam_in_the_eigenbasis_of_the_gradient_factors_by_hand():
    lr, betas, eps, beta, period, steps = 0.05, (0.9, 0.99), 1e-6, 0.9, 3, 8
    want = soap_by_hand(mlp(), steps, lr, betas, eps, beta, period)
    model = mlp()
    opt = ig.nn.NaturalGradient(model, curvature="soap", lr=lr, betas=betas, eps=eps, ema_decay=beta,
                                inverse_update_period=period)
    assert opt.step_rule == "eigen-adam"
    for k in range(steps):
        opt.zero_grad()
        backward(model, k, loss="other")
        opt.step()
    got = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert rel(got, want) < 1e-9


def _peer():
    po = pytest.importorskip("pytorch_optimizer")
    return po


def test_shampoo_matches_pytorch_optimizer_where_the_definitions_meet():
    """pytorch-optimizer's ``Shampoo`` sums the statistics from :math:`\\epsilon I`; ours averages them
    (``ema_decay``) and damps relative to their scale.  Over two steps, with ``ema_decay=0.5`` (the mean of two
    is half their sum, which multiplies :math:`L^{-1/4}GR^{-1/4}` by :math:`\\sqrt2`: our second step is taken at
    :math:`\\eta/\\sqrt2`) and both dampings negligible, the steps agree; biases (which it treats as full-matrix
    AdaGrad) are left out."""
    po = _peer()
    ours, theirs = mlp(bias=False, sizes=(4, 4, 4)), mlp(bias=False, sizes=(4, 4, 4))
    opt = ig.nn.NaturalGradient(ours, curvature="shampoo", step_rule="clip", lr=0.1, damping=1e-13, ema_decay=0.5)
    peer = po.Shampoo(theirs.parameters(), lr=0.1, matrix_eps=0.0)
    for k in range(2):
        opt.param_groups[0]["lr"] = 0.1 / (k + 1) ** 0.5
        for model, o in ((ours, opt), (theirs, peer)):
            o.zero_grad()
            backward(model, k, classes=4)
            o.step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert rel(a.detach(), b.detach()) < 1e-8


def test_soap_matches_pytorch_optimizer_in_a_fixed_basis():
    """pytorch-optimizer's ``SOAP`` takes no step on its first gradient (it only starts the statistics and the
    basis), places Adam's :math:`\\epsilon` outside the bias correction, renews the basis by a power iteration and
    reorders (without rotating) the second moment; with the basis of the first gradient kept (refresh periods
    beyond the test) and :math:`\\epsilon` negligible, the steps agree, Adam's on the biases included.  Ours takes
    the first gradient's statistics with ``Preconditioner.update`` (no step)."""
    po = _peer()
    lr, betas = 0.02, (0.9, 0.95)
    ours, theirs = mlp(sizes=(4, 4, 3)), mlp(sizes=(4, 4, 3))
    opt = ig.nn.NaturalGradient(ours, curvature="soap", lr=lr, betas=betas, eps=1e-30,
                                curvature_update_period=1000, inverse_update_period=1000)
    peer = po.SOAP(theirs.parameters(), lr=lr, betas=betas, shampoo_beta=0.95, weight_decay=0.0, eps=1e-30,
                   precondition_frequency=1000)
    for k in range(6):
        for model, o in ((ours, opt), (theirs, peer)):
            o.zero_grad()
            # not a softmax's loss, whose gradient rows sum to zero: its factors' null spaces have no unique basis
            backward(model, k, loss="other")
            if o is opt and k == 0:
                opt.preconditioner.update()
            else:
                o.step()
    assert all(rel(a.detach(), b.detach()) > 1e-3 for a, b in zip(ours.parameters(), mlp(sizes=(4, 4, 3)).parameters()))
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert rel(a.detach(), b.detach()) < 1e-9


@pytest.mark.parametrize("curvature", ["shampoo", "soap"])
def test_a_checkpoint_resumes_bit_identically(curvature):
    a, b = mlp(), mlp()
    kw = dict(curvature=curvature, inverse_update_period=3)
    opt_a = ig.nn.NaturalGradient(a, **kw)
    for k in range(5):
        opt_a.zero_grad()
        backward(a, k)
        opt_a.step()
    buf = io.BytesIO()
    torch.save(opt_a.state_dict(), buf)
    buf.seek(0)
    b.load_state_dict(a.state_dict())
    opt_b = ig.nn.NaturalGradient(b, **kw)
    opt_b.load_state_dict(torch.load(buf, weights_only=True))
    for k in range(5, 9):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            backward(model, k)
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_the_kinds_rows_say_what_they_are_and_the_model_fisher_stays_the_default():
    import inspect
    for name in ("shampoo", "soap"):
        row = kinds.kind(name)
        assert row.statistics == "gradient" and not row.captured and row.eigenbasis is not None
        assert row.optimizer_defaults == {"curvature_update_period": 1, "inverse_update_period": 10}
    assert kinds.kind("soap").step_rule == "eigen-adam" and kinds.kind("shampoo").step_rule is None
    for cls in (ig.nn.NaturalGradient, ig.nn.Preconditioner):
        assert inspect.signature(cls).parameters["curvature"].default == "kfac"
    opt = ig.nn.NaturalGradient(mlp(), curvature="shampoo")
    assert opt.step_rule == "graft" and opt.preconditioner.estimate.curvature_update_period == 1
    # the Fisher's K-FAC: statistics every 10 steps, or under eigen-adam (its eigenbases alone) at each factorisation
    assert ig.nn.NaturalGradient(mlp(), step_rule="graft").preconditioner.estimate.curvature_update_period == 10
    assert ig.nn.NaturalGradient(mlp()).preconditioner.estimate.curvature_update_period == 100
    assert ig.nn.Preconditioner(mlp()).estimate.curvature_update_period == 10
    # a user's period wins over the kind's
    assert ig.nn.NaturalGradient(mlp(), curvature="soap", curvature_update_period=4).preconditioner.estimate \
        .curvature_update_period == 4
    # no trust region by default: it bounds a KL only under the model's Fisher
    assert ig.nn.NaturalGradient(mlp(), curvature="shampoo", step_rule="clip").preconditioner.kl_clip is None


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="takes no option 'kfac_approx'"):   # at construction, not at a step
        ig.nn.NaturalGradient(mlp(), curvature="shampoo", kfac_approx="reduce")
    space = ig.nn.ParameterSpace(mlp(), "categorical", data=batch(0)[0], targets=batch(0)[1])
    with pytest.raises(ValueError, match="method='empirical'"):
        space.curvature("soap", "mc")
    with pytest.raises(ValueError, match="max_factor_dim and max_factor_bytes only"):
        space.curvature("shampoo", "empirical", chunk_elements=10)
    with pytest.raises(NotImplementedError, match="cannot represent C - g g"):
        space.curvature("shampoo", "empirical").minus_outer(space.differential().components)


def test_wide_sides_keep_the_diagonal_of_their_factor():
    """A side above ``max_factor_dim`` keeps diag of its factor; both sides above it: the squares."""
    model = mlp(sizes=(4, 5, 3))
    space = ig.nn.ParameterSpace(model, "categorical", data=batch(0)[0], targets=batch(0)[1])
    C = space.curvature("shampoo", "empirical", max_factor_dim=4)
    g = space.differential().components
    layouts = {b.names[0]: (b.G.dim(), b.A.dim()) for b in C.blocks if b.kind == "shampoo"}
    assert layouts == {"0.weight": (1, 2), "2.weight": (2, 1)}
    b = next(b for b in C.blocks if b.names == ["0.weight"])
    assert rel(b.G, (g["0.weight"] ** 2).sum(1)) < 1e-12
    C1 = space.curvature("shampoo", "empirical", max_factor_dim=2)
    assert all(b.kind == "shampoo-diag" for b in C1.blocks)
    v = torch.randn(space.layout.size, dtype=torch.float64)
    assert rel(C.to_dense() @ v, C @ v) < 1e-12 and rel(C1.to_dense() @ v, C1 @ v) < 1e-12


def test_soap_is_shampoo_with_adam_in_its_eigenbasis():
    """The row "soap" differs from "shampoo" by its default step rule only."""
    runs = []
    for kw in ({"curvature": "soap"}, {"curvature": "shampoo", "step_rule": "eigen-adam"}):
        model = mlp()
        opt = ig.nn.NaturalGradient(model, **kw)
        for k in range(4):
            opt.zero_grad()
            backward(model, k)
            opt.step()
        runs.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1])
