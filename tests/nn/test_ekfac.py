"""EKFAC (George et al., 2018) against the dense float64 GGN."""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402
from ._dense_reference import rel  # noqa: E402
from .test_shapes import _model  # noqa: E402
from .test_space import check_consistent  # noqa: E402

EXACT = 1e-10


def _mlp():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    return m, torch.randn(7, 4, dtype=torch.float64)


@pytest.mark.parametrize("shape", ["NC", "NTC"])
def test_single_linear_euclidean_is_exact(shape):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    X = torch.randn((6, 4) if shape == "NC" else (3, 5, 4), dtype=torch.float64)
    space = ig.nn.ParameterSpace(model, "euclidean", data=X)
    G = ref.ggn(model, (X,), "euclidean")
    E = space.curvature("ekfac")
    assert rel(E.to_dense(), G) < EXACT
    check_consistent(E, space)


@pytest.mark.parametrize("shape", ["NC", "NTC", "NHWC"])
@pytest.mark.parametrize("loss", ["categorical", "euclidean"])
def test_correction_is_ggn_diagonal_in_kronecker_eigenbasis(shape, loss):
    model, X = _model(shape)
    space = ig.nn.ParameterSpace(model, loss, data=X)
    G = ref.ggn(model, (X,), loss)
    E = space.curvature("ekfac")
    kron = [b for b in E.blocks if b.kind == "ekfac"]
    assert kron
    names = list(ref.trainable(model))
    for b in kron:
        Ua, Ug = b.basis()
        idx = b.flat_index(space.layout)
        order = torch.tensor([names.index(n) for n in space.names])  # layout order is named_parameters order
        assert (order == torch.arange(len(names))).all()
        Gb = G[idx][:, idx]
        Q = torch.kron(Ug, Ua)
        torch.testing.assert_close(b.s.reshape(-1), torch.diagonal(Q.T @ Gb @ Q), rtol=1e-10, atol=1e-13)
    # layers without Kronecker factors (LayerNorm) get their exact diagonal
    for b in E.blocks:
        if b.kind == "diag":
            for n in b.names:
                (Gn,) = ref.blocks(G, model, [[n]])
                assert rel(b.d[n].reshape(-1), torch.diagonal(Gn)) < EXACT


def test_closer_to_ggn_than_kfac_on_mlp():
    model, X = _mlp()
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    G = ref.ggn(model, (X,), "categorical")
    Gb = ref.block_diagonal(G, model)
    e_ekfac = (space.curvature("ekfac").to_dense() - Gb).norm()
    e_kfac = (space.curvature("kfac").to_dense() - Gb).norm()
    # s is the Frobenius-best diagonal in K-FAC's eigenbasis, K-FAC's eigenvalues one candidate
    assert e_ekfac < e_kfac


def test_protocol_and_statistics():
    model, X = _mlp()
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    E = space.curvature("ekfac", kfac_approx="reduce")
    check_consistent(E, space)
    same = E.with_stats(E.stats())
    assert rel(same.to_dense(), E.to_dense()) < EXACT
    assert E.ema(E, 0.5).same_structure(E) and E.is_finite()
    with pytest.raises(ValueError, match="kfac_approx"):
        space.curvature("ekfac", kfac_approx="sideways")


@pytest.mark.filterwarnings("ignore:the empirical Fisher of outputs with")
def test_empirical_correction_on_sequences():
    """method='empirical': the scales are the empirical Fisher's diagonal in the basis (one row per position)."""
    model, X = _model("NTC")
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    t = torch.randint(0, 3, space.outputs.shape[:-1], generator=torch.Generator().manual_seed(2))
    F = ref.empirical_fisher(model, (X,), "categorical", t)
    E = space.curvature("ekfac", "empirical", targets=t)
    for b in (b for b in E.blocks if b.kind == "ekfac"):
        Ua, Ug = b.basis()
        idx = b.flat_index(space.layout)
        Q = torch.kron(Ug, Ua)
        assert rel(b.s.reshape(-1), torch.diagonal(Q.T @ F[idx][:, idx] @ Q)) < EXACT
    assert space.curvature("ekfac", "mc", generator=torch.Generator().manual_seed(0)).is_finite()


def test_follows_the_curvature_protocol():
    """The protocol checks every other representation passes (tests/nn/test_operators.py), on EKFAC."""
    from . import test_operators as protocol
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    space = ig.nn.ParameterSpace(model, "categorical", data=torch.randn(10, 4, dtype=torch.float64))
    protocol.test_protocol_is_the_metric_protocol(space, "ekfac")
    protocol.test_matmul_and_scipy_operator(space, "ekfac")
