"""Products with a basis held in bfloat16 (``state_dtype="auto"``): in bfloat16 where the device multiplies it
natively and the product is large, else in the working dtype.  Both paths are forced here
(``_params.NARROW_PRODUCTS``), so they are tested whatever this machine's instructions."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn import _params  # noqa: E402
from infogeo.nn.curvature.eigenbasis import EigenbasisKronBlock  # noqa: E402

BF = torch.bfloat16


@pytest.fixture
def narrow(monkeypatch):
    """Set whether held products may run in bfloat16 (``True``/``False``) for the test."""
    def setting(value):
        monkeypatch.setattr(_params, "NARROW_PRODUCTS", value)
    return setting


def operands(m, k, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(BF), torch.randn(k, n, generator=g)


def test_a_large_product_with_a_held_operand_runs_in_bfloat16_within_its_rounding(narrow):
    """128^3 multiply-adds (the threshold): the result is bfloat16, within bfloat16's unit roundoff 2^-8 relative per
    entry (plus the float32 sums' rounding) of the float64 product of the operands rounded to bfloat16."""
    narrow(True)
    X, Y = operands(128, 128, 128)
    out = _params.held_product(X, Y, torch.float32)
    assert out.dtype == BF
    exact = X.double() @ Y.to(BF).double()
    bound = 2.0 ** -8 * exact.abs() + 1e-5 * (X.double().abs() @ Y.to(BF).double().abs())
    assert ((out.double() - exact).abs() <= bound).all()
    # not the float32 product: the bfloat16 path was taken
    assert not torch.equal(out.float(), X.float() @ Y)


@pytest.mark.parametrize("shape,work,setting", [((128, 128, 128), torch.float32, False),   # not native
                                                ((32, 129, 129), torch.float32, True),      # too small
                                                ((128, 128, 128), torch.float64, True)])    # float64 stays exact
def test_otherwise_the_product_is_the_working_dtypes_bit_for_bit(narrow, shape, work, setting):
    narrow(setting)
    X, Y = operands(*shape)
    out = _params.held_product(X, Y, work)
    assert out.dtype == work and torch.equal(out, X.to(work) @ Y.to(work))


def test_operands_neither_of_them_bfloat16_are_never_narrowed(narrow):
    narrow(True)
    X, Y = operands(128, 128, 128)
    X = X.float()
    assert torch.equal(_params.held_product(X, Y, torch.float32), X @ Y)


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256), torch.nn.Tanh(),
                               torch.nn.Linear(256, 4))


def batch(i, n=64):
    g = torch.Generator().manual_seed(100 + i)
    X = torch.randn(n, 16, generator=g)
    return X, (X[:, :4] + 0.3 * torch.randn(n, 4, generator=g)).argmax(1)


def train(setting, narrow, steps=30, seed=0, **options):
    narrow(setting)
    model = mlp(seed)
    opt = ig.nn.NaturalGradient(model, **options)
    losses = []
    for i in range(steps):
        X, y = batch(i % 6)
        opt.zero_grad()
        loss = F.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


def test_eigen_adam_trains_alike_with_bfloat16_rotations(narrow):
    """The 256 x 257 block rotates in bfloat16 (batch 64: from the batch's rows, and back out of the basis): the
    steps differ from float32 rotations by the rounding, the training does not (30 steps on 6 batches, three
    seeds): both take the loss below 5 % of its start, and the last losses agree to 1 % of it (measured: at most
    0.3 %, seeds 0-5; relative to the last loss itself, which is 2-3 % of the start, they differ by 1-10 %)."""
    for seed in range(3):
        a, _, la = train(True, narrow, seed=seed)
        b, _, lb = train(False, narrow, seed=seed)
        assert not torch.equal(a[2].weight, b[2].weight)   # the bfloat16 path was taken
        assert la[-1] < 0.05 * la[0] and lb[-1] < 0.05 * lb[0]
        assert abs(la[-1] - lb[-1]) < 0.01 * lb[0], (seed, la[-1], lb[-1])


def test_a_basis_held_as_computed_is_never_narrowed(narrow):
    """``state_dtype=torch.float32``: no bfloat16 operand, so both settings give the same bits."""
    a, _, _ = train(True, narrow, steps=12, state_dtype=torch.float32)
    b, _, _ = train(False, narrow, steps=12, state_dtype=torch.float32)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("setting", [True, False])
def test_the_rotation_from_rows_matches_the_rotated_gradient(narrow, setting):
    r""":meth:`rotate_rows` of a block whose basis is held in bfloat16 against an independent float64 reference,
    :math:`U_G^T (b^T [a, 1]) U_A` with the held basis: within bfloat16's rounding when narrowed, float32's when
    not."""
    _, opt, _ = train(setting, narrow, steps=2)
    block = next(b for b in opt.preconditioner.solver.blocks
                 if isinstance(b, EigenbasisKronBlock) and b.shapes["A"] == (257, 257))
    Ua, Ug = block.basis()
    assert Ua.dtype == BF and Ug.dtype == BF
    g = torch.Generator().manual_seed(7)
    b, a = torch.randn(64, 256, generator=g), torch.randn(64, 256, generator=g)
    got = block.rotate_rows(b, a)
    assert got.dtype == torch.float32
    ref = Ug.double().T @ (b.double().T @ torch.cat([a.double(), torch.ones(64, 1, dtype=torch.float64)], 1)) \
        @ Ua.double()
    err = float((got.double() - ref).norm() / ref.norm())
    assert err < (2e-2 if setting else 1e-5), err
    if setting:
        assert err > 1e-5   # the bfloat16 path was taken


@pytest.mark.parametrize("setting", [True, False])
def test_moments_carried_to_a_new_basis_held_in_bfloat16(narrow, setting):
    r""":func:`change_basis` between two 160-wide bases held in bfloat16 (products of 160^3 multiply-adds) against a
    float64 reference from the same held bases: :math:`m' = R_G m R_A^T` and :math:`v' = (R_G\odot R_G) v
    (R_A\odot R_A)^T` with :math:`R = U'^TU`, within bfloat16's rounding when narrowed, float32's when not."""
    from infogeo.nn.optim.eigen_adam import change_basis
    narrow(setting)
    g = torch.Generator().manual_seed(5)

    def basis():
        return torch.linalg.qr(torch.randn(160, 160, generator=g, dtype=torch.float64))[0].to(BF)
    old, new = (basis(), basis()), (basis(), basis())
    m, v = torch.randn(160, 160, generator=g), torch.rand(160, 160, generator=g)
    state = {"exp_avg": m.clone(), "exp_avg_sq": v.clone(), "U_A": old[0], "U_G": old[1]}
    change_basis(state, new, torch.float32)
    Ra, Rg = (n.double().T @ o.double() for n, o in zip(new, old))
    refs = Rg @ m.double() @ Ra.T, Rg.square() @ v.double() @ Ra.square().T
    for key, ref in zip(("exp_avg", "exp_avg_sq"), refs):
        assert state[key].dtype == torch.float32
        err = float((state[key].double() - ref).norm() / ref.norm())
        assert err < (2e-2 if setting else 1e-5), (key, err)
        if setting:
            assert err > 1e-5
    assert state["U_A"] is new[0] and state["U_G"] is new[1]


def test_the_benchmark_runs(capsys):
    """``benchmarks/held_products.py --quick``: both copies trained on the same batches, the ratio printed."""
    from .._helpers import load_benchmark
    assert load_benchmark("held_products").main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "classifier" in out and "ratio of medians" in out
    assert _params.NARROW_PRODUCTS is None   # the setting given back
