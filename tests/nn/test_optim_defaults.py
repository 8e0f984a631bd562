"""With its default settings the optimizer converges where the issue saw divergence: iris, minibatches of 32;
and on the digits networks it ends below the Adam rate of the example (K-FAC's default step, eigen-adam, lr 1e-2)."""
import warnings

import pytest

torch = pytest.importorskip("torch")
sklearn_datasets = pytest.importorskip("sklearn.datasets")
import infogeo as ig  # noqa: E402

F = torch.nn.functional
EPOCHS, BATCH = 50, 32
ADAM_RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def iris():
    d = sklearn_datasets.load_iris()
    return torch.tensor(d.data, dtype=torch.float32), torch.tensor(d.target)


def network():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def train(make_optimizer, X, y):
    """Plain minibatch loop (shuffled each epoch, seeded); the whole-set loss after each epoch."""
    model = network()
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(EPOCHS):
        perm = torch.randperm(len(X), generator=gen)
        for i in range(0, len(X), BATCH):
            idx = perm[i:i + BATCH]
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
        with torch.no_grad():
            losses.append(float(F.cross_entropy(model(X), y)))
    return losses


@pytest.mark.slow
def test_iris_minibatches_defaults_match_adams_best_rate():
    X, y = iris()
    adam_best = min(train(lambda m: torch.optim.Adam(m.parameters(), lr=lr), X, y)[-1] for lr in ADAM_RATES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recovery was needed either
        runs = [train(lambda m: ig.nn.NaturalGradient(m, seed=seed), X, y) for seed in range(3)]
    assert all(l == l for ours in runs for l in ours)
    # the default step (K-FAC's eigen-adam, lr 1e-2) ends at 0.0489 (median of the Monte Carlo seeds 0, 1, 2;
    # 0.0480-0.0501 over seeds 0-7) against Adam's best 0.0513 of five rates; the grafted step at 0.0539-0.0563.
    # The bound leaves 7 % for other BLAS and rounding (the clipped step has no effective lr, see test_optim_step_rule)
    final = sorted(ours[-1] for ours in runs)[1]
    assert final <= 1.05 * adam_best, (final, adam_best)


@pytest.mark.slow
@pytest.mark.parametrize("problem,iterations", [("classifier", 100), ("autoencoder", 200)])
def test_digits_with_defaults_converges(problem, iterations):
    """Digits classifier and autoencoder (examples/nn_digits.py) with the default settings, batch 256."""
    from .conftest import _load_example
    digits = _load_example("nn_digits")
    X, y, Xte, yte = digits.load_digits()
    loss = lambda out, xb, yb: digits.loss(problem, out, xb, yb)  # noqa: E731
    runs = {}
    for name in ("defaults", "adam"):
        model = digits.mlp(digits.PROBLEMS[problem]["sizes"], seed=0)
        opt = (ig.nn.NaturalGradient(model, output_metric=digits.PROBLEMS[problem]["output_metric"])
               if name == "defaults" else torch.optim.Adam(model.parameters(), lr=digits.DEFAULT_LR[problem]["adam"]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            runs[name] = digits.fit(model, opt, loss, X, y, iterations, 256, eval_every=iterations // 4)["loss"]
    ours = runs["defaults"]
    assert all(b < a for a, b in zip(ours, ours[1:]))            # monotone on the whole training set
    assert ours[-1] < runs["adam"][-1]                           # ahead of the example's Adam rate
    if problem == "classifier":
        assert ours[-1] < 0.05


@pytest.mark.slow
def test_digits_cnn_with_batchnorm_in_training_mode_with_defaults():
    """A CNN with BatchNorm (training mode), default K-FAC settings, minibatches of 64, 3 epochs: no recovery
    needed, a training loss as low as Adam's best of three rates to within a factor 2, 97 % test accuracy."""
    d = sklearn_datasets.load_digits()
    X = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16
    y = torch.tensor(d.target)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
    (X, Xte), (y, yte) = (X[perm[:1400]], X[perm[1400:]]), (y[perm[:1400]], y[perm[1400:]])

    def run(make):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.BatchNorm2d(16),
                                    torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 16, 10))
        opt, gen = make(model), torch.Generator().manual_seed(1)
        for _ in range(3):
            idx = torch.randperm(len(X), generator=gen)
            for i in range(0, len(X), 64):
                b = idx[i:i + 64]
                opt.zero_grad()
                F.cross_entropy(model(X[b]), y[b]).backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            return float(F.cross_entropy(model(X), y)), float((model(Xte).argmax(1) == yte).float().mean())
    adam_best = min(run(lambda m: torch.optim.Adam(m.parameters(), lr=lr))[0] for lr in (1e-3, 3e-3, 1e-2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss, accuracy = run(lambda m: ig.nn.NaturalGradient(m))
    assert loss < 2 * adam_best and accuracy >= 0.97, (loss, adam_best, accuracy)
