"""``step_rule="eigen-adam"`` on weight matrices without Kronecker factors: Adam in the eigenbasis of the
gradient's Shampoo statistics (SOAP), checked against the statistics and steps written out by hand."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.optim import gradient_basis as gb  # noqa: E402

F64 = torch.float64


class Recurrent(torch.nn.Module):
    """A GRU (no layer rule gives it Kronecker factors) and a Linear read-out (which has them)."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(3, 6, batch_first=True)
        self.head = torch.nn.Linear(6, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def data(i, n=12):
    g = torch.Generator().manual_seed(50 + i)
    return torch.randn(n, 5, 3, dtype=F64, generator=g), torch.randint(0, 4, (n,), generator=g)


def model(seed=0):
    torch.manual_seed(seed)
    return Recurrent().double()


def step(m, opt, i):
    X, y = data(i)
    opt.zero_grad()
    F.cross_entropy(m(X), y).backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    opt.step()
    return grads


def test_statistics_and_basis_follow_their_definition():
    """L and R are the running means of g gᵀ and gᵀ g (decay 0.95 per step, the first step's own); the basis is
    the eigenvectors of the statistics at the first step and every tenth after it, unchanged between."""
    rng = np.random.default_rng(0)
    state = {}
    L = R = None
    bases = []
    for k in range(23):
        g = rng.standard_normal((5, 3))
        L = g @ g.T if L is None else 0.95 * L + 0.05 * g @ g.T
        R = g.T @ g if R is None else 0.95 * R + 0.05 * g.T @ g
        Ua, Ug = gb.gradient_basis(state, torch.tensor(g))
        state["step"] = torch.tensor(float(k + 1))   # what eigen_adam counts
        state["U_A"], state["U_G"] = Ua, Ug
        np.testing.assert_allclose(state["L"].numpy(), L, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state["R"].numpy(), R, rtol=1e-12, atol=1e-12)
        bases.append((Ua, Ug))
        if k % 10 == 0:   # a new basis: eigenvectors of the statistics (up to sign)
            for U, S in ((Ua, R), (Ug, L)):
                lam = np.linalg.eigvalsh(S)
                np.testing.assert_allclose(U.numpy().T @ S @ U.numpy(), np.diag(lam), atol=1e-10)
        else:
            assert bases[-1][0] is bases[-2][0] and bases[-1][1] is bases[-2][1]


def test_a_side_longer_than_the_limit_keeps_the_identity():
    state = {}
    Ua, Ug = gb.gradient_basis(state, torch.randn(7, 3, dtype=F64), max_dim=5)
    assert Ug is None and "L" not in state and Ua.shape == (3, 3)


def test_the_first_step_is_adam_in_the_gradients_eigenbasis():
    """At the first step m̂ = g̃ and v̂ = g̃², so each GRU matrix moves by -lr U_G [g̃ / (|g̃| + eps)] U_Aᵀ with
    g̃ = U_Gᵀ g U_A and U the eigenvectors of g gᵀ and gᵀ g; a vector (a bias) by Adam's -lr g / (|g| + eps)."""
    m = model()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = ig.nn.NaturalGradient(m, lr=0.05, nesterov=False)   # Adam's first moment, by hand below
    grads = step(m, opt, 0)
    for n, p in m.named_parameters():
        if not n.startswith("rnn."):
            continue
        g = grads[n].numpy()
        if g.ndim == 2:
            Ug, Ua = np.linalg.eigh(g @ g.T)[1], np.linalg.eigh(g.T @ g)[1]
            gt = Ug.T @ g @ Ua
            want = before[n].numpy() - 0.05 * Ug @ (gt / (np.abs(gt) + 1e-8)) @ Ua.T
            assert "U_A" in opt.state[p] and "L" in opt.state[p]
        else:
            want = before[n].numpy() - 0.05 * g / (np.abs(g) + 1e-8)
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-9, atol=1e-9, err_msg=n)


def test_unfactored_adam_takes_adams_step_on_the_raw_coordinates():
    m = model()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    opt = ig.nn.NaturalGradient(m, lr=0.05, unfactored="adam", nesterov=False)
    grads = step(m, opt, 0)
    for n, p in m.named_parameters():
        if n.startswith("rnn."):
            g = grads[n]
            torch.testing.assert_close(p.detach(), before[n] - 0.05 * g / (g.abs() + 1e-8), rtol=1e-12, atol=1e-12)
            assert "U_A" not in opt.state[p]


def test_the_default_differs_from_adam_and_trains():
    a, b = model(), model()
    opt_a, opt_b = ig.nn.NaturalGradient(a, lr=0.03), ig.nn.NaturalGradient(b, lr=0.03, unfactored="adam")
    X, y = (torch.cat(t) for t in zip(*(data(j) for j in range(4))))
    with torch.no_grad():
        first = float(F.cross_entropy(a(X), y))
    for i in range(60):
        step(a, opt_a, i % 4)
        step(b, opt_b, i % 4)
    assert not torch.equal(a.rnn.weight_hh_l0, b.rnn.weight_hh_l0)
    with torch.no_grad():
        assert float(F.cross_entropy(a(X), y)) < 0.7 * first


@pytest.mark.parametrize("bad", ["SOAP", "shampoo", None, 1])
def test_unknown_unfactored_is_refused(bad):
    with pytest.raises(ValueError, match="unfactored"):
        ig.nn.NaturalGradient(model(), unfactored=bad)


def test_resume_is_bit_identical_through_a_basis_renewal_and_an_undo(tmp_path):
    """torch.save -> load(weights_only) -> continue across step 11 (a new basis from the saved statistics), with a
    non-finite gradient undoing a step (recomputed from the gradient basis and moments, not kept)."""
    def train(m, opt, start, count, nan_at=()):
        for i in range(start, start + count):
            X, y = data(i)
            opt.zero_grad()
            F.cross_entropy(m(X), y).backward()
            if i in nan_at:
                m.rnn.weight_hh_l0.grad[0, 0] = float("nan")
            opt.step()
    a = model()
    opt_a = ig.nn.NaturalGradient(a, seed=3)
    train(a, opt_a, 0, 8)
    torch.save({"model": a.state_dict(), "opt": opt_a.state_dict()}, tmp_path / "ckpt.pt")
    with pytest.warns(RuntimeWarning, match="undone"):
        train(a, opt_a, 8, 8, nan_at={9})
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    b = model(seed=5)
    b.load_state_dict(ckpt["model"])
    opt_b = ig.nn.NaturalGradient(b, seed=99)
    opt_b.load_state_dict(ckpt["opt"])
    with pytest.warns(RuntimeWarning, match="undone"):
        train(b, opt_b, 8, 8, nan_at={9})
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


class GroupedConv(torch.nn.Module):
    """A grouped convolution (4-D weight, no layer rule) before a Linear read-out."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3, groups=2)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x)).flatten(1))


@pytest.mark.parametrize("saved,loaded", [("adam", "soap"), ("soap", "adam")])
def test_a_checkpoint_of_the_other_unfactored_setting_continues(tmp_path, saved, loaded):
    """A checkpoint of the other setting resumes (a 4-D weight without factors included) and keeps training."""
    torch.manual_seed(0)
    m = GroupedConv().double()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 4, 5, dtype=F64, generator=g), torch.randint(0, 3, (8,), generator=g))
               for _ in range(8)]
    opt = ig.nn.NaturalGradient(m, unfactored=saved)
    for X, y in batches[:3]:
        opt.zero_grad()
        F.cross_entropy(m(X), y).backward()
        opt.step()
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, tmp_path / "c.pt")
    ckpt = torch.load(tmp_path / "c.pt", weights_only=True)
    other = GroupedConv().double()
    other.load_state_dict(ckpt["model"])
    opt2 = ig.nn.NaturalGradient(other, unfactored=loaded)
    opt2.load_state_dict(ckpt["opt"])
    for X, y in batches[3:]:
        opt2.zero_grad()
        F.cross_entropy(other(X), y).backward()
        opt2.step()
    st = opt2.state[other.conv.weight]
    assert ("L" in st) == (loaded == "soap") and torch.isfinite(other.conv.weight).all()
    assert st["exp_avg"].shape == ((4, 6) if loaded == "soap" else (4, 2, 3))


def test_moments_are_carried_between_raw_coordinates_and_a_gradient_basis_exactly():
    """Raw -> matrix view in the identity basis (then eigen_adam's change of basis); basis -> raw: the first
    moment U_G m U_Aᵀ exactly, the second (U_G∘U_G) v (U_A∘U_A)ᵀ, the statistics dropped."""
    from infogeo.nn.optim import eigen_adam as st
    g = torch.Generator().manual_seed(2)
    m, v = torch.randn(4, 2, 3, dtype=F64, generator=g), torch.rand(4, 2, 3, dtype=F64, generator=g)
    state = {"exp_avg": m.clone(), "exp_avg_sq": v.clone(), "step": torch.tensor(3.0, dtype=F64)}
    gb.gradient_basis(state, torch.randn(4, 6, dtype=F64, generator=g))
    assert torch.equal(state["exp_avg"], m.reshape(4, 6)) and torch.equal(state["U_G"], torch.eye(4, dtype=F64))
    wide = {"exp_avg": m.clone(), "exp_avg_sq": v.clone(), "step": torch.tensor(3.0, dtype=F64)}
    gb.gradient_basis(wide, torch.randn(4, 6, dtype=F64, generator=g), max_dim=5)
    assert "U_A" not in wide and "R" not in wide   # a side past the limit: no identity matrix formed for it
    Ug = torch.linalg.qr(torch.randn(4, 4, dtype=F64, generator=g)).Q
    Ua = torch.linalg.qr(torch.randn(6, 6, dtype=F64, generator=g)).Q
    M, V = torch.randn(4, 6, dtype=F64, generator=g), torch.rand(4, 6, dtype=F64, generator=g)
    state = {"exp_avg": M.clone(), "exp_avg_sq": V.clone(), "U_A": Ua, "U_G": Ug, "L": torch.eye(4, dtype=F64),
             "R": torch.eye(6, dtype=F64), "step": torch.tensor(3.0, dtype=F64)}
    st._as_raw(state, torch.Size((4, 2, 3)))
    assert not {"L", "R", "U_A", "U_G"} & set(state)
    torch.testing.assert_close(state["exp_avg"], (Ug @ M @ Ua.T).reshape(4, 2, 3), rtol=0, atol=1e-13)
    torch.testing.assert_close(state["exp_avg_sq"], (Ug.square() @ V @ Ua.square().T).reshape(4, 2, 3), rtol=0,
                               atol=1e-13)
