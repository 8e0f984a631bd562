"""``nn.BCELoss`` on probability outputs (a sigmoid in the model): the Bernoulli Fisher in its mean coordinates,
:math:`G_p = \\operatorname{diag}(1/(p(1-p)))`, against an independent dense pullback, its samples, its empirical
columns, and the optimizer on an autoencoder with sigmoid outputs."""
import pytest

torch = pytest.importorskip("torch")
from torch.func import jacrev  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn.output_metrics import BernoulliProbabilityFisher  # noqa: E402

F64 = torch.float64


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2),
                               torch.nn.Sigmoid()).double()


def test_the_exact_fisher_is_the_pullback_of_the_mean_coordinates_metric():
    """Dense exact curvature of BCELoss (mean over N C elements: weight 1/C per output) against
    :math:`\\frac1N\\sum_n J_n^T \\operatorname{diag}(1/(C p(1-p))) J_n` from jacrev."""
    m = model()
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(5, 3, dtype=F64, generator=g), torch.randint(0, 2, (5, 2), generator=g).to(F64)
    space = ig.nn.ParameterSpace(m, torch.nn.BCELoss(), data=X, targets=y)
    got = space.curvature("dense", "exact").to_dense()
    params = {n: p.detach() for n, p in m.named_parameters()}

    def out(flat):
        d, i = {}, 0
        for n, p in params.items():
            d[n] = flat[i:i + p.numel()].reshape(p.shape)
            i += p.numel()
        return torch.func.functional_call(m, d, (X,))
    w0 = torch.cat([p.reshape(-1) for p in params.values()])
    J = jacrev(out)(w0)                     # (N, C, P)
    p = out(w0)
    want = torch.einsum("ncp,nc,ncq->pq", J, 1.0 / (2 * p * (1 - p)), J) / 5
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-13)


def test_samples_have_the_metric_as_second_moment_and_empirical_columns_are_the_loss_gradient():
    metric = BernoulliProbabilityFisher()
    p = torch.tensor([[0.1, 0.5, 0.93]], dtype=F64)
    s = metric.sample(p, 200_000, torch.Generator().manual_seed(0))
    second = s.square().mean(0)
    assert torch.allclose(second, metric.diag(p), rtol=0.03)   # a Monte Carlo mean: about 1 % at this count
    t = torch.tensor([[0.0, 1.0, 1.0]], dtype=F64)
    z = p.clone().requires_grad_(True)
    torch.nn.functional.binary_cross_entropy(z, t, reduction="sum").backward()
    assert torch.allclose(metric.loss_grad(p, t), z.grad, rtol=1e-12)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        metric.check(torch.tensor([[0.0, 0.5]], dtype=F64))


def test_the_optimizer_trains_a_sigmoid_autoencoder_with_bceloss():
    torch.manual_seed(0)
    X = torch.rand(64, 8)
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 8), torch.nn.Sigmoid())
    bce = torch.nn.BCELoss()
    opt = ig.nn.NaturalGradient(net, output_metric=bce)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = bce(net(X), X)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.02 and all(torch.isfinite(p).all() for p in net.parameters())
