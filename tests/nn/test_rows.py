"""The K-FAC solve from the batch's rows (nn/optim/rows.py) against the solve of the assembled gradient."""
import copy

import pytest
import torch

import infogeo as ig
from infogeo.nn.curvature.kron import TikhonovKronBlock
from infogeo.nn.optim import rows as rows_module

F = torch.nn.functional
# preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")


@pytest.fixture(autouse=True)
def even_cost(monkeypatch):
    """The route on layers as small as these: taken wherever the rows cost fewer multiply-adds than the products
    (the default asks for half, for the cost of its check and capture)."""
    monkeypatch.setattr(rows_module, "_ROW_SHARE", 1.0)


def test_the_default_route_needs_the_rows_to_cost_at_most_half_the_products(monkeypatch):
    monkeypatch.undo()
    R = lambda o, i: (o * i * (o + i)) / (o * o + i * i + o * i)   # noqa: E731   rows at even cost
    for o, i in ((32, 33), (256, 257), (1024, 1025), (2048, 2049), (10, 513)):
        assert rows_module._max_rows(o, i) < 0.5 * R(o, i)
    assert rows_module._max_rows(256, 257) < 128 < rows_module._max_rows(1024, 1025)   # batch 128: 256 wide not


def spd(n, gen):
    X = torch.randn(n, 2 * n, dtype=torch.float64, generator=gen)
    return X @ X.T / (2 * n)


@pytest.mark.parametrize("bias", [True, False])
def test_solve_rows_equals_dense_kronecker_inverse(bias):
    gen = torch.Generator().manual_seed(0)
    n_out, n_in, R, lam = 5, 4, 3, 0.3
    K = n_in + bias
    A, G = spd(K, gen), spd(n_out, gen)
    block = TikhonovKronBlock("w", "b" if bias else None, (n_out, n_in), A, G)
    b = torch.randn(R, n_out, dtype=torch.float64, generator=gen)
    a = torch.randn(R, n_in, dtype=torch.float64, generator=gen)
    abar = torch.cat([a, torch.ones(R, 1, dtype=a.dtype)], 1) if bias else a
    V = b.T @ abar
    # independent reference: the dense factored-Tikhonov matrix, inverted as a whole
    gg, ga = block.tikhonov_split(lam)
    M = torch.kron(G + gg * torch.eye(n_out, dtype=A.dtype), A + ga * torch.eye(K, dtype=A.dtype))
    ref = torch.linalg.solve(M, V.reshape(-1)).reshape(n_out, K)
    got = block.solve_rows(b, a, lam)
    assert torch.allclose(got["w"], ref[:, :n_in], atol=1e-12, rtol=1e-10)
    if bias:
        assert torch.allclose(got["b"], ref[:, -1], atol=1e-12, rtol=1e-10)
    grads = {"w": V[:, :n_in], **({"b": V[:, -1]} if bias else {})}
    same = block.solve(grads, lam)
    assert all(torch.allclose(got[k], same[k], atol=1e-12, rtol=1e-10) for k in got)


def net(inplace=False, width=16):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, width), torch.nn.ReLU(inplace=inplace),
                               torch.nn.Linear(width, width), torch.nn.Tanh(),
                               torch.nn.Linear(width, 3)).double()


def pair(model, **kw):
    """Two preconditioners on copies of ``model``: the second never takes the row route."""
    other = copy.deepcopy(model)
    p = ig.nn.Preconditioner(model, damping=1e-2, curvature_update_period=1, **kw)
    q = ig.nn.Preconditioner(other, damping=1e-2, curvature_update_period=1, **kw)
    q.recorder.rows = None
    return (model, p), (other, q)


def run(model, pre, batches, extra=None, steps=3):
    """``steps`` preconditioned steps; ``extra(model, loss)`` may change the loss or the gradient."""
    out = []
    for k in range(steps):
        model.zero_grad()
        for x, y in batches(k):
            loss = F.cross_entropy(model(x), y)
            if extra is not None:
                loss = extra(model, loss, before=True)
            loss.backward()
        if extra is not None:
            extra(model, None, before=False)
        pre.step()
        out.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.sub_(0.1 * p.grad)
    return out


def batches_of(sizes, shape=(6,)):
    def gen(k):
        g = torch.Generator().manual_seed(100 + k)
        return [(torch.randn((n,) + shape, dtype=torch.float64, generator=g), torch.randint(0, 3, (n,), generator=g))
                for n in sizes]
    return gen


def check(sizes=(4,), extra=None, inplace=False, expect_rows=True):
    (m1, p1), (m2, p2) = pair(net(inplace))
    got = run(m1, p1, batches_of(sizes), extra)
    ref = run(m2, p2, batches_of(sizes), extra)
    for g, r in zip(got, ref):
        for n in g:
            assert torch.allclose(g[n], r[n], atol=1e-12, rtol=1e-9), n
    used = p1.recorder.rows.used
    assert (len(used) > 0) == expect_rows, used
    return p1


def test_row_route_is_taken_and_equals_the_gradient_route():
    pre = check()
    # every step refreshes the statistics: the Monte Carlo backward passes do not reach the row boxes
    assert set(pre.recorder.rows.used) >= {"0", "2"}


@pytest.mark.parametrize("scale", [1e-170, 1e150])
def test_the_row_route_is_taken_whatever_the_scale_of_the_loss(scale):
    """The rounding bound of the check is computed from rows scaled to their largest entry: the squares of
    gradients near 1e-171 underflow (and near 1e150 overflow) in float64, the check must not."""
    def extra(model, loss, before):
        return loss * scale if before else None
    (m1, p1), (m2, p2) = pair(net())
    got = run(m1, p1, batches_of((4,)), extra)
    ref = run(m2, p2, batches_of((4,)), extra)
    for g, r in zip(got, ref):
        for n in g:
            assert torch.allclose(g[n] / scale, r[n] / scale, atol=1e-12, rtol=1e-9), n
    assert set(p1.recorder.rows.used) >= {"0", "2"}


def test_micro_batches_accumulated_into_one_gradient():
    check(sizes=(3, 2))


def test_a_forward_without_backward_is_ignored():
    def extra(model, loss, before):
        if before:
            x = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
            model(x)   # e.g. a monitoring forward with grad enabled, never back-propagated
        return loss
    check(extra=extra)


def test_in_place_activation_after_the_layer():
    check(inplace=True)


def test_penalty_in_the_loss_falls_back_to_the_gradient():
    def extra(model, loss, before):
        return loss + 1e-6 * sum((p ** 2).sum() for p in model.parameters()) if before else None
    check(extra=extra, expect_rows=False)


def test_clipping_before_the_step_falls_back_to_the_gradient():
    def extra(model, loss, before):
        if not before:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        return loss
    check(extra=extra, expect_rows=False)


def test_middle_axes_rows():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3)).double()
    (m1, p1), (m2, p2) = pair(model)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 2, 6, dtype=torch.float64, generator=gen), torch.randint(0, 3, (2, 2), generator=gen)
    for m, p in ((m1, p1), (m2, p2)):
        F.cross_entropy(m(x).reshape(-1, 3), y.reshape(-1)).backward()
        p.step()
    assert p1.recorder.rows.used == ["0"]   # 4 rows (2 examples x 2 positions); too many for the read-out
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-12, rtol=1e-9), n


def test_wide_batches_take_the_two_product_route():
    (m1, p1), _ = pair(net(width=4))
    run(m1, p1, batches_of((64,)), steps=1)
    assert p1.recorder.rows.used == []


def test_frozen_weight_trainable_bias():
    """A layer whose weight is frozen has a bias-only block: solved from .grad, the others from their rows."""
    model = net()
    model[0].weight.requires_grad_(False)
    (m1, p1), (m2, p2) = pair(model)
    got = run(m1, p1, batches_of((4,)))
    ref = run(m2, p2, batches_of((4,)))
    for g, r in zip(got, ref):
        assert g.keys() == r.keys() and "0.weight" not in g
        for n in g:
            assert torch.allclose(g[n], r[n], atol=1e-12, rtol=1e-9), n
    assert p1.recorder.rows.used == ["2"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_row_route_on_cuda():
    model = net(width=64).cuda()
    (m1, p1), (m2, p2) = pair(model)

    def batches(k):
        return [(x.cuda(), y.cuda()) for x, y in batches_of((8,))(k)]
    got, ref = run(m1, p1, batches), run(m2, p2, batches)
    for g, r in zip(got, ref):
        for n in g:
            assert g[n].is_cuda and torch.allclose(g[n], r[n], atol=1e-12, rtol=1e-9), n
    assert "2" in p1.recorder.rows.used   # the 64-wide hidden layer at 8 rows


def test_eigen_adam_rotates_the_gradient_from_the_rows_as_from_the_gradient(monkeypatch):
    """The default K-FAC step (Adam in the eigenbasis) takes U_G^T V U_A from the batch's rows where they give
    the gradient: equal to rotating that gradient, on every block and step. (Whole runs are not compared: with
    fewer rows than a layer is wide its factors are rank-deficient, and the eigenbasis of their null space,
    which Adam's normalisation then acts on, is decided by rounding.)"""
    from infogeo.nn.curvature.eigenbasis import EigenbasisKronBlock
    used = []
    real = EigenbasisKronBlock.rotate_rows

    def spy(self, b, a):
        got = real(self, b, a)
        want = self.rotate(b.T @ self._inputs_times(a, None))   # the gradient from the rows, rotated densely
        assert torch.allclose(got, want, atol=1e-14, rtol=1e-10)
        used.append(self.weight)
        return got
    monkeypatch.setattr(EigenbasisKronBlock, "rotate_rows", spy)
    model = net(width=24)
    opt = ig.nn.NaturalGradient(model, curvature_update_period=2)
    assert opt.step_rule == "eigen-adam"
    data = batches_of((8,))
    for k in range(6):
        (x, y), = data(k)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    assert "2.weight" in used and len(used) >= 5   # the 24 x 24 layer (the 6-wide input: cheaper densely)
    assert opt.preconditioner.take_rows() == {}   # given once, not kept
