"""Helmholtz machines: block Fisher against the dense Fisher by enumeration, Monte Carlo within its
standard errors, Sherman-Morrison against a dense inverse, wake/sleep gradients against autodiff."""
import itertools
import math

import pytest

torch = pytest.importorskip("torch")
from torch.func import functional_call, jacrev  # noqa: E402

from infogeo.nn import helmholtz as H  # noqa: E402

D = torch.float64
Bern = torch.distributions.Bernoulli


def all_states(sizes):
    """Every binary state of the layers, as a list of (2^n, n_l) tensors."""
    rows = torch.tensor(list(itertools.product([0.0, 1.0], repeat=sum(sizes))), dtype=D)
    return list(torch.split(rows, list(sizes), dim=1))


def block_indices(net):
    """Flat indices (named_parameters order) of [W_j, b_j] for every unit j of every conditional."""
    offsets, off = {}, 0
    for _, p in net.named_parameters():
        offsets[id(p)] = off
        off += p.numel()
    out = []
    for c in net.conditionals():
        for j in range(c.units):
            w = [] if c.weight is None else [offsets[id(c.weight)] + j * c.weight.shape[1] + i
                                             for i in range(c.weight.shape[1])]
            out.append((c, j, torch.tensor(w + [offsets[id(c.bias)] + j])))
    return out, off


def per_state_scores(net, state):
    """d log net(state_s) / d params, (S, P) by jacrev, named_parameters order."""
    params = {n: p.detach() for n, p in net.named_parameters()}
    J = jacrev(lambda q: functional_call(_LogProb(net), {f"net.{n}": v for n, v in q.items()}, (state,)))(params)
    return torch.cat([J[n].reshape(state[0].shape[0], -1) for n in params], dim=1)


class _LogProb(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, state):
        return self.net.log_prob(state)


def machine(sizes, seed=0):
    hm = H.HelmholtzMachine(sizes, dtype=D, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # larger, varied weights than the default initialisation: stronger dependence
        for p in hm.parameters():
            p.copy_(torch.randn(p.shape, dtype=p.dtype, generator=g))
    return hm


def check_blocks(F_dense, blocks, net):
    """Diagonal blocks of F_dense equal the block formula; everything off them is zero."""
    idx, P = block_indices(net)
    mask = torch.zeros(P, P, dtype=torch.bool)
    for c, j, ix in idx:
        k = [id(b.bias) for b in net.conditionals()].index(id(c.bias))
        torch.testing.assert_close(F_dense[ix][:, ix], blocks[k][j], rtol=1e-10, atol=1e-12)
        mask[ix[:, None], ix[None, :]] = True
    return mask


@pytest.mark.parametrize("sizes", [(3, 2, 2), (2, 2, 2, 1)])
def test_generative_block_fisher_is_the_exact_joint_fisher(sizes):
    hm = machine(sizes)
    state = all_states(sizes)
    logp = hm.p.log_prob(state).detach()
    prob = logp.exp()
    assert float(prob.sum()) == pytest.approx(1.0, abs=1e-12)
    G = per_state_scores(hm.p, state)                         # (S, P)
    F = torch.einsum("s,sp,sq->pq", prob, G, G)               # Fisher of p(x, h), dense
    mask = check_blocks(F, H.block_fisher(hm.p, state, prob), hm.p)
    assert float(F[~mask].abs().max()) < 1e-12                 # the joint Fisher is exactly block-diagonal
    # the Fisher of the marginal p(x) is not: the per-unit blocks belong to the joint distribution
    x_ids = torch.zeros(len(prob), dtype=torch.long)
    for i, v in enumerate(state[0].T):
        x_ids = 2 * x_ids + v.long()
    px = torch.zeros(2 ** sizes[0], dtype=D).index_add_(0, x_ids, prob)
    gx = torch.zeros(2 ** sizes[0], G.shape[1], dtype=D).index_add_(0, x_ids, prob[:, None] * G) / px[:, None]
    F_marginal = torch.einsum("x,xp,xq->pq", px, gx, gx)
    assert float(F_marginal[~mask].abs().max()) > 1e-3


def test_recognition_block_fisher_is_the_exact_fisher_over_the_data():
    sizes = (3, 2, 2)
    hm = machine(sizes, seed=1)
    state = all_states(sizes)
    data = torch.tensor([[1.0, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=D)   # three data vectors, weights 1/3
    on_data = torch.stack([(state[0] == x).all(1) for x in data]).any(0)
    state = [h[on_data] for h in state]
    w = hm.q.log_prob(state).detach().exp() / len(data)        # D(x) q(h | x)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-12)
    G = per_state_scores(hm.q, state)
    F = torch.einsum("s,sp,sq->pq", w, G, G)
    mask = check_blocks(F, H.block_fisher(hm.q, state, w), hm.q)
    assert float(F[~mask].abs().max()) < 1e-12


def test_monte_carlo_block_fisher_within_standard_errors():
    sizes = (3, 2, 2)
    hm = machine(sizes, seed=2)
    exact_state = all_states(sizes)
    exact = H.block_fisher(hm.p, exact_state, hm.p.log_prob(exact_state).detach().exp())
    N = 4000
    dreams = hm.p.sample(N, torch.Generator().manual_seed(0))
    estimate = H.block_fisher(hm.p, dreams)
    v = torch.randn(sum(b.shape[0] * b.shape[1] for b in exact), dtype=D, generator=torch.Generator().manual_seed(1))
    quad_terms, quad_exact, off = [], 0.0, 0
    for (h, scale), est, ex in zip(H.fisher_factors(hm.p, dreams), estimate, exact):
        per_sample = torch.einsum("su,sn,sk->sunk", scale, h, h)   # what each sample adds to the mean
        torch.testing.assert_close(per_sample.mean(0), est)
        se = per_sample.std(0) / math.sqrt(N)
        # every entry within 4.5 standard errors (about 3 after a Bonferroni correction over the entries)
        assert bool(((est - ex).abs() <= 4.5 * se + 1e-12).all())
        vb = v[off:off + ex.shape[0] * ex.shape[1]].reshape(ex.shape[:2])
        off += vb.numel()
        quad_terms.append(torch.einsum("un,sunk,uk->s", vb, per_sample, vb))
        quad_exact += float(torch.einsum("un,unk,uk->", vb, ex, vb))
    q = sum(quad_terms)                                        # v^T F v per sample, whole block-diagonal F
    assert abs(float(q.mean()) - quad_exact) <= 3 * float(q.std()) / math.sqrt(N)


def ema_reference(batches, decay, damping, size):
    G = damping * torch.eye(size, dtype=D)
    for h, scale in batches:
        G = (1 - decay) * G + decay * torch.einsum("su,sn,sk->unk", scale, h, h) / h.shape[0]
    return G


@pytest.mark.parametrize("refresh_every", [0, 7])
def test_sherman_morrison_inverse_equals_dense_inverse(refresh_every):
    units, n, decay, damping = 3, 5, 0.05, 0.1
    gen = torch.Generator().manual_seed(0)
    block = H.BlockFisher(units, n, decay=decay, damping=damping, refresh_every=refresh_every, dtype=D)
    batches = []
    for t in range(150):
        h = torch.cat([torch.bernoulli(torch.full((4, n - 1), 0.4, dtype=D), generator=gen),
                       torch.ones(4, 1, dtype=D)], 1)
        scale = 0.25 * torch.rand(4, units, dtype=D, generator=gen)
        block.update(h, scale)
        batches.append((h, scale))
    ema = ema_reference(batches, decay, damping, n) - damping * (1 - decay) ** len(batches) * torch.eye(n, dtype=D)
    torch.testing.assert_close(block.matrix, ema + block.current_damping * torch.eye(n, dtype=D),
                               rtol=0, atol=1e-12)
    dense_inverse = torch.linalg.inv(block.matrix)
    err = (block.inverse - dense_inverse).abs().max() / dense_inverse.abs().max()
    assert float(err) < 1e-10
    if refresh_every:
        assert damping * (1 - decay) ** refresh_every <= block.current_damping <= damping
    else:
        assert block.current_damping == pytest.approx(damping * (1 - decay) ** 150, rel=1e-12)
    g = torch.randn(units, n, dtype=D, generator=gen)
    torch.testing.assert_close(block.solve(g), torch.linalg.solve(block.matrix, g[..., None])[..., 0])


def bernoulli_log_prob(state, order):
    """log-probability written out with torch.distributions: ``order`` = [(linear or prior, source, target)]."""
    total = 0
    for f, src, tgt in order:
        logits = f.expand_as(state[tgt]) if src is None else f(state[src])
        total = total + Bern(logits=logits).log_prob(state[tgt]).sum(-1)
    return total


def test_wake_and_sleep_gradients_match_autodiff_of_their_objectives():
    sizes, K = (6, 4, 3), 7
    hm = machine(sizes, seed=3)
    gen = torch.Generator().manual_seed(5)
    x = torch.bernoulli(torch.full((5, 6), 0.5, dtype=D), generator=gen)
    g = H.reweighted_wake_sleep(hm, x, samples=K, sleep_samples=9, generator=gen)
    p_order = [(hm.p.prior, None, 2), (hm.p.layers[1], 2, 1), (hm.p.layers[0], 1, 0)]
    q_order = [(hm.q.layers[0], 0, 1), (hm.q.layers[1], 1, 2)]
    B = x.shape[0]
    log_p = bernoulli_log_prob(g.wake, p_order).reshape(K, B)
    log_q = bernoulli_log_prob(g.wake, q_order).reshape(K, B)
    # wake, p: the importance-weighted bound mean_b log (1/K) sum_k p(x_b, h_kb) / q(h_kb | x_b), h fixed
    bound = torch.logsumexp(log_p - log_q.detach(), 0) - math.log(K)
    assert float(bound.mean().detach()) == pytest.approx(g.bound, rel=1e-12)
    omega = torch.softmax((log_p - log_q).detach(), 0)
    objectives = {
        "p": (bound.mean(), hm.p),
        "q_wake": ((omega * log_q).sum(0).mean(), hm.q),                       # weights held fixed
        "q_sleep": (bernoulli_log_prob(g.dreams, q_order).mean(), hm.q),  # dreams from p
    }
    for name, (objective, net) in objectives.items():
        params = [p for p in net.parameters()]
        auto = dict(zip([id(p) for p in params], torch.autograd.grad(objective, params, retain_graph=True)))
        for c, blk in zip(net.conditionals(), getattr(g, name)):
            if c.weight is not None:
                torch.testing.assert_close(blk[:, :-1], auto[id(c.weight)], rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(blk[:, -1], auto[id(c.bias)], rtol=1e-10, atol=1e-12)


def test_natural_step_solves_with_the_updated_blocks_and_steps_by_sgd():
    hm = machine((6, 4, 3), seed=4)
    x = torch.bernoulli(torch.full((8, 6), 0.5, dtype=D), generator=torch.Generator().manual_seed(0))
    lr = 0.1
    rws = H.ReweightedWakeSleep(hm, lr=lr, natural=True, samples=3, seed=0)
    before = {n: p.detach().clone() for n, p in hm.named_parameters()}
    # the same draws as the step below make: replay the seed
    ref = H.ReweightedWakeSleep(machine((6, 4, 3), seed=4), lr=lr, natural=True, samples=3, seed=0)
    p_dir, q_dir, _ = ref.directions(x)
    raw = H.reweighted_wake_sleep(ref.machine, x, 3, None, torch.Generator().manual_seed(0))
    for blk, g, d in zip(ref.fisher_p.blocks, raw.p, p_dir):
        torch.testing.assert_close(d, torch.linalg.solve(blk.matrix, g[..., None])[..., 0])
    rws.step(x)
    for c, d in zip(hm.p.conditionals(), p_dir):
        name = [n for n, p in hm.named_parameters() if p is c.bias][0]
        torch.testing.assert_close(c.bias.detach() - before[name], lr * d[:, -1])


def test_importance_sampled_log_likelihood_approaches_the_exact_one():
    sizes = (3, 2, 2)
    hm = machine(sizes, seed=6)
    state = all_states(sizes)
    prob = hm.p.log_prob(state).detach().exp()
    x = torch.tensor([[1.0, 0, 1], [0, 0, 0]], dtype=D)
    exact = torch.stack([prob[(state[0] == r).all(1)].sum().log() for r in x])
    est = hm.log_likelihood(x, samples=20000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(est, exact, rtol=0, atol=0.03)
    few = hm.log_likelihood(x, samples=1, generator=torch.Generator().manual_seed(0), chunk=1)
    assert few.shape == (2,) and bool(torch.isfinite(few).all())


def test_bad_input_is_refused_and_data_left_alone():
    with pytest.raises(ValueError, match="sizes"):
        H.HelmholtzMachine((5,))
    with pytest.raises(ValueError, match="sizes"):
        H.HelmholtzMachine((5, 0))
    hm = H.HelmholtzMachine((4, 3), dtype=D, seed=0)
    x = torch.tensor([[0.0, 1, 0.5, 1]], dtype=D)
    with pytest.raises(ValueError, match="binary"):
        hm.log_likelihood(x)
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        hm.log_likelihood(torch.zeros(2, 3, dtype=D))
    with pytest.raises(TypeError, match="torch.Tensor"):
        hm.log_likelihood([[0, 1, 0, 1]])
    with pytest.raises(ValueError, match="samples"):
        hm.log_likelihood(torch.zeros(1, 4, dtype=D), samples=0)
    with pytest.raises(TypeError, match="HelmholtzMachine"):
        H.ReweightedWakeSleep(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="q_updates"):
        H.ReweightedWakeSleep(hm, q_updates="dream")
    with pytest.raises(ValueError, match="decay"):
        H.BlockFisher(2, 3, decay=1.0)
    with pytest.raises(ValueError, match="damping"):
        H.BlockFisher(2, 3, damping=0.0)
    with pytest.raises(ValueError, match="scale"):
        H.BlockFisher(2, 3).update(torch.ones(4, 3), torch.ones(4, 5))
    x = torch.tensor([[0.0, 1, 1, 1]], dtype=D)
    copy = x.clone()
    H.ReweightedWakeSleep(hm, natural=True, seed=0).step(x)
    assert torch.equal(x, copy)


def test_a_diverged_machine_raises_and_steps_nothing():
    hm = H.HelmholtzMachine((4, 3), dtype=D, seed=0)
    with torch.no_grad():
        hm.p.layers[0].weight[0, 0] = float("nan")
    before = [p.detach().clone() for p in hm.parameters()]
    with pytest.raises(FloatingPointError, match="diverged"):
        H.ReweightedWakeSleep(hm, natural=True, seed=0).step(torch.ones(2, 4, dtype=D))
    for p, b in zip(hm.parameters(), before):
        torch.testing.assert_close(p.detach(), b, equal_nan=True, rtol=0, atol=0)


def test_the_seed_leaves_torchs_generator_alone():
    """``seed=`` gives the initialisation torch.manual_seed(seed) would, without reseeding the caller's stream."""
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    a = H.HelmholtzMachine((4, 3), seed=0)
    assert torch.equal(torch.rand(3), want)
    torch.manual_seed(0)
    b = H.HelmholtzMachine((4, 3))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("natural", [False, True])
def test_a_frozen_parameter_is_left_alone(natural):
    """``requires_grad_(False)`` freezes a parameter as for any torch model: the steps moved it (by 2.9 under the
    natural step at lr 0.5)."""
    hm = H.HelmholtzMachine((4, 3), seed=0)
    hm.p.prior.requires_grad_(False)
    hm.q.layers[0].weight.requires_grad_(False)
    frozen = (hm.p.prior.detach().clone(), hm.q.layers[0].weight.detach().clone())
    others = {n: p.detach().clone() for n, p in hm.named_parameters() if p.requires_grad}
    x = torch.bernoulli(torch.full((5, 4), 0.5), generator=torch.Generator().manual_seed(0))
    H.ReweightedWakeSleep(hm, lr=0.5, natural=natural, seed=0).step(x)
    assert torch.equal(hm.p.prior, frozen[0]) and torch.equal(hm.q.layers[0].weight, frozen[1])
    assert any(not torch.equal(p, others[n]) for n, p in hm.named_parameters() if p.requires_grad)


def test_counts_are_checked_at_construction_and_numpy_integers_taken():
    """``samples=0`` failed only at the first step, an lr of NaN trained to NaN, numpy integers were refused."""
    np = pytest.importorskip("numpy")
    hm = H.HelmholtzMachine(tuple(np.array([4, 3])), seed=0)
    assert hm.sizes == (4, 3) and hm.p.sample(np.int64(3))[0].shape == (3, 4)
    for bad in ({"samples": 0}, {"sleep_samples": 0}, {"lr": float("nan")}, {"lr": -1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            H.ReweightedWakeSleep(hm, **bad)
