"""K-FAC factors from the user's own backward against kfac-pytorch's (installed from its repository; skipped otherwise)."""
import pytest

torch = pytest.importorskip("torch")
kfac = pytest.importorskip("kfac.preconditioner", reason="kfac-pytorch is not on the package index")

import infogeo as ig  # noqa: E402

F = torch.nn.functional
# preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")


@pytest.mark.filterwarnings("ignore:Full backward hook")   # from kfac-pytorch's own module hooks
def test_empirical_kfac_factors_equal_kfac_pytorch():
    """Both record A from the layer inputs and G from the output gradients of the same backward.

    kfac-pytorch keeps the mean loss's 1/N in the output gradients, so its G is ours / N^2
    (ours: the empirical Fisher of per-example losses, columns N dL/dz), and it starts its running
    averages (decay beta) from the identity, ours from the first statistics.
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    twin = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    twin.load_state_dict(model.state_dict())
    X = torch.randn(16, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    ours = ig.nn.Preconditioner(model, fisher="empirical")
    F.cross_entropy(model(X), y).backward()
    ours.step()
    beta = 0.9
    peer = kfac.KFACPreconditioner(twin, factor_update_steps=1, inv_update_steps=1, lr=0.1, factor_decay=beta,
                                   loglevel=0)
    F.cross_entropy(twin(X), y).backward()
    peer.step()
    stats = ours.curvature.stats()
    layers = dict(peer._layers.values())   # module -> (name, layer), by name
    for i, name in enumerate(["0", "2"]):
        layer = layers[name]
        A, G = stats[f"{i}/A"], stats[f"{i}/G"]
        eye = lambda M: torch.eye(M.shape[0], dtype=M.dtype)  # noqa: E731
        assert torch.allclose(beta * eye(A) + (1 - beta) * A, layer.a_factor, rtol=1e-10, atol=1e-14)
        assert torch.allclose(beta * eye(G) + (1 - beta) * G / 16 ** 2, layer.g_factor, rtol=1e-10, atol=1e-14)
