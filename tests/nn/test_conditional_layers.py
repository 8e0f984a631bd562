"""Layers a batch does not reach (a branch not taken, an expert not routed to): the running curvature keeps each
layer's block kind and averages zero statistics into it, and the step rules' state follows a layer that gets
Kronecker factors only after the first step."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.curvature.eigenbasis import ExactKronBlock  # noqa: E402
from infogeo.nn.optim.eigen_adam import _into_block, rotated_gradient  # noqa: E402

F64 = torch.float64


class Branches(torch.nn.Module):
    """Two heads; each call uses one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)

    def forward(self, x, use_b):
        return self.b(x) if use_b else self.a(x)


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 3, dtype=F64, generator=g), torch.randint(0, 2, (8,), generator=g)


@pytest.mark.parametrize("curvature,rule", [("kfac", None), ("kfac", "graft"), ("kfac", "clip"), ("ekfac", None),
                                            ("kfac", "eigen-adam")])
@pytest.mark.parametrize("pattern", ["0110", "0101", "1000", "0011"])
def test_a_layer_first_reached_after_the_first_step_trains(curvature, rule, pattern):
    torch.manual_seed(0)
    model = Branches().double()
    kw = {} if rule is None else {"step_rule": rule}
    opt = ig.nn.NaturalGradient(model, curvature=curvature, curvature_update_period=1, **kw)
    X, y = _data()
    for use_b in pattern:
        opt.zero_grad()
        F.cross_entropy(model(X, use_b == "1"), y).backward()
        opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    if "0" in pattern and "1" in pattern:   # both layers were reached: both keep Kronecker factors
        kinds = {tuple(b.names): b.kind for b in opt.preconditioner.curvature.blocks}
        assert kinds == {("a.weight", "a.bias"): curvature, ("b.weight", "b.bias"): curvature}


def test_an_unreached_layer_keeps_its_factors_decayed_like_the_average_of_the_batch_fishers():
    """Step 0 reaches only ``a``; step 1 only ``b``: ``a``'s averaged factors are w times step 0's (its Fisher on
    batch 1 is zero), and ``b``'s are (1 - w) times batch 1's, for the weight w = β(1 - β)/(1 - β²) = β/(1 + β)
    the bias-corrected average keeps at its second refresh."""
    torch.manual_seed(0)
    model = Branches().double()
    decay = 0.9
    opt = ig.nn.NaturalGradient(model, curvature_update_period=1, ema_decay=decay, fisher="exact")
    X, y = _data()
    for use_b in (False, True):
        opt.zero_grad()
        F.cross_entropy(model(X, use_b), y).backward()
        opt.step()
    blocks = {b.names[0]: b for b in opt.preconditioner.curvature.blocks}
    Xb = torch.cat([X, torch.ones(len(X), 1, dtype=F64)], 1)
    A = Xb.T @ Xb / len(X)   # the input factor of a bias-augmented Linear layer (the same inputs in both batches)
    w = decay / (1 + decay)
    assert torch.allclose(blocks["a.weight"].A, w * A, rtol=1e-12, atol=0)
    assert torch.allclose(blocks["b.weight"].A, (1 - w) * A, rtol=1e-12, atol=0)


def test_moments_kept_per_parameter_are_carried_into_a_new_kronecker_block():
    """Raw per-parameter moments join like the gradient and reach the block's eigenbasis as a vector (the first)
    and a diagonal (the second) change coordinates: :math:`U_G^T m U_A` and :math:`(U_G\\odot U_G)^T v (U_A\\odot U_A)`."""
    g = torch.Generator().manual_seed(1)
    rnd = lambda *s: torch.randn(*s, dtype=F64, generator=g)   # noqa: E731
    SA, SG = rnd(4, 4), rnd(2, 2)
    block = ExactKronBlock("w", "b", (2, 3), SA @ SA.T, SG @ SG.T)
    W, bias = rnd(2, 3), rnd(2)
    mW, vW, mb, vb = rnd(2, 3), rnd(2, 3).abs(), rnd(2), rnd(2).abs()
    states = [{"exp_avg": mW.clone(), "exp_avg_sq": vW.clone(), "step": torch.tensor(3.0, dtype=F64)},
              {"exp_avg": mb.clone(), "exp_avg_sq": vb.clone(), "step": torch.tensor(2.0, dtype=F64)}]
    _into_block(block, states, [W, bias])
    assert states[1] == {} and float(states[0]["step"]) == 3.0
    Ua, Ug = block.basis()
    rotated_gradient(states[0], torch.zeros(2, 4, dtype=F64), (Ua, Ug))
    m, v = torch.cat([mW, mb[:, None]], 1), torch.cat([vW, vb[:, None]], 1)
    assert torch.allclose(states[0]["exp_avg"], Ug.T @ m @ Ua, atol=1e-12)
    assert torch.allclose(states[0]["exp_avg_sq"], (Ug * Ug).T @ v @ (Ua * Ua), atol=1e-12)
