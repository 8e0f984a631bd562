"""The plain training loop with a loss that ignores positions (``ignore_index``: masked language modelling,
padding): the optimizers' hooks see no targets, so they read the ignored positions off the loss gradient, and
the curvature equals the one :class:`~infogeo.nn.ParameterSpace` builds from the targets (exact and empirical
Fisher), and does not depend on what the ignored positions hold (Monte Carlo Fisher too)."""
import pytest

torch = pytest.importorskip("torch")

import infogeo as ig  # noqa: E402

F64 = torch.float64
LAM = 1e-2


def model(seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(7, 3), torch.nn.Linear(3, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 4)).double()


def batch(seed=0, T=5):
    g = torch.Generator().manual_seed(seed)
    ids, y = torch.randint(0, 7, (3, T), generator=g), torch.randint(0, 4, (3, T), generator=g)
    y[0, 2:] = -100
    y[2, 3:] = -100
    return ids, y


def plain_direction(m, ids, y, kind, fisher, metric, reduction="mean"):
    """The preconditioner's direction in the plain loop (hooks, no targets)."""
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction=reduction)
    exact = {"inverse": "eigen"} if kind == "kfac" else {}   # the damped block inverted exactly, as below
    pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher=fisher, kl_clip=None, output_metric=metric, seed=3,
                               **exact)
    m.zero_grad()
    ce(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
    g = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    return torch.cat([v.reshape(-1) for v in pre.precondition().values()]), g


@pytest.mark.parametrize("kind", ["diag", "block", "kfac"])   # the kinds recorded from the user's backward
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_plain_loop_equals_the_curvature_of_the_targets(kind, fisher, reduction):
    """Against :math:`(C + \\lambda I)^{-1} g` with the targets' curvature in its dense form."""
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction=reduction)
    ids, y = batch()
    d, g = plain_direction(model(), ids, y, kind, fisher, ce, reduction)
    C = ig.nn.ParameterSpace(model(), ce, data=ids, targets=y).curvature(kind, fisher).to_dense()
    want = torch.linalg.solve(C + LAM * torch.eye(len(g), dtype=F64), g)
    assert torch.allclose(d, want, rtol=1e-9, atol=1e-12)


def test_examples_a_classifier_ignores_are_left_out():
    """2-D outputs: an example whose target is ``ignore_index`` adds nothing, as with the targets."""
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)
    torch.manual_seed(0)
    X, y = torch.randn(6, 3, dtype=F64), torch.tensor([0, 1, -100, 2, -100, 1])
    for kind, fisher in [("kfac", "exact"), ("kfac", "empirical"), ("diag", "empirical")]:
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()
        ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()
        ref.load_state_dict(m.state_dict())
        exact = {"inverse": "eigen"} if kind == "kfac" else {}
        pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher=fisher, kl_clip=None, output_metric=ce, **exact)
        m.zero_grad()
        ce(m(X), y).backward()
        g = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        d = torch.cat([v.reshape(-1) for v in pre.precondition().values()])
        C = ig.nn.ParameterSpace(ref, ce, data=X, targets=y).curvature(kind, fisher).to_dense()
        want = torch.linalg.solve(C + LAM * torch.eye(len(g), dtype=F64), g)
        assert torch.allclose(d, want, rtol=1e-9, atol=1e-12), (kind, fisher)


@pytest.mark.parametrize("kind,fisher", [("diag", "mc"), ("kfac", "mc"), ("kfac", "exact"), ("diag", "exact"),
                                         ("kfac", "empirical")])
@pytest.mark.parametrize("metric", ["categorical", "loss"])
def test_what_the_ignored_positions_hold_changes_nothing(kind, fisher, metric):
    """The same gradient (the loss ignores the positions that differ) gives the same direction, with the model's
    own metric by name too, and with sampled targets (the same draws)."""
    ids, y = batch()
    other = ids.clone()
    other[0, 2:] = 1
    other[2, 3:] = 1
    spec = torch.nn.CrossEntropyLoss(ignore_index=-100) if metric == "loss" else metric
    d1, g1 = plain_direction(model(), ids, y, kind, fisher, spec)
    d2, g2 = plain_direction(model(), other, y, kind, fisher, spec)
    assert torch.equal(g1, g2)
    assert torch.allclose(d1, d2, rtol=1e-10, atol=1e-13)


def test_a_squared_error_at_an_exact_fit_is_not_taken_for_ignored():
    """A zero gradient row of a squared error is an exact fit, whose Gauss-Newton block is not zero: kept."""
    m = model()
    ids, _ = batch()
    with torch.no_grad():
        target = m(ids).clone()
    target[0, 0] += 1.0   # one position off, the others fitted exactly (zero gradient there)
    mse = torch.nn.MSELoss()
    pre = ig.nn.Preconditioner(m, "diag", damping=LAM, fisher="exact", kl_clip=None, output_metric=mse)
    m.zero_grad()
    mse(m(ids), target).backward()
    d = torch.cat([v.reshape(-1) for v in pre.precondition().values()])
    g = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    C = ig.nn.ParameterSpace(model(), mse, data=ids, targets=target).curvature("diag", "exact").to_dense()
    assert torch.allclose(d, torch.linalg.solve(C + LAM * torch.eye(len(g), dtype=F64), g), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["dense", "cg"])
def test_a_kind_that_needs_the_targets_says_how_to_give_them(kind):
    """``dense``/``cg`` with the empirical Fisher on sequence outputs: the plain loop cannot give them the targets;
    the error says how (the explicit step), and that step works."""
    m = model()
    ids, y = batch()
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)
    opt = ig.nn.NaturalGradient(m, curvature=kind, fisher="empirical", step_rule="clip", output_metric=ce)
    opt.zero_grad()
    ce(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
    with pytest.raises(ValueError, match=r"opt\.step\(closure, inputs=x, targets=y\)"):
        opt.step()

    def closure():
        opt.zero_grad()
        loss = ce(m(ids).reshape(-1, 4), y.reshape(-1))
        loss.backward()
        return loss
    before = [p.detach().clone() for p in m.parameters()]
    opt.step(closure, inputs=ids, targets=y)
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))


class _Attention(torch.nn.Module):
    """Embedding, one self-attention (its own q, k, v, o Linear layers) and a read-out: the positions mix."""

    def __init__(self, d=4):
        super().__init__()
        self.emb = torch.nn.Embedding(7, d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.head = torch.nn.Linear(d, 4)
        self.d = d

    def inner(self, ids):
        """The inputs of ``v`` and of the read-out."""
        h = self.emb(ids)
        att = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) / self.d ** 0.5, -1) @ self.v(h)
        return h, self.o(att)

    def forward(self, ids):
        return self.head(self.inner(ids)[1])


@pytest.mark.parametrize("plain", [False, True])
def test_ignored_positions_stay_in_a_where_they_reach_the_loss_through_the_layer(plain):
    """Before the attention, an ignored position's value still feeds the others: ``v``'s input factor averages
    over every position; the read-out acts on each position alone: its factor over the positions kept only."""
    torch.manual_seed(0)
    m = _Attention().double()
    ids, y = batch(T=6)
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)
    if plain:
        pre = ig.nn.Preconditioner(m, "kfac", damping=LAM, fisher="exact", kl_clip=None, output_metric=ce)
        ce(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
        pre.precondition()
        C = pre.curvature
    else:
        C = ig.nn.ParameterSpace(m, ce, data=ids, targets=y).curvature("kfac", "exact")
    blocks = {b.names[0]: b for b in C.blocks}
    with torch.no_grad():
        h, att = m.inner(ids)

    def second_moment(rows):
        rows = torch.cat([rows, torch.ones(len(rows), 1, dtype=F64)], 1)
        return rows.T @ rows / len(rows)
    kept = y != -100
    assert torch.allclose(blocks["v.weight"].A, second_moment(h.reshape(-1, 4)), rtol=1e-10, atol=1e-12)
    assert torch.allclose(blocks["head.weight"].A, second_moment(att[kept]), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["diag", "kfac"])
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
@pytest.mark.parametrize("sequence", [False, True])
def test_a_class_weighted_loss_in_the_plain_loop_equals_the_curvature_of_the_targets(kind, fisher, sequence):
    """``CrossEntropyLoss(weight=w)``: each position weighs its class's weight, which needs the targets; the
    hooks read them off the gradient (its one negative entry), so the plain loop needs none (it raised)."""
    w = torch.tensor([0.2, 1.0, 2.5, 5.0], dtype=F64)
    ce = torch.nn.CrossEntropyLoss(weight=w, ignore_index=-100)
    if sequence:
        ids, y = batch()
        inputs, make = ids, model
    else:
        g = torch.Generator().manual_seed(2)
        inputs, y = torch.randn(12, 3, dtype=F64, generator=g), torch.randint(0, 4, (12,), generator=g)
        y[3] = -100

        def make():
            torch.manual_seed(1)
            return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4)).double()
    m = make()
    exact = {"inverse": "eigen"} if kind == "kfac" else {}
    pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher=fisher, kl_clip=None, output_metric=ce, **exact)
    m.zero_grad()
    ce(m(inputs).reshape(-1, 4), y.reshape(-1)).backward()
    g = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    d = torch.cat([v.reshape(-1) for v in pre.precondition().values()])
    C = ig.nn.ParameterSpace(make(), ce, data=inputs, targets=y).curvature(kind, fisher).to_dense()
    want = torch.linalg.solve(C + LAM * torch.eye(len(g), dtype=F64), g)
    assert torch.allclose(d, want, rtol=1e-9, atol=1e-12)


def test_a_loss_that_takes_its_classes_on_axis_1_is_pointed_out():
    """Per-pixel outputs (N, C, H, W) with torch's cross-entropy (classes on axis 1) but the categorical metric's
    classes on the last axis: the softmax gradient sums to zero over axis 1, not the last, and a warning says to
    permute; the permuted outputs give none."""
    import warnings
    torch.manual_seed(0)
    seg = torch.nn.Conv2d(2, 3, 1).double()
    X = torch.randn(2, 2, 4, 5, dtype=F64)
    y = torch.randint(0, 3, (2, 4, 5))
    from infogeo.nn.output_metrics import ignored
    ignored._SAID.clear()
    pre = ig.nn.Preconditioner(seg, "diag", kl_clip=None)
    with pytest.warns(UserWarning, match=r"axis 1 .*movedim\(1, -1\)"):
        torch.nn.functional.cross_entropy(seg(X), y).backward()
        pre.precondition()
    pre.remove()
    ok = ig.nn.Preconditioner(seg, "diag", kl_clip=None, output_fn=lambda z: z.movedim(1, -1))
    seg.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        torch.nn.functional.cross_entropy(seg(X).movedim(1, -1).reshape(-1, 3), y.reshape(-1)).backward()
        ok.precondition()


@pytest.mark.parametrize("kind", ["diag", "block", "kfac", "ekfac"])
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
def test_a_loss_on_the_returned_outputs_that_output_fn_permutes(kind, fisher):
    """Per-pixel outputs (N, C, H, W), ``output_fn`` moving the classes last, the loss (ignoring a pixel) taken on
    what the model returns: the hooks read z's gradient as that permutation of the returned tensor's (it raised
    MissingTargets for the empirical Fisher).  The direction equals the one of the same loss taken on z itself."""
    y = torch.randint(0, 3, (2, 3, 4), generator=torch.Generator().manual_seed(1))
    y[1, 2, 3] = -100
    X = torch.randn(2, 2, 3, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    move = lambda z: z.movedim(1, -1)  # noqa: E731
    losses = {"returned": lambda out: torch.nn.functional.cross_entropy(out, y, ignore_index=-100),
              "z": lambda out: torch.nn.functional.cross_entropy(move(out).reshape(-1, 3), y.reshape(-1),
                                                                 ignore_index=-100)}
    d = {}
    for on, loss in losses.items():
        torch.manual_seed(0)
        seg = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 1), torch.nn.Tanh(), torch.nn.Conv2d(4, 3, 1)).double()
        pre = ig.nn.Preconditioner(seg, kind, damping=LAM, fisher=fisher, kl_clip=None, output_fn=move, seed=3)
        loss(seg(X)).backward()
        d[on] = torch.cat([v.reshape(-1) for v in pre.precondition().values()])
    assert torch.allclose(d["returned"], d["z"], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["diag", "kfac"])
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
def test_a_loss_on_the_returned_outputs_that_output_fn_slices(kind, fisher):
    """A causal language model's shift in ``output_fn`` (``z[:, :-1]``), the loss taken on the same slice of what
    the model returns: z's gradient is that slice of the returned tensor's (the empirical Fisher raised
    MissingTargets); the direction equals the one of the loss taken on z itself.  A loss that also uses the entries
    the slice leaves out is not read as a loss on z."""
    ids, y = batch()
    y = y.clamp_min(0)
    shift = lambda z: z[:, :-1]  # noqa: E731
    losses = {"returned": lambda out: torch.nn.functional.cross_entropy(out[:, :-1].reshape(-1, 4),
                                                                         y[:, 1:].reshape(-1)),
              "z": lambda out: torch.nn.functional.cross_entropy(shift(out).reshape(-1, 4), y[:, 1:].reshape(-1))}
    d = {}
    for on, loss in losses.items():
        m = model()
        pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher=fisher, kl_clip=None, output_fn=shift, seed=3)
        loss(m(ids)).backward()
        d[on] = torch.cat([v.reshape(-1) for v in pre.precondition().values()])
    assert torch.allclose(d["returned"], d["z"], rtol=1e-10, atol=1e-13)
    if fisher == "empirical":   # the whole returned tensor in the loss: refused as before, not misread
        m = model()
        pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher=fisher, kl_clip=None, output_fn=shift)
        torch.nn.functional.cross_entropy(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
        with pytest.raises(ValueError, match="output_fn"):
            pre.precondition()


@pytest.mark.parametrize("ignore_index", [0, 3])
@pytest.mark.parametrize("kind", ["diag", "kfac"])
def test_an_ignored_class_index_of_the_classes_own_range(ignore_index, kind):
    """``ignore_index`` may be a class of the outputs' range (0 is common for padding): the kept positions are
    not taken for ignored ones (0 stood in for every kept class, and ignore_index=0 then raised 'every target of
    the batch is ignored')."""
    ids, y = batch()
    y = y.clamp_min(0)
    y[0, 2:] = ignore_index
    y[1, 0] = 1 if ignore_index == 0 else 0   # kept positions of both classes stay
    ce = torch.nn.CrossEntropyLoss(ignore_index=ignore_index)
    m = model()
    pre = ig.nn.Preconditioner(m, kind, damping=LAM, fisher="exact", kl_clip=None, output_metric=ce,
                               **({"inverse": "eigen"} if kind == "kfac" else {}))
    ce(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
    got = pre.precondition() and pre.curvature.to_dense()
    want = ig.nn.ParameterSpace(model(), ce, data=ids, targets=y).curvature(kind).to_dense()
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("targets", ["soft", "soft, one negative entry a row", "one-hot float"])
def test_class_weights_on_probability_targets_are_refused_in_the_plain_loop(targets):
    """torch weighs probability targets by sum_c w_c q_c over the number of positions; the hooks read class-index
    targets off the gradient (diag was off by 0.47-0.50, silently): refused, as ParameterSpace refuses it; class-index
    targets with the same weights are taken."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4)).double()
    X = torch.randn(6, 4, dtype=F64)
    idx = torch.tensor([0, 1, 2, 3, 1, 2])
    q = {"soft": torch.softmax(2 * torch.randn(6, 4, dtype=F64), -1),
         # mostly one class: the gradient's rows have one negative entry each, as class-index targets' do
         "soft, one negative entry a row": 0.9 * torch.nn.functional.one_hot(idx, 4).to(F64) + 0.025,
         "one-hot float": torch.nn.functional.one_hot(idx, 4).to(F64)}[targets]
    ce = torch.nn.CrossEntropyLoss(weight=torch.tensor([0.5, 2.0, 1.0, 3.0], dtype=F64))
    pre = ig.nn.Preconditioner(m, "diag", damping=LAM, fisher="exact", kl_clip=None, output_metric=ce)
    ce(m(X), q).backward()
    with pytest.raises(ValueError, match="class weights on probability targets"):
        pre.precondition()
    m.zero_grad()
    ce(m(X), idx).backward()
    assert pre.precondition() is not None


@pytest.mark.parametrize("kind", ["dense", "cg"])   # built by a forward of the optimizer's own, not by the hooks
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_kinds_built_by_their_own_forward_leave_out_the_ignored_positions(kind, reduction):
    """dense and cg compute on the recorded batch without its targets; the positions the user's loss ignored are
    read off that loss's gradient as for the hooked kinds (the direction was 0.23 off, silently)."""
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction=reduction)
    ids, y = batch()
    d, g = plain_direction(model(), ids, y, kind, "exact", ce, reduction)
    C = ig.nn.ParameterSpace(model(), ce, data=ids, targets=y).curvature("dense").to_dense()
    want = torch.linalg.solve(C + LAM * torch.eye(len(g), dtype=F64), g)
    # cg: its iterations' tolerance (the ignored positions counted were 0.23 off)
    assert float((d - want).norm() / want.norm()) < (1e-9 if kind == "dense" else 3e-2)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_hand_masked_elementwise_loss_leaves_out_the_masked_rows(reduction):
    """BCEWithLogitsLoss as the metric, the loss masked by hand over padded positions (the mean over the kept
    ones, or their sum): the rows of zero gradient are left out, the mean taken over the kept positions; against
    J^T H J of the user's own loss (it kept the masked rows: 0.15 off after the best scalar fit)."""
    from torch.func import functional_call, hessian, jacrev
    F = torch.nn.functional
    torch.manual_seed(8)
    N, T, C = 6, 3, 2
    X, yb = torch.randn(N, 4, dtype=F64), torch.randint(0, 2, (N, T, C)).to(F64)
    mask = torch.ones(N, T, dtype=F64)
    mask[0, 2] = mask[3, 0] = 0
    mask[5, 1:] = 0
    norm = mask.sum() * C if reduction == "mean" else 1.0
    loss = lambda z: (F.binary_cross_entropy_with_logits(z, yb, reduction="none") * mask[..., None]).sum() / norm  # noqa: E731
    shape = lambda out: out.reshape(N, T, C)  # noqa: E731
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, T * C)).double()
    p0 = {n: p.detach() for n, p in m.named_parameters()}
    f = lambda q: shape(functional_call(m, q, (X,)))  # noqa: E731
    z = f(p0).detach()
    J = torch.cat([j.reshape(z.numel(), -1) for j in jacrev(f)(p0).values()], 1)
    ref = J.T @ hessian(lambda zz: loss(zz.reshape(z.shape)))(z.reshape(-1)) @ J
    pre = ig.nn.Preconditioner(m, "diag", damping=LAM, fisher="exact", kl_clip=None, ema_decay=0.0,
                               output_metric=torch.nn.BCEWithLogitsLoss(reduction=reduction), output_fn=shape)
    loss(shape(m(X))).backward()
    pre.precondition()
    assert torch.allclose(torch.diagonal(pre.curvature.to_dense()), torch.diagonal(ref), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("loss, warns", [
    (lambda z, y: torch.nn.functional.cross_entropy(z, y), False),
    (lambda z, y: torch.nn.functional.cross_entropy(z, y, label_smoothing=0.1), False),
    (lambda z, y: torch.nn.functional.nll_loss(torch.log_softmax(z, -1), y), False),
    (lambda z, y: torch.nn.functional.mse_loss(z, torch.nn.functional.one_hot(y, 4).to(z)), True),
    (lambda z, y: torch.nn.functional.binary_cross_entropy_with_logits(z, torch.nn.functional.one_hot(y, 4).to(z)),
     True)], ids=["ce", "smoothed ce", "nll of log_softmax", "mse", "bce"])
def test_a_loss_that_is_no_softmax_cross_entropy_under_the_categorical_metric_is_pointed_out(loss, warns):
    """The default output metric is categorical; a squared error or binary cross-entropy on the outputs trained
    silently with the curvature of another loss (0.64 and 2.06 off).  Their gradient rows do not sum to zero over
    the classes, a softmax cross-entropy's do (a log-likelihood of log-probabilities has one entry per row)."""
    import warnings
    from infogeo.nn.output_metrics import ignored
    ignored._SAID.clear()
    m = model()
    ids, y = batch()
    y = y.clamp_min(0)
    pre = ig.nn.Preconditioner(m, "diag", kl_clip=None)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loss(m(ids).reshape(-1, 4), y.reshape(-1)).backward()
        pre.precondition()
    assert any("does not sum to zero over the classes" in str(w.message) for w in said) == warns


def test_a_class_weighted_loss_on_classes_of_axis_1_is_refused_with_the_layout():
    """Class weights on (N, C, H, W) outputs left in torch's layout: the target classes cannot be read off the last
    axis (a raw IndexError came from torch, then a message about probability targets); the error names the layout."""
    torch.manual_seed(0)
    seg = torch.nn.Conv2d(2, 3, 1).double()
    X, y = torch.randn(2, 2, 4, 4, dtype=F64), torch.randint(0, 3, (2, 4, 4))
    ce = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5], dtype=F64))
    pre = ig.nn.Preconditioner(seg, "diag", kl_clip=None, output_metric=ce)
    with pytest.warns(UserWarning, match="axis 1"):
        ce(seg(X), y).backward()
        with pytest.raises(ValueError, match=r"axis 1 .*movedim\(1, -1\)"):
            pre.precondition()


def test_a_fitted_softmax_cross_entropy_is_not_taken_for_another_loss():
    """Once the model fits its labels (1 - p_y near float32's rounding unit) the cross-entropy's gradient rows no
    longer sum to zero to working precision; the optimizer trained on, the check read each step, and warned that
    the categorical metric was not the loss's (the first batch is the one read, before any fit)."""
    import warnings
    from infogeo.nn.output_metrics import ignored
    ignored._SAID.clear()
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 5)
    X, y = torch.randn(64, 6), torch.randint(0, 5, (64,))
    with torch.no_grad():   # a head that puts its labels' logits about 13 above the rest
        lin.weight.zero_(), lin.bias.zero_()
    pre = ig.nn.Preconditioner(lin, "diag", kl_clip=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for step in range(2):
            lin.zero_grad()
            z = lin(X) + (13.0 * torch.nn.functional.one_hot(y, 5) if step else 0)
            g = torch.autograd.grad(torch.nn.functional.cross_entropy(z, y), z, retain_graph=True)[0]
            if step:   # the fitted rows' sums are rounding, a fair part of the rows' size
                assert ignored.not_softmax(pre.estimate.output_metric, g)
            torch.nn.functional.cross_entropy(z, y).backward()
            pre.precondition()
    pre.remove()


def test_outputs_in_torchs_class_layout_are_pointed_out_by_the_space():
    """Per-position outputs left in torch's (N, C, T) layout with class-index targets: with T = C either layout
    fits the targets' shape, and the space took the last axis silently (its loss 1.08 against torch's 1.11): a
    warning says which axis it takes; with T != C the shape error names the layout and the permutation."""
    import warnings
    from infogeo.nn.output_metrics import likelihoods
    likelihoods._SQUARE_SAID.clear()
    torch.manual_seed(0)
    tagger = torch.nn.Conv1d(2, 3, 1).double()   # (N, C, T) logits
    y = torch.randint(0, 3, (4, 3))
    with pytest.warns(UserWarning, match=r"axis 1 .*last.*movedim\(1, -1\)"):
        ig.nn.ParameterSpace(tagger, torch.nn.CrossEntropyLoss(), data=torch.randn(4, 2, 3, dtype=F64), targets=y)
    with warnings.catch_warnings():   # classes last: no ambiguity, no warning
        warnings.simplefilter("error", UserWarning)
        ig.nn.ParameterSpace(tagger, torch.nn.CrossEntropyLoss(), data=torch.randn(4, 2, 5, dtype=F64),
                             targets=torch.randint(0, 3, (4, 5)), output_fn=lambda z: z.movedim(1, -1))
    with pytest.raises(ValueError, match=r"axis 1 .*movedim\(1, -1\)"):
        ig.nn.ParameterSpace(tagger, torch.nn.CrossEntropyLoss(), data=torch.randn(4, 2, 5, dtype=F64),
                             targets=torch.randint(0, 3, (4, 5)))


def test_the_warning_on_another_loss_does_not_call_a_given_cross_entropy_the_default():
    """The optimizer's warning said to pass the loss as output_metric although it was passed; with a square
    (N, C, T) layout it names the layout."""
    import warnings
    from infogeo.nn.output_metrics import ignored
    ignored._SAID.clear()
    torch.manual_seed(0)
    tagger = torch.nn.Conv1d(2, 3, 1).double()
    X, y = torch.randn(4, 2, 3, dtype=F64), torch.randint(0, 3, (4, 3))
    ce = torch.nn.CrossEntropyLoss()
    pre = ig.nn.Preconditioner(tagger, "diag", kl_clip=None, output_metric=ce)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ce(tagger(X), y).backward()   # torch takes the classes on axis 1
        pre.precondition()
    text = " ".join(str(w.message) for w in said if "does not sum to zero" in str(w.message))
    assert "movedim(1, -1)" in text and "default output_metric" not in text
    pre.remove()


class PaddedClassifier(torch.nn.Module):
    """Embedding, a Linear per position, one attention that ignores padded keys, a Linear per position after it, and
    a head on the first position (a [CLS] read-out): padding never reaches the loss, and after the attention only
    the first position does."""

    def __init__(self, V=7, d=4, C=3):
        super().__init__()
        self.emb, self.pre, self.post, self.head = (torch.nn.Embedding(V, d), torch.nn.Linear(d, d),
                                                    torch.nn.Linear(d, d), torch.nn.Linear(d, C))

    def forward(self, ids, pad):
        h = torch.tanh(self.pre(self.emb(ids)))
        scores = (h @ h.transpose(1, 2)).masked_fill(pad.unsqueeze(1), float("-inf"))
        h = torch.tanh(self.post(torch.softmax(scores, -1) @ h))
        return self.head(h[:, 0])


def _padded(T, lengths=(3, 5, 2), seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), T, dtype=torch.long)
    for n, L in enumerate(lengths):
        ids[n, :L] = torch.randint(1, 7, (L,), generator=g)
    pad = torch.arange(T).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    return ids, pad


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
def test_a_sequence_classifiers_factors_do_not_depend_on_its_padding(kind, fisher):
    """Outputs without positions: A is the mean over the positions that reach the loss through the layer.  The
    padding leaves it (it counted, so the same examples padded to 9 instead of 6 gave other factors), and after the
    attention only the read-out position is kept: ``post``'s A is the mean of its input at position 0, as for a
    layer applied once per example (against a reference computed here)."""
    torch.manual_seed(1)
    m = PaddedClassifier().double()
    y = torch.tensor([0, 2, 1])
    spaces = [ig.nn.ParameterSpace(m, torch.nn.CrossEntropyLoss(), data=_padded(T), targets=y) for T in (6, 9)]
    blocks = [{b.names[0]: b for b in s.curvature(kind, fisher).blocks} for s in spaces]
    assert set(blocks[0]) == set(blocks[1]) == {"emb.weight", "pre.weight", "post.weight", "head.weight"}
    for name in blocks[0]:
        for factor in ("A", "G"):
            a, b = getattr(blocks[0][name], factor), getattr(blocks[1][name], factor)
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-15), (name, factor)
    ids, pad = _padded(6)
    with torch.no_grad():
        h = torch.tanh(m.pre(m.emb(ids)))
        scores = (h @ h.transpose(1, 2)).masked_fill(pad.unsqueeze(1), float("-inf"))
        mixed = torch.softmax(scores, -1) @ h
    def bias_augmented_mean(rows):
        rows = torch.cat([rows, torch.ones(len(rows), 1, dtype=F64)], 1)
        return rows.T @ rows / len(rows)
    A = blocks[0]
    assert torch.allclose(A["post.weight"].A, bias_augmented_mean(mixed[:, 0]), rtol=1e-12, atol=0)
    assert torch.allclose(A["pre.weight"].A, bias_augmented_mean(m.emb(ids)[~pad].detach()), rtol=1e-12, atol=0)
    counts = torch.bincount(ids[~pad], minlength=7).to(F64) / int((~pad).sum())
    assert torch.allclose(A["emb.weight"].A, counts, rtol=1e-12, atol=0)


class EncoderDecoder(torch.nn.Module):
    """A Linear per encoder position, a decoder that attends to the encoder's unpadded positions, and a loss per
    decoder position (labels -100 where the decoder is padded): the encoder's positions are not the outputs'."""

    def __init__(self, V=7, d=4):
        super().__init__()
        self.src, self.tgt = torch.nn.Embedding(V, d), torch.nn.Embedding(V, d)
        self.enc, self.dec, self.head = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, V)

    def forward(self, src, src_pad, tgt):
        memory = torch.tanh(self.enc(self.src(src)))                       # (N, S, d)
        query = torch.tanh(self.dec(self.tgt(tgt)))                         # (N, T, d)
        scores = (query @ memory.transpose(1, 2)).masked_fill(src_pad.unsqueeze(1), float("-inf"))
        return self.head(torch.softmax(scores, -1) @ memory + query)


def _seq2seq(S, T, src_lengths=(3, 5, 2), tgt_lengths=(2, 4, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.zeros(3, S, dtype=torch.long), torch.zeros(3, T, dtype=torch.long)
    y = torch.full((3, T), -100)
    for n, (ls, lt) in enumerate(zip(src_lengths, tgt_lengths)):
        src[n, :ls] = torch.randint(1, 7, (ls,), generator=g)
        tgt[n, :lt] = torch.randint(1, 7, (lt,), generator=g)
        y[n, :lt] = torch.randint(0, 7, (lt,), generator=g)
    src_pad = torch.arange(S).unsqueeze(0) >= torch.tensor(src_lengths).unsqueeze(1)
    return (src, src_pad, tgt), y


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_an_encoders_factors_depend_neither_on_its_padding_nor_on_the_decoders(kind):
    """The decoder's ignored labels were laid over the encoder's positions by index where the lengths matched, and
    the encoder's padding stayed in A where they did not (T5 and Bart: 0.3-0.47 between paddings).  The encoder's
    A is the mean over its unpadded positions for every pair of lengths (a reference computed here), and every
    factor is the same at (S, T) = (6, 5), (6, 6), (9, 7)."""
    torch.manual_seed(2)
    m = EncoderDecoder().double()
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)

    def factors(S, T):
        data, y = _seq2seq(S, T)
        space = ig.nn.ParameterSpace(m, ce, data=data, targets=y)
        return {b.names[0]: b for b in space.curvature(kind, "exact").blocks}, data
    base, (src, src_pad, _) = factors(6, 5)
    for S, T in [(6, 6), (9, 7)]:
        other, _ = factors(S, T)
        for name, b in base.items():
            for f in ("A", "G"):
                assert torch.allclose(getattr(b, f), getattr(other[name], f), rtol=1e-12, atol=1e-15), (S, T, name, f)
    a = m.src(src)[~src_pad].detach()
    a = torch.cat([a, torch.ones(len(a), 1, dtype=F64)], 1)
    assert torch.allclose(base["enc.weight"].A, a.T @ a / len(a), rtol=1e-12, atol=0)


def test_left_padding_gives_a_causal_classifier_the_same_steps():
    """A Llama sequence classifier with left padding and explicit positions computes the same logits at any padding;
    the first real token's query (it attends to itself alone) has a gradient that is zero in exact arithmetic and
    came out as 0 or 1e-21 by where the padding put it, so it entered A or not (the probe that found it: A of layer
    0's q_proj 4.5e-2 apart after 3 steps).  A position counts where its gradient is
    above rounding."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(5)   # a draw where the exact-zero test tripped here (1.2e-5 between the paddings)
    N, V = 4, 60
    lengths = [5, 3, 7, 6]
    tokens = torch.randint(3, V, (N, 7))
    y = torch.randint(0, 3, (N,))
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                   num_labels=3, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    start = transformers.LlamaForSequenceClassification(cfg).double().state_dict()

    def update(T):
        ids = torch.zeros(N, T, dtype=torch.long)
        mask = torch.zeros(N, T, dtype=torch.long)
        for n, L in enumerate(lengths):
            ids[n, T - L:], mask[n, T - L:] = tokens[n, :L], 1
        pos = (mask.cumsum(1) - 1).clamp_min(0)
        model = transformers.LlamaForSequenceClassification(cfg).double()
        model.load_state_dict(start)
        opt = ig.nn.NaturalGradient(model, curvature="kfac", step_rule="graft", fisher="exact",
                                    output_fn=lambda o: o.logits, curvature_update_period=1, inverse_update_period=1)
        for _ in range(3):
            opt.zero_grad()
            model(input_ids=ids, attention_mask=mask, position_ids=pos, labels=y).loss.backward()
            opt.step()
        return torch.cat([(p.detach() - start[n]).reshape(-1) for n, p in model.named_parameters()])
    a, b = update(8), update(12)
    assert float((a - b).norm() / a.norm()) < 1e-10


@pytest.mark.parametrize("approx", ["expand", "reduce"])
@pytest.mark.parametrize("fisher", ["exact", "empirical"])
def test_an_example_whose_positions_are_all_ignored_adds_nothing(approx, fisher):
    """Appending an example whose targets are all ``ignore_index`` leaves the loss, and so the curvature, as it
    was: K-FAC-reduce counted it as a row of A (its mean input, zero, with a bias of 1: A 0.15 off)."""
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)
    ids, y = batch()
    g = torch.Generator().manual_seed(5)
    more_ids = torch.cat([ids, torch.randint(0, 7, (1, ids.shape[1]), generator=g)])
    more_y = torch.cat([y, torch.full((1, y.shape[1]), -100)])

    def K(data, targets):
        space = ig.nn.ParameterSpace(model(), ce, data=data, targets=targets)
        return space.curvature("kfac", fisher, kfac_approx=approx).to_dense()
    a, b = K(ids, y), K(more_ids, more_y)
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)
