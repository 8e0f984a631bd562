"""BatchNorm in training mode under the optimizer: the batch's statistics count as constants (K-FAC practice)."""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402

F = torch.nn.functional
# preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")
N = 6


def model_and_batch(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.Tanh(),
                                torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3)).double()
    with torch.no_grad():   # away from the initial gamma = 1, beta = 0
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    g = torch.Generator().manual_seed(seed + 1)
    return model, torch.randn(N, 2, 4, 4, generator=g, dtype=torch.float64), torch.randint(0, 3, (N,), generator=g)


def frozen_statistics_jacobians(model, X):
    """Per-example Jacobians of the logits in the BatchNorm and Linear parameters, with BatchNorm using
    the batch's mean and variance as constants (an independent functional rewrite of the network)."""
    conv, bn, lin = model[0], model[1], model[4]
    with torch.no_grad():
        h = conv(X)
        mean, var = h.mean((0, 2, 3)), h.var((0, 2, 3), unbiased=False)

    def logits(x, gamma, beta, w, b):
        u = F.batch_norm(conv(x.unsqueeze(0)), mean, var, gamma, beta, training=False, eps=bn.eps)
        return F.linear(torch.tanh(u).flatten(1), w, b)[0]

    params = (bn.weight.detach(), bn.bias.detach(), lin.weight.detach(), lin.bias.detach())
    jac = [torch.func.jacrev(logits, argnums=(1, 2, 3, 4))(X[n], *params) for n in range(N)]
    return [torch.cat([j.reshape(3, -1) for j in js], 1) for js in jac]


def test_batchnorm_in_training_mode_trains_with_every_representation():
    for curvature in ("kfac", "ekfac", "diag", "block"):
        model, X, y = model_and_batch()
        opt = ig.nn.NaturalGradient(model, lr=0.2, curvature=curvature, step_rule="clip")
        with torch.no_grad():
            before = F.cross_entropy(model(X), y).item()
        for _ in range(5):
            opt.zero_grad()
            F.cross_entropy(model(X), y).backward()
            assert opt.step() is None
        with torch.no_grad():
            assert F.cross_entropy(model(X), y).item() < before, curvature
        assert model[1].training


def test_batchnorm_and_later_layers_get_the_frozen_statistics_curvature():
    """Exact Fisher diagonal of the BatchNorm and Linear parameters = that of the network whose BatchNorm
    uses the batch's statistics as constants (per-example Jacobians, dense reference)."""
    model, X, y = model_and_batch()
    pre = ig.nn.Preconditioner(model, curvature="diag", fisher="exact")
    F.cross_entropy(model(X), y).backward()
    pre.step()
    got = pre.curvature.diagonal()
    got = torch.cat([got[n].reshape(-1) for n in ("1.weight", "1.bias", "4.weight", "4.bias")])
    with torch.no_grad():
        p = F.softmax(model(X), 1)
    ref = sum(torch.einsum("ci,cd,di->i", J, torch.diag(p[n]) - torch.outer(p[n], p[n]), J)
              for n, J in enumerate(frozen_statistics_jacobians(model, X))) / N
    assert torch.allclose(got, ref, rtol=1e-10, atol=1e-14)


def test_layers_before_batchnorm_take_the_backward_through_the_normalised_graph():
    """Euclidean outputs (identity square root): the convolution's exact diagonal from output gradients
    back-propagated through the coupled graph, per example, by plain autograd and F.unfold."""
    model, X, y = model_and_batch()
    pre = ig.nn.Preconditioner(model, curvature="diag", fisher="exact", output_metric="euclidean")
    loss = 0.5 * model(X).square().sum() / N
    loss.backward()
    pre.step()
    got = pre.curvature.diagonal()
    conv = model[0]
    h = conv(X)
    z = model[4](model[3](model[2](model[1](h))))
    patches = F.unfold(X, 3, padding=1)                           # (N, 2*9, 16)
    ref_w, ref_b = torch.zeros_like(conv.weight).reshape(3, -1), torch.zeros_like(conv.bias)
    for k in range(3):
        b = torch.autograd.grad(z[:, k].sum(), h, retain_graph=True)[0].reshape(N, 3, -1)   # coupled
        ref_w += torch.einsum("ncl,npl->ncp", b, patches).square().sum(0)
        ref_b += b.sum(2).square().sum(0)
    assert torch.allclose(got["0.weight"], (ref_w / N).reshape(conv.weight.shape), rtol=1e-10, atol=1e-14)
    assert torch.allclose(got["0.bias"], ref_b / N, rtol=1e-10, atol=1e-14)


def test_the_parameter_space_still_refuses_per_example_curvatures():
    model, X, _ = model_and_batch()
    with pytest.raises(ValueError, match="training mode"):
        ig.nn.ParameterSpace(model, "categorical", data=X).curvature("kfac")


def test_running_statistics_advance_once_per_forward_of_the_user():
    model, X, y = model_and_batch()
    opt = ig.nn.NaturalGradient(model, lr=0.2, curvature_update_period=1, step_rule="clip")
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step()
    assert int(model[1].num_batches_tracked) == 3
