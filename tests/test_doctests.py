"""The docstrings' examples run as written (``>>>`` lines not marked ``+SKIP``): they are documentation users
copy, and two had drifted from the code unnoticed (numpy 2's scalar repr, a longer budget message)."""
import doctest
import importlib
import pkgutil

import pytest

import infogeo


def _modules():
    for info in pkgutil.walk_packages(infogeo.__path__, "infogeo."):
        if ".nn" in info.name or info.name.endswith("__main__"):
            continue   # infogeo.nn needs torch; its examples are marked +SKIP or shown as blocks
        yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:   # an optional dependency (geomstats, pymanopt) not installed
        pytest.skip(f"{name}: {exc}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
