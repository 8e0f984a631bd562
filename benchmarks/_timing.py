"""Interleaved median timings shared by the benchmark scripts."""
from __future__ import annotations

import statistics
import time
from typing import Callable, List


def median_times(*fs: Callable[[], object], repeat: int = 7, number: int = 1) -> List[float]:
    """Per function, the median over ``repeat`` rounds of its seconds per call, the functions interleaved.

    Each round runs every function ``number`` times in turn, so a slow spell of a shared
    machine falls on all of them alike; each function is called once before (a warm-up).
    """
    for f in fs:
        f()
    times: List[List[float]] = [[] for _ in fs]
    for _ in range(repeat):
        for f, ts in zip(fs, times):
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            ts.append((time.perf_counter() - t0) / number)
    return [statistics.median(ts) for ts in times]


def median_time(f: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """:func:`median_times` of one function."""
    return median_times(f, repeat=repeat, number=number)[0]
