"""Curvature of a network: infogeo against backpack, nngeometry and curvlinops, in one process.

Same model, same batch.  For each quantity every implementation, and one training
step's ``forward + loss.backward()`` as the baseline, run round-robin ``--repeats``
times (interleaved, so that load on a shared machine hits them alike); the time
column is the median over rounds of (implementation / baseline of the same round).
Peak memory is the extra memory allocated during one call, over the baseline's:
on CUDA the allocator peak (``max_memory_allocated`` above what was allocated
before), on CPU the running sum of every allocation and free the profiler records
(the raw ``[memory]`` events, so temporaries freed inside an operator count too).
Both measures are the same function for every implementation.

    python benchmarks/nn_curvature.py                 # MLP 784-256-256-10 tanh, 512 inputs, 1 thread, CPU
    python benchmarks/nn_curvature.py --large         # MLP 3072-1024-1024-1024-100, batch 2048, CUDA if available
    python benchmarks/nn_curvature.py --large --hidden 256 --batch 256   # the large net scaled down (CPU)

Every run also measures a transformer block with ``(N, T, C)`` outputs (diag MC, K-FAC expand
and reduce by Monte Carlo, the GGN product) against curvlinops (``--no-transformer`` skips it).
The exact K-FAC is not timed there: ours has one row per output position (``C T`` backward
passes), curvlinops' back-propagates each column at all positions at once (``C`` passes), which
is a different matrix where attention mixes positions.

The final block ``targets`` lists the issue's ratios (infogeo / named peer) with
PASS/FAIL.  Peers that are not installed are skipped.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import infogeo as ig  # noqa: E402
from _nn_transformer import transformer_workload  # noqa: E402

F = torch.nn.functional


def make_model(sizes, device, dtype):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers).to(device=device, dtype=dtype)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def peak_memory(fn, device):
    """Bytes allocated at the peak of one call of ``fn``, above what was allocated before it."""
    gc.collect()
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # raw allocator trace: one event per allocation (+) and free (-), in time order
    evs = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    evs.sort(key=lambda e: e.start_ns())
    cur = peak = 0
    for e in evs:
        if e.device_type() == torch.autograd.DeviceType.CPU:
            cur += e.nbytes()
            peak = max(peak, cur)
    return peak


def measure(impls, baseline, device, repeats, memory):
    """``{name: (median time ratio, memory ratio)}`` for ``impls`` against ``baseline`` (interleaved rounds)."""
    names = list(impls)
    for fn in list(impls.values()) + [baseline]:
        fn()  # warm-up (and caches a peer builds on first use)
    ratios = {n: [] for n in names}
    for r in range(repeats):
        gc.collect()
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who runs right after the baseline
        t0 = timed(baseline, device)
        for n in order:
            ratios[n].append(timed(impls[n], device) / t0)
    # the smallest of three peaks: a free deferred past the profiling window must not count
    m0 = min(peak_memory(baseline, device) for _ in range(3)) if memory else None
    out = {}
    for n in names:
        m = min(peak_memory(impls[n], device) for _ in range(3)) / m0 if memory else None
        out[n] = (statistics.median(ratios[n]), m)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true",
                    help="MLP 3072-H-H-H-100 (H=1024), batch 2048, on CUDA if available")
    ap.add_argument("--hidden", type=int, default=None, help="override the hidden width")
    ap.add_argument("--batch", type=int, default=None, help="override the batch size")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda for --large when available)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--skip", nargs="*", default=[], help="peers to skip: backpack curvlinops nngeometry")
    ap.add_argument("--only", nargs="*", default=None, help="measure only quantities containing these words")
    ap.add_argument("--no-transformer", action="store_true", help="skip the transformer-block rows")
    ap.add_argument("--tf-batch", type=int, default=16)
    ap.add_argument("--tf-tokens", type=int, default=32)
    ap.add_argument("--tf-width", type=int, default=128)
    ap.add_argument("--ekfac-widths", type=int, nargs="*", default=[1024, 2048],
                    help="widths of the EKFAC/K-FAC step-time rows (none: skip them)")
    ap.add_argument("--ekfac-steps", type=int, default=20)
    ap.add_argument("--vocab-hidden", type=int, nargs="*", default=[128],
                    help="hidden widths of the vocabulary-sized MC refresh rows (none: skip them)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.large:
        H, N, io = 1024, 2048, (3072, 100)
        sizes_of = lambda h: (io[0], h, h, h, io[1])  # noqa: E731
        default_device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        H, N, io = 256, 512, (784, 10)
        sizes_of = lambda h: (io[0], h, h, io[1])  # noqa: E731
        default_device = "cpu"
    H = args.hidden or H
    N = args.batch or N
    sizes = sizes_of(H)
    device = torch.device(args.device or default_device)
    dtype = torch.float32
    model = make_model(sizes, device, dtype)
    X = torch.randn(N, sizes[0], device=device, dtype=dtype)
    y = torch.randint(0, sizes[-1], (N,), device=device)
    params = list(model.parameters())
    print(f"model MLP {'-'.join(map(str, sizes))} tanh, batch {N}, {device}, {dtype}, "
          f"threads {torch.get_num_threads()}, torch {torch.__version__}, {args.repeats} interleaved repeats")

    def backward():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(X), y).backward()

    quantities = {}  # quantity -> {impl: fn}

    def add(quantity, impl, fn):
        quantities.setdefault(quantity, {})[impl] = fn

    # ------------------------------------------------------------------ infogeo
    gen = torch.Generator(device=device).manual_seed(0)
    v = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    add("diag MC (1 sample)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
        .curvature("diag", "mc", samples=1, generator=gen))
    add("diag exact", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X).curvature("diag"))
    add("K-FAC factors (MC)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
        .curvature("kfac", "mc", generator=gen))
    add("K-FAC factors (exact)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
        .curvature("kfac", "exact"))
    # a new point every call (the parameters change in place, as after an optimizer step): nothing reused

    def moved_mv():
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.0)  # bumps the tensors' version counters: the point is "new"
        return space.metric.mv(None, v)
    add("GGN matvec (new point)", "infogeo", moved_mv)
    # the same point every call, as in the iterations of one CG solve: the forward pass is cached
    add("GGN matvec (same point)", "infogeo", lambda: space.metric.mv(None, v))

    # hand-written torch.func jvp + vjp product, the reference for the implicit product
    from torch.func import functional_call, jvp, vjp
    p0 = {n: p.detach() for n, p in model.named_parameters()}

    def func_ggn():
        f = lambda q: functional_call(model, q, (X,))  # noqa: E731
        z, Jv = jvp(f, (p0,), (v,))
        prob = torch.softmax(z, -1)
        u = (prob * Jv - prob * (prob * Jv).sum(-1, keepdim=True)) / N
        return vjp(f, p0)[1](u)
    for q in ("GGN matvec (new point)", "GGN matvec (same point)"):
        add(q, "torch.func jvp+vjp", func_ggn)

    # ------------------------------------------------------------------ backpack
    if "backpack" not in args.skip:
        try:
            import backpack
            from backpack import extensions as bpe
            bmodel = backpack.extend(make_model(sizes, device, dtype))
            bmodel.load_state_dict(model.state_dict())
            bloss = backpack.extend(torch.nn.CrossEntropyLoss())

            def bp(ext):
                def run():
                    bmodel.zero_grad(set_to_none=True)
                    with backpack.backpack(ext):
                        bloss(bmodel(X), y).backward()
                return run
            add("diag MC (1 sample)", "backpack DiagGGNMC", bp(bpe.DiagGGNMC(mc_samples=1)))
            add("diag exact", "backpack DiagGGNExact", bp(bpe.DiagGGNExact()))
            add("K-FAC factors (MC)", "backpack KFAC", bp(bpe.KFAC(mc_samples=1)))
            add("K-FAC factors (exact)", "backpack KFLR", bp(bpe.KFLR()))
        except ImportError:
            print("  backpack-for-pytorch not installed: skipped")

    # ------------------------------------------------------------------ curvlinops
    if "curvlinops" not in args.skip:
        try:
            from curvlinops import GGNLinearOperator, KFACLinearOperator
            loss_func = torch.nn.CrossEntropyLoss()
            G = GGNLinearOperator(model, loss_func, params, [(X, y)], check_deterministic=False)
            vflat = torch.cat([t.reshape(-1) for t in v.values()])
            for q in ("GGN matvec (new point)", "GGN matvec (same point)"):
                add(q, "curvlinops GGN", lambda: G @ vflat)

            def kfac_build(fisher):
                def run():
                    K = KFACLinearOperator(model, loss_func, params, [(X, y)], check_deterministic=False,
                                           fisher_type=fisher)
                    K.compute_kronecker_factors()
                return run
            add("K-FAC factors (MC)", "curvlinops KFAC", kfac_build("mc"))
            add("K-FAC factors (exact)", "curvlinops KFAC", kfac_build("type-2"))
        except ImportError:
            print("  curvlinops-for-pytorch not installed: skipped")

    # ------------------------------------------------------------------ nngeometry
    if "nngeometry" not in args.skip:
        try:
            from nngeometry.layercollection import LayerCollection
            from nngeometry.metrics import FIM
            from nngeometry.object import PMatDiag, PMatImplicit, PMatKFAC
            from nngeometry.object.vector import PVector
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=N)
            add("diag exact", "nngeometry PMatDiag", lambda: FIM(model, loader, PMatDiag, device=str(device)))
            add("K-FAC factors (exact)", "nngeometry PMatKFAC",
                lambda: FIM(model, loader, PMatKFAC, device=str(device)))
            Fi = FIM(model, loader, PMatImplicit, device=str(device))
            vec = PVector(LayerCollection.from_model(model), vector_repr=torch.cat([t.reshape(-1) for t in v.values()]))
            for q in ("GGN matvec (new point)", "GGN matvec (same point)"):
                add(q, "nngeometry PMatImplicit", lambda: Fi.mv(vec))
        except ImportError:
            print("  nngeometry not installed: skipped")
        except Exception as exc:  # an API mismatch of a peer must not stop the others
            print(f"  nngeometry failed: {type(exc).__name__}: {str(exc)[:100]}")

    # ------------------------------------------------------------------ measure
    t0 = statistics.median(timed(backward, device) for _ in range(max(3, args.repeats)))
    m0 = None if args.no_memory else peak_memory(backward, device)
    print(f"baseline forward+backward: {t0 * 1e3:.2f} ms, peak {0 if m0 is None else m0 / 2**20:.2f} MiB")
    results = {}
    baselines = {q: backward for q in quantities}
    if not args.no_transformer:
        tf_quantities, tf_backward = transformer_workload(args, device, dtype)
        quantities.update(tf_quantities)
        baselines.update({q: tf_backward for q in tf_quantities})
    if args.only:
        quantities = {q: i for q, i in quantities.items() if any(w.lower() in q.lower() for w in args.only)}
    for q, impls in quantities.items():
        ok = {}
        for impl, fn in impls.items():  # drop a peer that fails on this workload, keep the rest
            try:
                fn()
                ok[impl] = fn
            except Exception as exc:
                print(f"  {impl:<28} {q}: failed ({type(exc).__name__}: {str(exc)[:80]})")
        results[q] = measure(ok, baselines[q], device, args.repeats, not args.no_memory)

    # ------------------------------------------------------------------ report
    print(f"\n{'quantity':<36}{'implementation':<28}{'time/bwd':>10}{'mem/bwd':>10}")
    for q, impls in results.items():
        for impl, (tr, mr) in impls.items():
            print(f"{q:<36}{impl:<28}{tr:>10.2f}{'' if mr is None else f'{mr:>10.2f}'}")
        peers = {k: val for k, val in impls.items() if k != "infogeo"}
        if "infogeo" in impls and peers:
            best_t = min(peers.items(), key=lambda kv: kv[1][0])
            line = f"{'':<36}{'infogeo / best peer':<28}{impls['infogeo'][0] / best_t[1][0]:>10.2f}"
            mems = [val[1] for val in peers.values() if val[1]]
            if impls["infogeo"][1] is not None and mems:
                line += f"{impls['infogeo'][1] / min(mems):>10.2f}"
            print(line + f"   (best time: {best_t[0]})")

    print("\ntargets (infogeo / peer, medians)")
    targets = [("diag MC (1 sample)", "backpack DiagGGNMC", 0, 0.73),
               ("diag MC (1 sample)", "backpack DiagGGNMC", 1, 0.73),
               ("diag exact", "backpack DiagGGNExact", 0, 1.0),
               ("diag exact", "backpack DiagGGNExact", 1, 1.0),
               ("K-FAC factors (MC)", "curvlinops KFAC", 0, 0.86),
               ("K-FAC factors (exact)", "curvlinops KFAC", 0, 1.0),
               ("GGN matvec (same point)", "curvlinops GGN", 0, 0.8),
               ("GGN matvec (same point)", "torch.func jvp+vjp", 0, 1.05),
               ("GGN matvec (new point)", "curvlinops GGN", 0, 0.8),
               ("GGN matvec (new point)", "torch.func jvp+vjp", 0, 1.05),
               ("transformer K-FAC expand (MC)", "curvlinops KFAC", 0, 1.0),
               ("transformer K-FAC reduce (MC)", "curvlinops KFAC", 0, 1.0),
               ("transformer GGN matvec (new point)", "curvlinops GGN", 0, 1.0)]
    for q, peer, col, bound in targets:
        r = results.get(q, {})
        what = f"{q} vs {peer} ({'time' if col == 0 else 'memory'})"
        if "infogeo" not in r or peer not in r or r[peer][col] is None or r["infogeo"][col] is None:
            print(f"  {what:<70} {'n/a':>6}   target <= {bound:.2f}   SKIPPED")
            continue
        ratio = r["infogeo"][col] / r[peer][col]
        print(f"  {what:<70} {ratio:>6.2f}   target <= {bound:.2f}   {'PASS' if ratio <= bound else 'FAIL'}")
    for width in args.ekfac_widths:
        ratio = ekfac_step_ratio(width, args.ekfac_steps)
        print(f"  {'EKFAC / K-FAC step time, MLP depth 3 width ' + str(width):<70} {ratio:>6.2f}   "
              f"target <= 1.50   {'PASS' if ratio <= 1.5 else 'FAIL'}")
    for h in args.vocab_hidden:
        ratio = vocab_refresh_ratio(h)
        print(f"  {'K-FAC MC refresh / forward+backward, (2, 128, 50257) outputs, hidden ' + str(h):<70} "
              f"{ratio:>6.2f}   target <= 3.00   {'PASS' if ratio <= 3 else 'FAIL'}")
    return results


def vocab_refresh_ratio(hidden: int = 128, rounds: int = 3, N: int = 2, T: int = 128, V: int = 50257) -> float:
    r"""Median over interleaved rounds of (K-FAC MC statistics refresh) / (plain forward + backward), CPU time.

    Embedding(V, h) -> Linear(h, h) -> tanh -> Linear(h, V), untied, cross-entropy on (N, T, V) logits.
    The output projection is wider than ``max_factor_dim``: its factors are diag(G) (V) and A ((h+1)^2),
    the Embedding's diag(A) (V) and G (h^2).  The refresh is ``space.curvature("kfac", "mc")``: one
    forward, one sampled backward and the factors.
    """
    import warnings
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(V, hidden), torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, V))
    X, y = torch.randint(0, V, (N, T)), torch.randint(0, V, (N, T))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y)

    def plain():
        F.cross_entropy(model(X).reshape(-1, V), y.reshape(-1)).backward()
        model.zero_grad()

    def refresh():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # the layout is said once
            space.curvature("kfac", "mc")
    plain(), refresh()
    times: dict = {"plain": [], "refresh": []}
    for _ in range(rounds):
        for k, f in (("plain", plain), ("refresh", refresh)):
            t0 = time.thread_time()
            f()
            times[k].append(time.thread_time() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nvocabulary-sized layers, hidden {hidden} (CPU s, median of {rounds}): forward+backward "
          f"{med['plain']:.3f}, K-FAC MC refresh {med['refresh']:.3f}")
    return statistics.median(r / p for r, p in zip(times["refresh"], times["plain"]))


def ekfac_step_ratio(width: int, steps: int = 20, rounds: int = 3, batch: int = 128) -> float:
    r"""Median over interleaved rounds of (EKFAC step) / (K-FAC step), CPU time of this thread, default periods.

    MLP 784-width-width-width-10 (ReLU), cross-entropy, a fresh batch of 128 each step, ``NaturalGradient`` with
    its defaults (K-FAC: ``step_rule="eigen-adam"``; EKFAC: the grafted step along its exact-scale direction).  The step is amortised as in a long run: after the first step the step counter is moved
    past the warm-up (where every refresh also refactorises), ``steps`` steps are timed (a statistics
    refresh every 10), and one factorisation is added at its period's share (``steps / 100``).
    K-FAC eigen (the exact damped inverse, which EKFAC's solve costs) and AdamW are printed beside.
    """
    def make(seed=0):
        torch.manual_seed(seed)
        sizes = (784, width, width, width, 10)
        layers = []
        for i in range(4):
            layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    # a fresh batch every step (the same sequence for every optimizer): one fixed batch is learned to zero loss in
    # a few steps, after which the gradients are subnormal floats and every product runs at a fraction of its speed
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(batch, 784, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps + 1)]

    def run(kind):
        model = make()
        if kind == "adamw":
            opt = torch.optim.AdamW(model.parameters())
        else:
            curvature, _, inverse = kind.partition(":")
            opt = ig.nn.NaturalGradient(model, curvature=curvature, **({"inverse": inverse} if inverse else {}))

        batches = iter(data)

        def step():
            X, y = next(batches)
            opt.zero_grad()
            F.cross_entropy(model(X), y).backward()
            opt.step()
        step()
        extra = 0.0
        if kind != "adamw":
            pre = opt.preconditioner
            pre.state["step"] = pre.estimate.inverse_update_period + 1   # past the warm-up
            t0 = time.thread_time()
            pre.estimate.factorise(pre.estimate.curvature.with_stats(pre.estimate.curvature.stats()), pre.damping)
            extra = (time.thread_time() - t0) * steps / pre.estimate.inverse_update_period
        t0 = time.thread_time()
        for _ in range(steps):
            step()
        return (time.thread_time() - t0 + extra) / steps

    kinds = ["kfac", "ekfac", "kfac:eigen", "adamw"]
    times = {k: [] for k in kinds}
    for _ in range(rounds):
        for k in kinds:
            times[k].append(run(k))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nstep time, width {width}, batch {batch} (CPU s, median of {rounds}): "
          + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
    return statistics.median(e / k for e, k in zip(times["ekfac"], times["kfac"]))


if __name__ == "__main__":
    main()
