"""The curvature statistics recorded by the backward passes of one optimizer step, pooled by batch size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

__all__ = ["Deferred", "StatisticsPool"]


@dataclass
class Deferred:
    """Statistics built only after the backward has finished (it delivers what they need)."""

    build: Callable[[], Any]
    cancel: Callable[[], None]


class StatisticsPool:
    """Statistics of the batches back-propagated in one step (micro-batches, siamese branches).

    Each entry is a curvature or a :class:`Deferred` one.  :meth:`take` pools them as a mean
    weighted by batch size; an error met while recording is kept and raised by :meth:`take`
    (in ``step()``, not inside the user's backward).
    """

    def __init__(self):
        self._items: List[Tuple[Any, int]] = []
        self._error: Optional[BaseException] = None

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def recorded(self) -> bool:
        """Whether a backward recorded something (statistics or an error) since the last :meth:`take`."""
        return bool(self._items) or self._error is not None

    def add(self, statistics: Any, n: int) -> None:
        """Statistics (a curvature or :class:`Deferred`) of a batch of ``n`` examples."""
        self._items.append((statistics, n))

    def fail(self, error: BaseException) -> None:
        self._error = error

    def clear(self) -> None:
        """Forget this step's entries (releasing what deferred ones hold)."""
        self._release(self._items)
        self._items, self._error = [], None

    @staticmethod
    def _release(items) -> None:
        for item, _ in items:
            if isinstance(item, Deferred):
                item.cancel()

    def settle(self) -> None:
        """Build the deferred entries now, when their backward is known to be over (a new forward began):
        memory then holds one batch's layer gradients, however many micro-batches a step has."""
        if self._error is not None or not any(isinstance(item, Deferred) for item, _ in self._items):
            return   # (called at every forward)
        items, self._items = self._items, []   # a build that runs the model's forward finds nothing to do
        try:
            self._items = [(item.build() if isinstance(item, Deferred) else item, n) for item, n in items]
        except Exception as exc:  # raised by take(), in step()
            self._release(items)
            self.fail(exc)

    def take(self, build: bool = True) -> Tuple[Optional[Any], int]:
        """The pooled statistics and their example count, then empty; ``(None, 0)`` if none were recorded or
        with ``build=False``."""
        if build:
            self.settle()
        items, error = self._items, self._error
        self._items, self._error = [], None
        if error is not None or not build:
            self._release(items)
            if error is not None:
                raise error
            return None, 0
        pooled, total = None, 0
        for new, n in items:
            # C over m + n examples = m/(m+n) C(first m) + n/(m+n) C(last n), a mean over rows by its rows
            pooled, total = (new, n) if pooled is None else (pooled.pooled(new, total, n), total + n)
        return pooled, total
