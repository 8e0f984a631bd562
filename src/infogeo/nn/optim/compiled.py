r"""The optimizer's hooks under ``torch.compile``: traced without a graph break between refreshes, eager at a refresh.

On a step that does not refresh the curvature statistics the hooks of :mod:`.hooks` do nothing
that would break a compiled graph: each asks :func:`compiling` and skips what torch.compile
cannot trace (Python containers filled from tensor hooks), so the model's forward stays one
graph.  The recording of a refresh (autograd edges, a :class:`~torch.overrides.TorchFunctionMode`,
hooks on autograd nodes) cannot be traced at all; compiled, it would break the graph inside the
model's forward, and TorchDynamo then gives up on that code for good (a break inside a loop,
such as ``nn.Sequential.forward``, skips the frame in every later call, refresh or not) or runs
out of recompilations.  So while a refresh is armed, :class:`EagerWhileArmed` holds the compiler
in its ``"force_eager"`` stance (``torch.compiler.set_stance``): that forward and backward run
eagerly, the statistics are exactly those of an uncompiled model, and the compiled code of the
other steps is left untouched.  The stance is process-wide, so other compiled functions called
in that window (one step in ``curvature_update_period``) run eagerly too.  The stance is taken
only once TorchDynamo is loaded (by ``torch.compile``): compile the model before building the
optimizer, or the first refresh is traced.
"""
from __future__ import annotations

import logging
import sys
import threading

import torch

logger = logging.getLogger(__name__)

__all__ = ["compiling", "EagerWhileArmed"]


def compiling() -> bool:
    """Whether torch.compile is tracing the caller (constant there, so the branch it guards is folded away)."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def _force_eager():
    """Put the compiler in its ``"force_eager"`` stance; returns what restores the stance before (its context
    manager), or ``None`` where nothing was compiled yet (TorchDynamo not loaded: loading it takes seconds),
    torch has no stances (before 2.6), or it refuses (inside a compiled region)."""
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None or "torch._dynamo" not in sys.modules:
        return None
    try:
        return set_stance("force_eager")   # set now; its __exit__ restores the stance it replaced
    except RuntimeError as exc:
        logger.debug("torch.compiler.set_stance('force_eager') refused: %s", exc)
        return None


class EagerWhileArmed:
    """One hold of the ``"force_eager"`` stance per armed recorder; the stance before returns when the last
    hold is released (several optimizers may be armed at once)."""

    _lock = threading.Lock()
    _holders = 0
    _restore = None

    def __init__(self):
        self.held = False

    def set(self, armed: bool) -> None:
        """Take the hold when ``armed``, release it otherwise (idempotent)."""
        if bool(armed) == self.held:
            return
        cls = EagerWhileArmed
        with cls._lock:
            if armed:
                if cls._holders == 0:
                    cls._restore = _force_eager()
                    if cls._restore is None:
                        return
                cls._holders += 1
                self.held = True
            else:
                cls._holders -= 1
                self.held = False
                if cls._holders == 0:
                    restore, cls._restore = cls._restore, None
                    try:
                        if restore is not None:
                            restore.__exit__(None, None, None)
                    except RuntimeError as exc:   # inside a compiled region: the stance stays
                        logger.debug("the compiler's stance could not be restored: %s", exc)
