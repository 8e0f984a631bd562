r"""Parameters no layer rule can take: per-example vector-Jacobian products of the whole network.

A parameter goes here when its module is called more than once in a forward pass, never, or on
outputs without the batch axis; when it is shared by several modules (tied embeddings); or when it
is used outside its module's own forward (``F.linear(h, emb.weight)``).  Exact, and the slowest route.
"""
from __future__ import annotations

from typing import List

from ...fsdp import is_dtensor
from .base import CHUNK_ELEMENTS, Rows
from .module import per_row_vjps


def network_rows(space, names: List[str], cols, chunk_elements: int = CHUNK_ELEMENTS) -> Rows:
    """Per-row pseudo-gradients of the parameters ``names`` through the whole network (with its ``output_fn``)."""
    p = {n: space.point[n].detach() for n in names}
    sharded = [n for n, t in p.items() if is_dtensor(t)]
    if sharded:
        raise ValueError(f"parameters {sharded} go through the whole network (no layer rule covers their module, it "
                         f"is called more than once, or they are used outside it or shared), which evaluates the "
                         f"model at them, but FSDP2 holds them sharded while the statistics are recorded: leave the "
                         f"modules that own and use them in the root's fully_shard unit (do not fully_shard them on "
                         f"their own)")
    yield from per_row_vjps(lambda batch, q: space.evaluate(batch, q), p, space.batch, cols.row_block, cols.rows,
                            space.batch_size, sum(t.numel() for t in p.values()), chunk_elements)
