"""Curvature of a network: infogeo against backpack, nngeometry and curvlinops, in one process.

Same model, same batch.  Every time is a median over repeats, reported as a ratio
to one training step's ``forward + loss.backward()``; peak memory (CUDA: allocator
peak; CPU: peak of the profiler's allocation trace) likewise.  The last column
compares infogeo with the best peer for the same quantity (< 1: infogeo is faster).

    python benchmarks/nn_curvature.py            # MLP 784-256-256-10 tanh, 512 inputs, 1 thread
    python benchmarks/nn_curvature.py --large    # bigger net and batch, on CUDA if available

Peers that are not installed are skipped.
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
import infogeo as ig  # noqa: E402

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


def timeit(fn, device, repeats):
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        gc.collect()
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def peak_memory(fn, device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated() - base
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    evs = sorted((e for e in prof.events() if e.cpu_memory_usage), key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in evs:  # allocation trace: + on alloc, - on free (self usage of the op)
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="MLP 3072-1024-1024-1024-100, batch 2048, CUDA if available")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.large:
        sizes, N = (3072, 1024, 1024, 1024, 100), 2048
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        sizes, N = (784, 256, 256, 10), 512
        device = torch.device("cpu")
    dtype = torch.float32
    model = make_model(sizes, device, dtype)
    X = torch.randn(N, sizes[0], device=device, dtype=dtype)
    y = torch.randint(0, sizes[-1], (N,), device=device)
    params = [p for p in model.parameters()]
    print(f"model MLP {'-'.join(map(str, sizes))} tanh, batch {N}, {device}, {dtype}, "
          f"threads {torch.get_num_threads()}, torch {torch.__version__}")

    def backward():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(X), y).backward()

    results = {}  # quantity -> {impl: (time_ratio, mem_ratio)}
    t0 = timeit(backward, device, args.repeats)
    m0 = None if args.no_memory else peak_memory(backward, device)
    print(f"baseline forward+backward: {t0 * 1e3:.2f} ms, peak {0 if m0 is None else m0 / 2**20:.1f} MiB")

    def record(quantity, impl, fn):
        try:
            t = timeit(fn, device, args.repeats)
            m = None if args.no_memory else peak_memory(fn, device)
        except Exception as exc:  # a peer API mismatch must not stop the other measurements
            print(f"  {impl:<28} {quantity}: failed ({type(exc).__name__}: {str(exc)[:80]})")
            return
        results.setdefault(quantity, {})[impl] = (t / t0, None if m is None else m / m0)

    # ------------------------------------------------------------------ infogeo
    gen = torch.Generator(device=device).manual_seed(0)
    v = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    record("diag MC (1 sample)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
           .curvature("diag", "mc", samples=1, generator=gen))
    record("diag exact", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X).curvature("diag"))
    record("K-FAC factors (MC)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
           .curvature("kfac", "mc", generator=gen))
    record("K-FAC factors (exact)", "infogeo", lambda: ig.nn.ParameterSpace(model, "categorical", data=X)
           .curvature("kfac", "exact"))
    record("GGN matvec", "infogeo", lambda: space.metric.mv(v))

    # hand-written torch.func jvp + vjp product, the reference for the implicit product
    from torch.func import functional_call, jvp, vjp
    p0 = {n: p.detach() for n, p in model.named_parameters()}

    def func_ggn():
        f = lambda q: functional_call(model, q, (X,))  # noqa: E731
        z, Jv = jvp(f, (p0,), (v,))
        prob = torch.softmax(z, -1)
        u = (prob * Jv - prob * (prob * Jv).sum(-1, keepdim=True)) / N
        return vjp(f, p0)[1](u)
    record("GGN matvec", "torch.func jvp+vjp", func_ggn)

    # ------------------------------------------------------------------ backpack
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
        record("diag MC (1 sample)", "backpack DiagGGNMC", bp(bpe.DiagGGNMC(mc_samples=1)))
        record("diag exact", "backpack DiagGGNExact", bp(bpe.DiagGGNExact()))
        record("K-FAC factors (MC)", "backpack KFAC", bp(bpe.KFAC(mc_samples=1)))
        record("K-FAC factors (exact)", "backpack KFLR", bp(bpe.KFLR()))
    except ImportError:
        print("  backpack-for-pytorch not installed: skipped")

    # ------------------------------------------------------------------ curvlinops
    try:
        from curvlinops import GGNLinearOperator, KFACLinearOperator
        loss_func = torch.nn.CrossEntropyLoss()
        G = GGNLinearOperator(model, loss_func, params, [(X, y)], check_deterministic=False)
        vflat = torch.cat([t.reshape(-1) for t in v.values()])
        record("GGN matvec", "curvlinops GGN", lambda: G @ vflat)

        def kfac_build(fisher):
            def run():
                K = KFACLinearOperator(model, loss_func, params, [(X, y)], check_deterministic=False,
                                       fisher_type=fisher)
                K.compute_kronecker_factors()
            return run
        record("K-FAC factors (MC)", "curvlinops KFAC", kfac_build("mc"))
        record("K-FAC factors (exact)", "curvlinops KFAC", kfac_build("type-2"))
    except ImportError:
        print("  curvlinops-for-pytorch not installed: skipped")

    # ------------------------------------------------------------------ nngeometry
    try:
        from nngeometry.metrics import FIM
        from nngeometry.object import PMatDiag, PMatImplicit, PMatKFAC
        from nngeometry.object.vector import PVector
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=N)
        record("diag exact", "nngeometry PMatDiag", lambda: FIM(model, loader, PMatDiag, device=str(device)))
        record("K-FAC factors (exact)", "nngeometry PMatKFAC", lambda: FIM(model, loader, PMatKFAC, device=str(device)))
        Fi = FIM(model, loader, PMatImplicit, device=str(device))
        pv = PVector.from_model(model).__class__.from_model_grad if False else None  # noqa: F841
        from nngeometry.layercollection import LayerCollection
        lc = LayerCollection.from_model(model)
        vec = PVector(lc, vector_repr=torch.cat([t.reshape(-1) for t in v.values()]))
        record("GGN matvec", "nngeometry PMatImplicit", lambda: Fi.mv(vec))
    except ImportError:
        print("  nngeometry not installed: skipped")
    except Exception as exc:
        print(f"  nngeometry failed: {type(exc).__name__}: {str(exc)[:100]}")

    # ------------------------------------------------------------------ report
    print(f"\n{'quantity':<24}{'implementation':<28}{'time/bwd':>10}{'mem/bwd':>10}")
    for q, impls in results.items():
        for impl, (tr, mr) in impls.items():
            print(f"{q:<24}{impl:<28}{tr:>10.2f}{'' if mr is None else f'{mr:>10.2f}'}")
        peers = {k: val for k, val in impls.items() if k != "infogeo"}
        if "infogeo" in impls and peers:
            best_t = min(peers.items(), key=lambda kv: kv[1][0])
            line = f"{'':<24}{'infogeo / best peer':<28}{impls['infogeo'][0] / best_t[1][0]:>10.2f}"
            mems = [val[1] for val in peers.values() if val[1]]
            if impls["infogeo"][1] is not None and mems:
                line += f"{impls['infogeo'][1] / min(mems):>10.2f}"
            print(line + f"   (best time: {best_t[0]})")
    return results


if __name__ == "__main__":
    main()
