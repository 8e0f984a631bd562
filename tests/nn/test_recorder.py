"""The hooks on the user's forward and backward: which batches the recorded statistics come from."""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.optim.hooks import MAX_PENDING  # noqa: E402
from infogeo.nn.optim.pool import Deferred  # noqa: E402
from .conftest import mlp  # noqa: E402

F = torch.nn.functional
# most preconditioners here keep the default trust region without a learning rate (warned once each)
pytestmark = pytest.mark.filterwarnings("ignore:Preconditioner. kl_clip is set but no lr:UserWarning")


def batch(i, n):
    g = torch.Generator().manual_seed(100 + i)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return X, torch.randint(0, 3, (n,), generator=g)


def exact_stats(model, X, kind):
    """Independent of the hooks: the exact curvature of ``model`` on the batch ``X`` (one ParameterSpace)."""
    return ig.nn.ParameterSpace(model, "categorical", data=X).curvature(kind, "exact").stats()


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-10, atol=1e-13), k


@pytest.mark.parametrize("kind", ["kfac", "diag", "block"])
def test_two_forwards_of_one_step_pool_to_the_union_batch(kind):
    """A siamese-style loss (two forwards, one backward) and micro-batches (two forward/backward pairs)."""
    (X1, y1), (X2, y2) = batch(0, 8), batch(1, 12)
    union = torch.cat([X1, X2])
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    (F.cross_entropy(model(X1), y1) + F.cross_entropy(model(X2), y2)).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, union, kind))

    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    for X, y in ((X1, y1), (X2, y2)):
        F.cross_entropy(model(X), y).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, union, kind))


def test_a_forward_never_back_propagated_leaves_the_statistics_alone():
    (X, y), (M, _) = batch(0, 8), batch(2, 5)
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature="kfac", fisher="exact")
    loss = F.cross_entropy(model(X), y)
    for _ in range(MAX_PENDING + 2):     # monitoring with grad enabled, more often than outputs are held
        model(M)
    loss.backward()
    pre.step()
    assert pre.recorder._boxes == []   # nothing held after the step (before exact_stats' own forward, recorded)
    assert_same(pre.curvature.stats(), exact_stats(model, X, "kfac"))


@pytest.mark.parametrize("kind", ["kfac", "dense"])   # dense: not recorded by hooks, computed on the batch again
def test_monitoring_forward_between_forward_and_backward(kind):
    (X, y), (M, _) = batch(0, 8), batch(2, 5)
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    out = model(X)
    model(M)
    F.cross_entropy(out, y).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, X, kind))


@pytest.mark.parametrize("fisher", ["empirical", "mc"])
def test_amp_grad_scaler_leaves_the_steps_unchanged(fisher):
    """A scaled loss (scale 2^10) with the scaler given: the same statistics and steps as without scaling."""
    def train(scaler):
        model = mlp()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        pre = ig.nn.Preconditioner(model, fisher=fisher, lr=sgd, curvature_update_period=1, grad_scaler=scaler)
        for i in range(3):
            X, y = batch(i, 8)
            sgd.zero_grad()
            loss = F.cross_entropy(model(X), y)
            if scaler is None:
                loss.backward()
                pre.step()
                sgd.step()
            else:
                scaler.scale(loss).backward()
                scaler.unscale_(sgd)
                pre.step()
                scaler.step(sgd)
                scaler.update()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), pre
    ref, _ = train(None)
    got, pre = train(torch.amp.GradScaler("cpu", init_scale=2.0 ** 10))
    assert torch.allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_amp_overflow_skips_without_raising_the_damping(recwarn):
    model = mlp()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    pre = ig.nn.Preconditioner(model, grad_scaler=scaler, lr=sgd)
    X, y = batch(0, 8)
    scaler.scale(F.cross_entropy(model(X), y)).backward()
    model[0].weight.grad[0, 0] = float("inf")      # an overflow
    before = [p.detach().clone() for p in model.parameters()]
    scaler.unscale_(sgd)
    assert pre.step() is False
    scaler.step(sgd)                                # skipped by the scaler: it saw the inf
    scaler.update()
    assert pre.damping == pre.base_damping and pre.state["step"] == 0
    rows = pre.recorder.rows
    assert not rows.calls and not rows.count and not rows.refused   # the skipped batch is forgotten
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not [w for w in recwarn if "Preconditioner" in str(w.message)]


@pytest.mark.parametrize("curvature", ["kfac", "diag"])
def test_a_step_on_gradients_the_scaler_has_not_unscaled_is_refused(curvature):
    """With grad_scaler given, a missing scaler.unscale_(opt) made the steps some 2^16 times too small, silently: the
    step refuses them, changing nothing; unscaled, through the same scaler's next iteration, it goes ahead.
    NaturalGradient with the scaler is unscaled by scaler.step(opt); its own step() without it is refused too."""
    model = mlp()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    pre = ig.nn.Preconditioner(model, curvature=curvature, lr=sgd, grad_scaler=scaler)
    X, y = batch(0, 8)
    scaler.scale(F.cross_entropy(model(X), y)).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"call scaler.unscale_\(optimizer\)"):
        pre.step()
    assert pre.steps == 0 and all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
    scaler.unscale_(sgd)
    assert pre.step()
    scaler.step(sgd)
    scaler.update()
    sgd.zero_grad()
    scaler.scale(F.cross_entropy(model(X), y)).backward()   # a new iteration: unscale_ is due again
    with pytest.raises(ValueError, match="still multiplied by the GradScaler's scale"):
        pre.step()
    other = mlp()
    off = ig.nn.Preconditioner(other, curvature=curvature, lr=torch.optim.SGD(other.parameters(), lr=0.1),
                               grad_scaler=torch.amp.GradScaler("cpu", enabled=False))
    F.cross_entropy(other(X), y).backward()
    assert off.step()   # a disabled scaler scales nothing
    odd = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    odd._per_optimizer_states = {}   # a layout of torch's private state other than the one known: not checked
    unchecked = ig.nn.Preconditioner(other, curvature=curvature, lr=0.1, grad_scaler=odd)
    other.zero_grad()
    odd.scale(F.cross_entropy(other(X), y)).backward()
    assert unchecked.step()
    model = mlp()
    opt = ig.nn.NaturalGradient(model, curvature=curvature, grad_scaler=scaler)
    for direct in (False, True):
        opt.zero_grad()
        scaler.scale(F.cross_entropy(model(X), y)).backward()
        if direct:
            with pytest.raises(ValueError, match="unscale_"):
                opt.step()
        else:
            scaler.step(opt)
            scaler.update()
    assert opt.preconditioner.steps == 1


class _CountBackward(torch.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        _CountBackward.calls += 1
        return g


class CountingTanh(torch.nn.Module):
    """tanh, counting the backward passes through it."""

    def forward(self, x):
        return _CountBackward.apply(torch.tanh(x))


def empirical_diagonal(model, batches):
    """Independent reference: the mean over examples of squared per-example loss gradients (one backward each)."""
    sq, n = None, 0
    for X, y in batches:
        for i in range(len(X)):
            model.zero_grad()
            F.cross_entropy(model(X[i:i + 1]), y[i:i + 1]).backward()
            g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) ** 2
            sq, n = (g if sq is None else sq + g), n + 1
    model.zero_grad()
    return sq / n


@pytest.mark.parametrize("fisher, passes", [("empirical", 1), ("mc", 2)])
def test_the_empirical_fisher_costs_no_backward_of_its_own(fisher, passes):
    """Its single column is the user's own backward; the Monte Carlo Fisher's sample needs a second one."""
    X, y = batch(0, 8)

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 5), CountingTanh(), torch.nn.Linear(5, 3)).double()
    reference = empirical_diagonal(build(), [(X, y)])
    model = build()
    pre = ig.nn.Preconditioner(model, curvature="diag", fisher=fisher)
    _CountBackward.calls = 0
    F.cross_entropy(model(X), y).backward()
    pre.step()
    assert _CountBackward.calls == passes
    if fisher == "empirical":
        got = torch.cat([pre.curvature.diagonal()[n].reshape(-1) for n, _ in model.named_parameters()])
        assert torch.allclose(got, reference, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("kind", ["kfac", "diag", "block"])
def test_empirical_statistics_of_micro_batches_and_of_a_siamese_loss_pool(kind):
    """Each forward's share comes from the backward that reaches it; pooled, they are the union batch's."""
    (X1, y1), (X2, y2) = batch(0, 8), batch(1, 12)
    reference = ig.nn.ParameterSpace(mlp(), "categorical", data=torch.cat([X1, X2]), targets=torch.cat([y1, y2]))
    reference = reference.curvature(kind, "empirical").stats()
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="empirical")
    for X, y in ((X1, y1), (X2, y2)):
        out = model(X)   # the earlier micro-batch's statistics are built by now, its gradients released
        assert not any(isinstance(item, Deferred) for item, _ in pre.estimate.pending._items)
        F.cross_entropy(out, y).backward()
    pre.step()
    assert_same(pre.curvature.stats(), reference)

    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="empirical")
    (F.cross_entropy(model(X1), y1) + F.cross_entropy(model(X2), y2)).backward()
    pre.step()
    assert_same(pre.curvature.stats(), reference)


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_micro_batches_that_keep_other_numbers_of_positions_pool_to_the_union_batch(kind):
    """K-FAC's input factor is a mean over the positions the loss keeps: micro-batches pool it by their kept
    positions, not by their examples (before, K-FAC's parameters were 1e-2 off after three steps)."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(8, 5, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (8, 5), generator=g)
    ignored = torch.rand(8, 5, generator=g) < 0.3
    ignored[:4] |= torch.rand(4, 5, generator=g) < 0.6   # the first micro-batch keeps fewer
    y[ignored] = -100
    kept = int((y != -100).sum())
    stats = []
    for parts in ([slice(0, 8)], [slice(0, 4), slice(4, 8)], [slice(0, 3), slice(3, 4), slice(4, 8)]):
        model = mlp()
        pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
        for p in parts:   # the union batch's loss: the sum over its kept positions over their number
            (F.cross_entropy(model(X[p]).reshape(-1, 3), y[p].reshape(-1), reduction="sum") / kept).backward()
        pre.step()
        stats.append(pre.curvature.stats())
    assert_same(stats[1], stats[0])
    assert_same(stats[2], stats[0])


def test_empirical_statistics_come_from_the_first_backward_of_a_retained_graph():
    """Two losses back-propagated separately through one forward: the output's hook reports the first, and
    so do the layers (the statistics are those of the first loss's gradient, as the explicit form gives)."""
    X, y = batch(0, 8)
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature="kfac", fisher="empirical")
    out = model(X)
    F.cross_entropy(out, y).backward(retain_graph=True)
    (0.1 * out.square().sum()).backward()
    pre.step()
    twin = mlp()
    named = ig.nn.Preconditioner(twin, curvature="kfac", fisher="empirical")
    F.cross_entropy(twin(X), y).backward()
    named.step(inputs=X, targets=y)
    assert_same(pre.curvature.stats(), named.curvature.stats())


class KeywordNet(torch.nn.Module):
    """Called with keywords: a batched mask, a constant scale, and a layer used twice (per-example fallback)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.out = torch.nn.Linear(4, 4).double(), torch.nn.Linear(4, 3).double()

    def forward(self, x=None, mask=None, scale=1.0):
        h = torch.tanh(self.a(x)) * mask
        return self.out(torch.tanh(self.a(h)) * scale)


def test_keyword_inputs_are_recorded_and_cut_per_example():
    """Exact Fisher diagonal from a keyword call equals a dense per-example Jacobian reference."""
    X, y = batch(0, 8)
    M = (torch.arange(32).reshape(8, 4) % 3 != 0).double()
    model = KeywordNet()
    pre = ig.nn.Preconditioner(model, curvature="diag", fisher="exact")
    out = model(x=X, mask=M, scale=2.0)
    F.cross_entropy(out, y).backward()
    assert pre.step() is True
    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}

    def logits(q, x, m):
        return torch.func.functional_call(model, q, (), {"x": x[None], "mask": m[None], "scale": 2.0})[0]
    p = F.softmax(out.detach(), 1)
    ref = 0
    for n in range(len(X)):
        J = torch.func.jacrev(logits)(params, X[n], M[n])
        J = torch.cat([J[k].reshape(3, -1) for k in names], 1)
        ref = ref + torch.einsum("ci,cd,di->i", J, torch.diag(p[n]) - torch.outer(p[n], p[n]), J)
    got = torch.cat([pre.curvature.diagonal()[k].reshape(-1) for k in names])
    assert torch.allclose(got, ref / len(X), rtol=1e-10, atol=1e-14)
    space = ig.nn.ParameterSpace(model, "categorical", data={"x": X, "mask": M, "scale": 2.0})
    assert torch.allclose(space.outputs, out)


class DictNet(torch.nn.Module):
    """Returns a dict, as many library models do."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x):
        z = self.net(x)
        return {"logits": z, "norm": z.norm()}


@pytest.mark.parametrize("kind", ["kfac", "diag", "dense"])
def test_output_fn_picks_the_outputs_from_what_the_model_returns(kind):
    X, y = batch(0, 8)
    model = DictNet()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact", output_fn=lambda out: out["logits"])
    F.cross_entropy(model(X)["logits"], y).backward()
    assert pre.step() is True
    got = {k.replace("net.", ""): t for k, t in pre.curvature.stats().items()}   # the same network, one level down
    assert_same(got, exact_stats(model.net, X, kind))
    with pytest.raises(TypeError, match="output_fn="):
        ig.nn.ParameterSpace(DictNet(), "categorical", data=X)


@pytest.mark.parametrize("kind", ["dense", "implicit"])
def test_a_kind_with_a_forward_of_its_own_takes_the_batches_the_backward_reached(kind):
    """``dense`` and ``implicit`` run the model again at the step: on the micro-batches back-propagated since the
    last step (they took the last micro-batch alone, 0.07 off), not on a monitoring forward that no backward
    reached (it took that one, 0.1 off)."""
    def run(micro, monitor=False):
        model = mlp()
        opt = ig.nn.NaturalGradient(model, curvature=kind, fisher="exact", curvature_update_period=1, cg_max_iter=5)
        for i in range(3):
            X, y = batch(i, 12)
            opt.zero_grad()
            for Xc, yc in zip(X.chunk(micro), y.chunk(micro)):
                (F.cross_entropy(model(Xc), yc) * len(Xc) / len(X)).backward()
            if monitor:
                model(batch(10 + i, 5)[0])   # with autograd enabled, never back-propagated
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    whole = run(1)
    for other in (run(3), run(1, monitor=True), run(2, monitor=True)):
        assert torch.allclose(other, whole, rtol=0, atol=1e-12), float((other - whole).abs().max())


@pytest.mark.parametrize("kind", ["kfac", "diag", "dense"])
def test_what_a_backward_recorded_is_dropped_once_its_gradients_are_reset(kind):
    """A batch back-propagated and then dropped by the loop (``zero_grad()`` without a step: a batch skipped, an
    overflow a ``GradScaler`` skips, an adversarial example's clean pass) is no part of the next step's
    statistics (its statistics were pooled into the next step's: 0.015 off in the diagonal)."""
    X1, y1 = batch(0, 8)
    X2, y2 = batch(1, 8)
    stats = []
    for skipped in (False, True):
        model = mlp()
        opt = ig.nn.NaturalGradient(model, curvature=kind, fisher="exact", ema_decay=0.0)
        if skipped:
            opt.zero_grad()
            F.cross_entropy(model(X1), y1).backward()   # no step for this batch
        opt.zero_grad()
        F.cross_entropy(model(X2), y2).backward()
        opt.step()
        stats.append(opt.preconditioner.curvature.stats() if kind != "dense" else
                     {"C": opt.preconditioner.curvature.to_dense()})
    assert_same(stats[1], stats[0])


class _Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.a, self.b, self.out = (torch.nn.Linear(4, 5), torch.nn.Linear(5, 5), torch.nn.Linear(5, 5),
                                              torch.nn.Linear(5, 3))
        self.double()

    def forward(self, x, route=0):
        h = torch.tanh(self.inp(x))
        return self.out(torch.tanh(self.a(h) if route == 0 else self.b(h)))


class _Routed(torch.nn.Module):
    def __init__(self, net, route):
        super().__init__()
        self.net, self.route = net, route

    def forward(self, x):
        return self.net(x, self.route)


def test_micro_batches_that_reach_other_layers_pool_to_the_union_batch():
    """Two micro-batches of one step through different branches: each branch's Kronecker factors are those of the
    micro-batch that reached it (A its mean over the rows that reached the layer, G its share of the union's
    examples), the shared layers' the mean of both (a raw AttributeError before)."""
    (X1, y1), (X2, y2) = batch(0, 6), batch(1, 6)
    model = _Branchy()
    opt = ig.nn.NaturalGradient(model, curvature="kfac", fisher="exact")
    for X, y, route in ((X1, y1, 0), (X2, y2, 1)):
        (F.cross_entropy(model(X, route), y) / 2).backward()
    opt.step()
    got = {b.names[0]: b for b in opt.preconditioner.curvature.blocks}
    ref = []
    for X, route in ((X1, 0), (X2, 1)):
        twin = _Branchy()   # the same initial parameters
        space = ig.nn.ParameterSpace(_Routed(twin, route), "categorical", data=X)
        ref.append({b.names[0].removeprefix("net."): b for b in space.curvature("kfac", "exact").blocks})
    for name, (wa, wg, A2) in {"inp.weight": (0.5, 0.5, True), "out.weight": (0.5, 0.5, True),
                               "a.weight": (1.0, 0.5, False), "b.weight": (1.0, 0.5, False)}.items():
        r = [R.get(name) for R in ref]
        r = [x for x in r if hasattr(x, "A") and bool(x.G.any())]   # the micro-batches that reached it
        A = sum(x.A for x in r) * (wa if A2 else 1.0)
        G = sum(x.G for x in r) * wg
        assert torch.allclose(got[name].A, A, rtol=1e-12, atol=1e-15), name
        assert torch.allclose(got[name].G, G, rtol=1e-12, atol=1e-15), name


class Checkpointed(torch.nn.Module):
    """An MLP whose hidden layers run under activation checkpointing (``mode``: ``"reentrant"``,
    ``"non-reentrant"``, ``"plain"``), or under ``torch.no_grad()`` (``"no-grad"``: a branch that takes no gradient),
    or twice, once without autograd (``"both"``: a teacher's pass through the same layers)."""

    def __init__(self, mode):
        super().__init__()
        self.hidden = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                          torch.nn.Tanh())
        self.head, self.skip, self.mode = torch.nn.Linear(8, 3), torch.nn.Linear(4, 8), mode

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        if self.mode in ("reentrant", "non-reentrant"):
            h = checkpoint(self.hidden, x.requires_grad_(), use_reentrant=self.mode == "reentrant")
        elif self.mode == "no-grad":
            with torch.no_grad():
                h = self.hidden(x)
            h = h + self.skip(x)
        elif self.mode == "both":
            with torch.no_grad():
                teacher = self.hidden(x)
            h = self.hidden(x) + 0.0 * teacher
        else:
            h = self.hidden(x)
        return self.head(h)


def _trained(model, curvature="kfac", fisher="exact"):
    """The parameters after 3 natural-gradient steps."""
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=curvature, fisher=fisher, curvature_update_period=1)
    for i in range(3):
        X, y = batch(i, 16)
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _checkpointed_run(mode, curvature="kfac", fisher="exact"):
    torch.manual_seed(0)
    return _trained(Checkpointed(mode).double(), curvature, fisher)


@pytest.mark.parametrize("curvature,fisher", [("kfac", "exact"), ("kfac", "mc"), ("ekfac", "exact"),
                                              ("diag", "empirical"), ("kfac", "empirical")])
def test_activation_checkpointing_non_reentrant_trains_as_without_and_reentrant_is_refused(curvature, fisher):
    """``torch.utils.checkpoint`` without reentrance runs the layers with autograd on: the hooks record them and the
    run equals the plain one bit for bit.  With ``use_reentrant=True`` (Hugging Face's gradient checkpointing in many
    versions) the layers run under ``torch.no_grad()`` and again inside the backward, unseen by the hooks: before,
    K-FAC took their curvature as zero and stepped 0.9 away from the plain run with no error; now the step raises,
    saying what to use, and the parameters are left as they were."""
    plain = _checkpointed_run("plain", curvature, fisher)
    assert torch.equal(_checkpointed_run("non-reentrant", curvature, fisher), plain)
    torch.manual_seed(0)
    model = Checkpointed("reentrant").double()
    start = [p.detach().clone() for p in model.parameters()]
    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature=curvature, fisher=fisher)
    X, y = batch(0, 16)
    F.cross_entropy(model(X), y).backward()
    with pytest.raises(ValueError, match=r"'hidden\.0'.*use_reentrant=False"):
        opt.step()
    assert all(torch.equal(a, p) for a, p in zip(start, model.parameters()))


@pytest.mark.parametrize("curvature,fisher", [("kfac", "exact"), ("ekfac", "exact"), ("kfac", "empirical"),
                                              ("diag", "empirical")])
def test_layers_run_without_autograd_add_nothing_to_the_curvature(curvature, fisher):
    """A call with autograd disabled passes no gradient, so it adds nothing to the curvature.  Before, a layer run
    once under ``torch.no_grad()`` (a teacher's pass) and once with autograd counted as used twice: K-FAC stepped
    0.54 away from the run without the extra pass; now the two are equal bit for bit.  A branch run only under
    ``torch.no_grad()`` leaves its parameters alone (no gradient) and trains the rest as if they were frozen."""
    plain = _checkpointed_run("plain", curvature, fisher)
    assert torch.equal(_checkpointed_run("both", curvature, fisher), plain)
    branch = _checkpointed_run("no-grad", curvature, fisher)
    torch.manual_seed(0)
    frozen = Checkpointed("plain").double()
    frozen.forward = lambda x: frozen.head(frozen.hidden(x).detach() + frozen.skip(x))
    for p in frozen.hidden.parameters():
        p.requires_grad_(False)
    assert torch.equal(branch, _trained(frozen, curvature, fisher))
