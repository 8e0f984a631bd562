"""The transformer-block workload of ``nn_curvature.py``: a block with ``(N, T, C)`` outputs, infogeo and curvlinops."""
from __future__ import annotations

import torch

import infogeo as ig

F = torch.nn.functional


class TransformerBlock(torch.nn.Module):
    """Pre-norm transformer block from Linear layers and a per-token classifier: (N, T, D) -> (N, T, C).

    The norms have no parameters, so every trainable layer is a Linear applied at every position
    (the weight-sharing case of K-FAC expand/reduce) and curvlinops covers the same parameters.
    """

    def __init__(self, d, heads, classes):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x):
        N, T, D = x.shape
        h = F.layer_norm(x, (D,))
        q, k, v = self.qkv(h).reshape(N, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (D // self.heads) ** 0.5, -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(N, T, D))
        x = x + self.fc2(F.gelu(self.fc1(F.layer_norm(x, (D,)))))
        return self.head(F.layer_norm(x, (D,)))


class ClassesSecond(torch.nn.Module):
    """(N, T, C) outputs as (N, C, T), the layout torch's CrossEntropyLoss (and curvlinops) expects."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).transpose(1, 2)


def transformer_workload(args, device, dtype):
    """Quantities of a transformer block with (N, T, C) outputs: ``({quantity: {impl: fn}}, baseline)``."""
    N, T, D, C = args.tf_batch, args.tf_tokens, args.tf_width, 10
    model = TransformerBlock(D, 4, C).to(device=device, dtype=dtype)
    X = torch.randn(N, T, D, device=device, dtype=dtype)
    y = torch.randint(0, C, (N, T), device=device)
    params = list(model.parameters())
    print(f"model transformer block (width {D}, 4 heads, classes {C}), batch {N} x {T} tokens, (N, T, C) outputs")

    def backward():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(X).transpose(1, 2), y).backward()

    quantities = {}

    def add(quantity, impl, fn):
        quantities.setdefault(f"transformer {quantity}", {})[impl] = fn

    gen = torch.Generator(device=device).manual_seed(0)
    # the space is built once, as a training loop would (its construction probes the output shape
    # by a forward pass on the meta device); every curvature call below runs its own forward pass
    space = ig.nn.ParameterSpace(model, "categorical", data=X)
    add("diag MC", "infogeo", lambda: space.curvature("diag", "mc", generator=gen))
    for approx in ("expand", "reduce"):
        add(f"K-FAC {approx} (MC)", "infogeo",
            lambda a=approx: space.curvature("kfac", "mc", generator=gen, kfac_approx=a))
    v = {n: torch.randn_like(p) for n, p in model.named_parameters()}

    def moved_mv():
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.0)  # a new point: nothing reused
        return space.metric.mv(None, v)
    add("GGN matvec (new point)", "infogeo", moved_mv)
    if "curvlinops" not in args.skip:
        try:
            from curvlinops import GGNLinearOperator, KFACLinearOperator
            wrapped, loss_func = ClassesSecond(model), torch.nn.CrossEntropyLoss(reduction="sum")
            G = GGNLinearOperator(wrapped, loss_func, params, [(X, y)], check_deterministic=False)
            vflat = torch.cat([t.reshape(-1) for t in v.values()])
            add("GGN matvec (new point)", "curvlinops GGN", lambda: G @ vflat)

            def kfac_build(fisher, approx):
                def run():
                    K = KFACLinearOperator(wrapped, loss_func, params, [(X, y)], check_deterministic=False,
                                           fisher_type=fisher, kfac_approx=approx)
                    K.compute_kronecker_factors()
                return run
            for approx in ("expand", "reduce"):
                add(f"K-FAC {approx} (MC)", "curvlinops KFAC", kfac_build("mc", approx))
        except ImportError:
            print("  curvlinops-for-pytorch not installed: skipped")
    return quantities, backward
