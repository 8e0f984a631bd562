"""Every public argument that seeds a numpy generator refuses what numpy would misread (a bool taken as seed
1) or would refuse without naming the argument (a float, a negative integer), and takes None, an integer
and a Generator."""
import numpy as np
import pytest

import infogeo as ig

BAD = [(True, TypeError, "got bool"), (-1, ValueError, ">= 0"), (1.5, TypeError, "got float")]


def _sphere(x):
    return (np.asarray(x) ** 2).sum(-1)


ENTRY_POINTS = {
    "Bernoulli.sample": lambda s: ig.statistical.Bernoulli().sample(np.array([0.3]), 4, s),
    "IsingModel.gibbs_sample": lambda s: ig.statistical.IsingModel(3).gibbs_sample(np.zeros(3), 4, s, chains=2,
                                                                                 burn_in=2),
    "KMeans": lambda s: ig.stats.KMeans(ig.statistical.Bernoulli(), 2, seed=s),
    "DiscreteIGO": lambda s: ig.solvers.DiscreteIGO(4, seed=s),
    "IGOSearch": lambda s: ig.solvers.IGOSearch(np.zeros(2), 1.0, seed=s),
    "igo_minimize": lambda s: ig.solvers.igo_minimize(_sphere, np.zeros(2), 1.0, seed=s, max_evals=20),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("bad,error,match", BAD)
def test_a_seed_numpy_would_misread_is_refused_by_name(name, bad, error, match):
    with pytest.raises(error, match=f"seed.*{match}|rng.*{match}"):
        ENTRY_POINTS[name](bad)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_none_an_integer_and_a_generator_are_taken(name):
    for seed in (None, 3, np.random.default_rng(3)):
        ENTRY_POINTS[name](seed)
