"""Output metrics from torch losses: loss, differential and metric against the torch loss itself (float64)."""
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.func import functional_call, hessian, jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from .conftest import categorical_Gz, flat, mlp, params_of, reference_metric  # noqa: E402
from .test_space import EXACT, rel  # noqa: E402

nn = torch.nn
N, T, C = 4, 3, 3


def seq_data(seed=0, in_dim=4, shape=(N, T)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape + (in_dim,), dtype=torch.float64, generator=g)


def torch_ggn(model, X, loss_of_z):
    """J^T (d^2 L / dz^2) J of the torch loss, by jacrev and hessian in z (the reference)."""
    p = params_of(model)
    z = functional_call(model, p, (X,)).detach()
    J = jacrev(lambda q: functional_call(model, q, (X,)))(p)
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], dim=1)
    H = hessian(lambda zz: loss_of_z(zz.reshape(z.shape)))(z.reshape(-1))
    return Jm.T @ H @ Jm


def torch_grad(model, X, loss_of_z):
    p = {n: t.clone().requires_grad_(True) for n, t in params_of(model).items()}
    g = torch.autograd.grad(loss_of_z(functional_call(model, p, (X,))), list(p.values()))
    return torch.cat([t.reshape(-1) for t in g])


def check_against_torch(model, X, y, loss, loss_of_z, fisher=None):
    space = ig.nn.ParameterSpace(model, loss, data=X, targets=y)
    z = model(X).detach()
    assert abs(float(space.loss()) - float(loss_of_z(z))) < 1e-12 * max(1.0, abs(float(loss_of_z(z))))
    assert rel(flat(space.differential().components, space.names), torch_grad(model, X, loss_of_z)) < EXACT
    G = space.metric.matrix()
    ref = fisher if fisher is not None else torch_ggn(model, X, loss_of_z)
    assert rel(G, ref) < EXACT
    v = {n: torch.randn(t.shape, dtype=t.dtype, generator=torch.Generator().manual_seed(1))
         for n, t in space.point.items()}
    assert rel(flat(space.metric.mv(None, v), space.names), ref @ flat(v, space.names)) < EXACT
    return space


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(N,), (N, T)])
def test_cross_entropy(reduction, shape):
    model, X = mlp(sizes=(4, 5, C)), seq_data(shape=shape)
    y = torch.randint(0, C, shape, generator=torch.Generator().manual_seed(2))
    loss = nn.CrossEntropyLoss(reduction=reduction)
    check_against_torch(model, X, y, loss, lambda z: loss(z.reshape(-1, C), y.reshape(-1)))


def test_cross_entropy_ignore_index_label_smoothing_and_class_weights():
    model, X = mlp(sizes=(4, 5, C)), seq_data()
    y = torch.randint(0, C, (N, T), generator=torch.Generator().manual_seed(2))
    y[0, 1] = y[2, 0] = y[3, 2] = -100
    for loss in (nn.CrossEntropyLoss(), nn.CrossEntropyLoss(reduction="sum"),
                 nn.CrossEntropyLoss(label_smoothing=0.2),
                 nn.CrossEntropyLoss(weight=torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)),
                 nn.CrossEntropyLoss(ignore_index=1)):
        yy = y.clamp_min(0) if loss.ignore_index == 1 else y
        space = check_against_torch(model, X, yy, loss, lambda z: loss(z.reshape(-1, C), yy.reshape(-1)))
        if loss.ignore_index == -100 and loss.weight is None:
            # ignored positions contribute nothing: the metric equals the one of the batch without them
            keep = (yy != -100).reshape(-1)
            z_rows = lambda z: z.reshape(-1, C)[keep]  # noqa: E731
            ref = torch_ggn(model, X, lambda z: loss(z_rows(z), yy.reshape(-1)[keep]))
            assert rel(space.metric.matrix(), ref) < EXACT


def test_cross_entropy_probability_targets():
    model, X = mlp(sizes=(4, 5, C)), seq_data(shape=(N,))
    y = torch.softmax(torch.randn(N, C, dtype=torch.float64), -1)
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)
    check_against_torch(model, X, y, loss, lambda z: loss(z, y))


def test_cross_entropy_module_is_the_categorical_fisher_regression():
    """nn.CrossEntropyLoss() was once taken for a generic divergence (metric scaled by the logits' row sums)."""
    model, X = mlp(sizes=(4, 5, C)), seq_data(shape=(N,))
    G = ig.nn.ParameterSpace(model, nn.CrossEntropyLoss(), data=X).metric.matrix()
    assert rel(G, reference_metric(model, X, categorical_Gz)) < EXACT
    assert isinstance(ig.nn.output_metric(nn.functional.cross_entropy), ig.nn.LossOutput)


def test_nll_loss_is_the_categorical_fisher_of_the_logits():
    logits = mlp(sizes=(4, 5, C))
    model = nn.Sequential(logits, nn.LogSoftmax(-1))
    X = seq_data()
    y = torch.randint(0, C, (N, T), generator=torch.Generator().manual_seed(2))
    y[1, 1] = -100
    loss = nn.NLLLoss()
    keep = (y != -100).reshape(-1)
    # NLL is linear in the log-probabilities: its metric is the Fisher, i.e. the cross-entropy GGN of the logits
    ce = nn.CrossEntropyLoss()
    fisher = torch_ggn(logits, X, lambda z: ce(z.reshape(-1, C)[keep], y.reshape(-1)[keep]))
    check_against_torch(model, X, y, loss, lambda z: loss(z.reshape(-1, C), y.reshape(-1)), fisher=fisher)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_bce_with_logits_and_mse(reduction):
    model, X = mlp(sizes=(4, 5, C)), seq_data()
    g = torch.Generator().manual_seed(3)
    yb = torch.randint(0, 2, (N, T, C), generator=g).double()
    yr = torch.randn(N, T, C, dtype=torch.float64, generator=g)
    bce, mse = nn.BCEWithLogitsLoss(reduction=reduction), nn.MSELoss(reduction=reduction)
    check_against_torch(model, X, yb, bce, lambda z: bce(z, yb))
    check_against_torch(model, X, yr, mse, lambda z: mse(z, yr))   # once crashed: "ZeroTensors are immutable"


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gaussian_nll_is_the_expected_hessian(reduction):
    d = 2
    net = mlp(sizes=(4, 5, 2 * d))

    class MeanVar(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            h = self.net(x)
            return torch.cat([h[..., :d], nn.functional.softplus(h[..., d:]) + 0.1], -1)

    model, X = MeanVar(), seq_data()
    z = model(X).detach()
    mu, var = z[..., :d], z[..., d:]
    y = mu + var.sqrt() * torch.randn(mu.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    loss = nn.GaussianNLLLoss(reduction=reduction, full=True)

    def of_z(y_):
        return lambda zz: loss(zz[..., :d], y_, zz[..., d:])

    # the Fisher is the expected Hessian over y ~ N(mu, var); the loss is a polynomial of degree 2 in
    # (y - mu), so the symmetric two-point rule y = mu +- sqrt(var) takes that expectation exactly
    s = var.sqrt()
    fisher = 0.5 * (torch_ggn(model, X, of_z(mu + s)) + torch_ggn(model, X, of_z(mu - s)))
    check_against_torch(model, X, y, loss, of_z(y), fisher=fisher)


def test_empirical_fisher_is_one_outer_product_per_position():
    model, X = mlp(sizes=(4, 5, C)), seq_data()
    y = torch.randint(0, C, (N, T), generator=torch.Generator().manual_seed(2))
    space = ig.nn.ParameterSpace(model, nn.CrossEntropyLoss(), data=X, targets=y)
    p = params_of(model)
    per_pos = jacrev(lambda q: nn.functional.cross_entropy(
        functional_call(model, q, (X,)).reshape(-1, C), y.reshape(-1), reduction="none"))(p)
    g = torch.cat([per_pos[n].reshape(N * T, -1) for n in p], dim=1)
    ref = g.T @ g / (N * T)      # the mean over all N*T positions, as the loss
    assert rel(space.curvature("dense", "empirical").to_dense(), ref) < EXACT


def test_other_callables_are_refused_unless_wrapped():
    model, X = mlp(), seq_data(shape=(N,))
    # an unsupported loss is named as such whatever its reduction (KLDivLoss's 'batchmean' was told to use 'mean')
    for bad in (nn.L1Loss(), nn.KLDivLoss(), nn.KLDivLoss(reduction="batchmean"), nn.HuberLoss(reduction="none"),
                lambda u, w: ((u - w) ** 2).sum()):
        with pytest.raises(TypeError, match="DivergenceOutput"):
            ig.nn.ParameterSpace(model, bad, data=X)
    with pytest.raises(ValueError, match="reduction"):
        ig.nn.ParameterSpace(model, nn.CrossEntropyLoss(reduction="none"), data=X)
    with pytest.raises(ValueError, match="pos_weight"):
        ig.nn.ParameterSpace(model, nn.BCEWithLogitsLoss(pos_weight=torch.ones(3)), data=X)
    weighted = ig.nn.ParameterSpace(model, nn.CrossEntropyLoss(weight=torch.ones(3, dtype=torch.float64)), data=X)
    with pytest.raises(ValueError, match="targets"):   # the class weights are the targets' classes'
        weighted.curvature("diag", "exact")
    # an explicit divergence is its Hessian metric: 0.5 |u - w|^2 gives the Gauss-Newton matrix
    space = ig.nn.ParameterSpace(model, ig.nn.DivergenceOutput(lambda u, w: 0.5 * ((u - w) ** 2).sum()), data=X)
    assert rel(space.metric.matrix(), ig.nn.ParameterSpace(model, "euclidean", data=X).metric.matrix()) < EXACT


def test_unbound_loss_metric_says_how_to_bind():
    om = ig.nn.output_metric(nn.MSELoss())
    z = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="bind"):
        om.mv(z, z)
    assert rel(om.bind(z).mv(z, torch.ones_like(z)), torch.full_like(z, 2.0 / 3)) < 1e-15


def test_active_dropout_warns():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.3), nn.Tanh(), nn.Linear(6, 3)).double()
    X = seq_data(shape=(N,))
    with pytest.warns(UserWarning, match="random"):
        ig.nn.ParameterSpace(model, "categorical", data=X)
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ig.nn.ParameterSpace(model, "categorical", data=X)
