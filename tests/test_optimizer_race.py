"""Smoke test of benchmarks/optimizer_race.py: the bookkeeping of the race (the goals are checked by running it)."""
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
from ._helpers import load_benchmark  # noqa: E402

def _load():
    return load_benchmark("optimizer_race")


def test_reach_and_ratio():
    race = _load()
    curve = {"step": [0, 5, 10], "cpu": [0.0, 1.0, 2.0], "wall": [0.0, 1.5, 3.0], "loss": [3.0, 2.0, 1.0]}
    assert race.reach(curve, 2.0) == {"steps": 5, "cpu": 1.0, "wall": 1.5}
    missed = race.reach(curve, 0.5)
    assert missed["steps"] == math.inf and missed["whole"] == {"steps": 10, "cpu": 2.0, "wall": 3.0}
    assert "whole" not in race.reach(curve, 0.5, diverged=True)   # a diverged run would never reach it
    ours = [{"cpu": 1.0}, {"cpu": 2.0}, {"cpu": math.inf}]
    r = race.ratio(ours, [{"cpu": 2.0}, {"cpu": 2.0}, {"cpu": 1.0}], "cpu")
    assert r["median"] == 1.0 and r["lo"] == 0.5 and r["hi"] == math.inf
    # a seed the peer did not reach: its whole run (4 s) bounds its time, so the ratio is at most 3/4, not 0
    censored = race.ratio([{"cpu": 3.0}], [race.reach({**curve, "cpu": [0.0, 2.0, 4.0]}, 0.5)], "cpu")
    assert censored["median"] == 0.75
    diverged = race.ratio([{"cpu": 3.0}], [race.reach(curve, 0.5, diverged=True)], "cpu")
    assert diverged["median"] == 0.0
    # unreached by most seeds: no median
    assert race.med([1.0, math.inf, math.inf]) == math.inf


def test_quick_race_runs_every_installed_contestant(tmp_path, capsys):
    race = _load()
    out = race.main(["--quick", "--workloads", "classifier", "masked", "--out", str(tmp_path)])
    names = out["names"]
    assert {"AdamW", "SGD", "NG eigen", "NG graft", "NG defaults", "Pre+AdamW"} <= set(names)
    for w in ("classifier", "masked"):
        res = out["results"][w]
        assert set(res["scores"]) == set(names)
        assert math.isfinite(res["tight"]) and res["loose"] >= res["tight"]
        for n in names:   # every run trained and was evaluated on the same data
            assert all(math.isfinite(r["final"]) or r["diverged"] for r in res["scores"][n]["runs"])
        assert (tmp_path / f"race_{w}.png").stat().st_size > 0
    # AdamW reaches its own final loss, so its ratio to itself is defined
    assert math.isfinite(race.med([x["cpu"] for x in out["results"]["classifier"]["scores"]["AdamW"]["tight"]]))
    assert (tmp_path / "race.json").exists()
    assert "ratios infogeo / best peer" in capsys.readouterr().out


def test_merge_pools_processes_split_by_seed_and_contestant(tmp_path):
    """Runs trained in separate processes score like one process: in seed order, a duplicated run kept once."""
    import pickle
    race = _load()
    run = lambda seed, final: {"seed": seed, "final": final}   # noqa: E731
    parts = [{"cnn": {"AdamW": {1e-3: [run(1, 0.5)]}, "SGD": {0.1: [run(1, 0.7)]}}},
             {"cnn": {"AdamW": {1e-3: [run(0, 0.4), run(1, 0.5)]}}},   # AdamW's seed 1 again
             {"cnn": {"SGD": {0.1: [run(0, 0.6)]}}}]
    paths = []
    for i, p in enumerate(parts):
        paths.append(tmp_path / f"{i}.pkl")
        paths[-1].write_bytes(pickle.dumps(p))
    pooled = race.merge(paths)["cnn"]
    assert [r["final"] for r in pooled["AdamW"][1e-3]] == [0.4, 0.5]
    assert [r["seed"] for r in pooled["SGD"][0.1]] == [0, 1]


def test_train_only_needs_save():
    with pytest.raises(SystemExit):
        _load().main(["--quick", "--workloads", "cnn", "--train-only"])


def test_the_corpus_is_the_standard_librarys_whatever_the_path_holds(tmp_path, monkeypatch):
    """The text workloads' corpus is read from the standard library's directory: a module of the same name first
    on the path (here a ``sched.py``) changes nothing, and every corpus module is there."""
    import sys
    _load()   # (imports its workloads module)
    workloads = sys.modules["_race_workloads"]
    reference = workloads.corpus.__wrapped__()
    (tmp_path / "sched.py").write_text("print('not the scheduler')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "sched", raising=False)   # as in a fresh process: imported from the path
    shadowed = workloads.corpus.__wrapped__()
    assert all(torch.equal(a, b) for a, b in zip(reference, shadowed))
    assert sum(len(t) for t in reference) > 400_000   # sixteen modules' sources, none missing
