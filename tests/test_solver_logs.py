"""What a solver writes while it runs: a progress bar only on a terminal (or when asked), a table every k iterations."""
import io
import logging
import re
import sys

import numpy as np
import pytest

import infogeo as ig
from infogeo import backend as B
from infogeo.solvers.base import log_every, show_progress


def _cost(x):
    return B.sum(x ** 2)


def _run(**kw):
    # grad_tol=0 and a tiny step: the run always goes to max_iter
    solver = ig.solvers.GradientDescent(step_size=1e-4, grad_tol=0.0, **kw)
    return solver.minimize(ig.Euclidean(2), _cost, np.array([1.0, -2.0]))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_progress_bar_on_a_stderr_that_is_not_a_terminal(capsys):
    assert not sys.stderr.isatty()  # pytest captures it
    _run(max_iter=300)
    assert capsys.readouterr().err == ""
    _run(max_iter=300, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_true_forces_the_bar(capsys):
    _run(max_iter=50, progress=True)
    assert "GradientDescent" in capsys.readouterr().err  # the bar (it clears itself at the end: leave=False)


def test_the_bar_is_shown_on_a_terminal(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert show_progress(None)
    _run(max_iter=40)
    assert "GradientDescent" in terminal.getvalue()
    assert not show_progress(False)


def _logged_iterations(caplog):
    rows = [r.getMessage() for r in caplog.records if r.name == "infogeo.solvers"]
    return [int(m.group(1)) for m in (re.match(r"^\s*(\d+)\s+[+-]\d", row) for row in rows) if m]


@pytest.mark.parametrize("every, max_iter, expected", [
    (7, 30, [0, 7, 14, 21, 28, 30]),        # every 7th, and the last one
    (5, 20, [0, 5, 10, 15, 20]),            # the last one is a multiple: logged once
    (1, 3, [0, 1, 2, 3]),
])
def test_verbose_k_logs_every_kth_iteration(caplog, every, max_iter, expected):
    with caplog.at_level(logging.INFO, logger="infogeo"):
        res = _run(max_iter=max_iter, verbose=every)
    assert res.nit == max_iter
    assert _logged_iterations(caplog) == expected
    assert "after %d iterations" % max_iter in caplog.text


def test_verbose_true_logs_about_twenty_rows(caplog):
    with caplog.at_level(logging.INFO, logger="infogeo"):
        _run(max_iter=400, verbose=True)
    its = _logged_iterations(caplog)
    assert its[:3] == [0, 20, 40] and its[-1] == 400 and len(its) == 21
    assert log_every(False, 400) == 0 and log_every(True, 10) == 1


def test_verbose_false_logs_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="infogeo"):
        _run(max_iter=30)
    assert not [r for r in caplog.records if r.name == "infogeo.solvers"]


def test_bad_verbose_is_refused():
    with pytest.raises(ValueError, match="verbose"):
        ig.solvers.GradientDescent(step_size=0.1, verbose=-2)
    with pytest.raises(ValueError, match="verbose"):
        ig.solvers.GradientDescent(step_size=0.1, verbose=2.5)
