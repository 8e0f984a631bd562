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


#: what each entry point draws with its seed (an array)
DRAWS = {
    "Bernoulli.sample": lambda s: np.asarray(ENTRY_POINTS["Bernoulli.sample"](s)),
    "IsingModel.gibbs_sample": lambda s: np.asarray(ENTRY_POINTS["IsingModel.gibbs_sample"](s)),
    "KMeans": lambda s: ENTRY_POINTS["KMeans"](s).fit(np.linspace(0.05, 0.95, 12)[:, None]).cluster_centers_,
    "DiscreteIGO": lambda s: np.asarray(ig.solvers.DiscreteIGO(4, seed=s, max_evals=200).minimize(
        lambda X: np.asarray(X).sum(-1)).x),
    "IGOSearch": lambda s: ENTRY_POINTS["IGOSearch"](s).ask(),
    "igo_minimize": lambda s: np.asarray(ENTRY_POINTS["igo_minimize"](s).x),
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_none_an_integer_and_a_generator_are_taken(name):
    """An integer seed draws the same twice and as a Generator seeded with it; None draws too."""
    once, again = DRAWS[name](3), DRAWS[name](3)
    np.testing.assert_array_equal(once, again)
    np.testing.assert_array_equal(DRAWS[name](np.random.default_rng(3)), once)
    assert np.asarray(DRAWS[name](None)).shape == once.shape
