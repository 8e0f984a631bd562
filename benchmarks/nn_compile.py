"""A NaturalGradient training step on a model compiled with torch.compile against the same step eager.

Usage::

    python benchmarks/nn_compile.py [--backend inductor] [--steps 40] [--quick] [--device cuda]

Two copies of one model (an MLP and a transformer block), one compiled, trained side by side with
``NaturalGradient`` (K-FAC, default periods: statistics every 10 steps), the steps interleaved;
each step's CPU time (process time, one thread) is recorded and the medians compared, over the
steps that do not refresh the statistics and over all steps.  The same is done with AdamW on the same
models, as a control: what compilation itself gains or loses on a model that small.  Graph breaks (TorchDynamo's counter)
after the warm-up are printed: 0 is the goal.  PASS when the compiled step's median is no slower.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu", help="torch device (cuda: synchronised wall time per step)")
    args = ap.parse_args(argv)
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from _nn_transformer import TransformerBlock
    from infogeo.nn import NaturalGradient
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    F = torch.nn.functional
    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    clock = time.perf_counter if cuda else time.process_time

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)
    w = 64 if args.quick else 256
    mlp = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.Tanh(), torch.nn.Linear(w, w), torch.nn.Tanh(),
                              torch.nn.Linear(w, 10)).to(dev)
    Xm, ym = torch.randn(128, w, device=dev), torch.randint(0, 10, (128,), device=dev)
    tf = TransformerBlock(64, 4, 10).to(dev)
    Xt, yt = torch.randn(16, 32, 64, device=dev), torch.randint(0, 10, (16, 32), device=dev)
    workloads = {f"MLP {w}x3, batch 128": (mlp, Xm, lambda out: F.cross_entropy(out, ym)),
                 "transformer block d=64, 16x32 tokens": (tf, Xt, lambda out: F.cross_entropy(out.transpose(1, 2), yt))}
    period = 10
    makers = {"NaturalGradient kfac": lambda m: NaturalGradient(m, lr=1e-3, curvature="kfac",
                                                                curvature_update_period=period),
              "AdamW (control)": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)}
    print(f"backend {args.backend}, device {dev}, {args.steps} steps, "
          f"{'wall' if cuda else 'CPU'} time per step, one thread; AdamW on the same models is "
          f"the control (what torch.compile itself gains or loses there)")
    print(f"{'workload':>38} {'optimizer':>21} {'eager ms':>9} {'compiled ms':>11} {'ratio':>6} {'all-step ratio':>14} "
          f"{'breaks':>6}")
    ok = True
    for name, (model, X, loss_fn) in workloads.items():
        for opt_name, make in makers.items():
            torch._dynamo.reset()
            eager_model, comp_model = copy.deepcopy(model), copy.deepcopy(model)
            compiled = torch.compile(comp_model, backend=args.backend)
            opt_e, opt_c = make(eager_model), make(comp_model)
            times = {"eager": [], "compiled": []}
            for i in range(args.steps + 2):
                if i == 2:   # the first non-refresh step compiled the graph
                    counters.clear()
                for key, fwd, opt in (("eager", eager_model, opt_e), ("compiled", compiled, opt_c)):
                    sync()
                    t0 = clock()
                    opt.zero_grad()
                    loss_fn(fwd(X)).backward()
                    opt.step()
                    sync()
                    if i >= 2:
                        times[key].append((i % period == 0, clock() - t0))
            breaks = sum(counters["graph_break"].values())
            med = {k: statistics.median(t for r, t in v if not r) for k, v in times.items()}
            allmed = {k: statistics.fmean(t for _, t in v) for k, v in times.items()}
            ratio = med["compiled"] / med["eager"]
            if opt_name.startswith("NaturalGradient"):
                ok &= ratio <= 1.0 and breaks == 0
            print(f"{name:>38} {opt_name:>21} {1e3 * med['eager']:>9.2f} {1e3 * med['compiled']:>11.2f} "
                  f"{ratio:>6.2f} {allmed['compiled'] / allmed['eager']:>14.2f} {breaks:>6}")
    print("PASS" if ok else "FAIL", "(compiled median step no slower than eager, no graph break)")
    return ok


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
