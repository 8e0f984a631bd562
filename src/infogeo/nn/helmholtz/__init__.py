"""Helmholtz machines trained by (natural) reweighted wake-sleep.

A generative sigmoid belief network ``p`` and a recognition network ``q`` (Dayan, Hinton, Neal &
Zemel 1995), the reweighted wake-sleep gradients (Hinton et al. 1995; Bornschein & Bengio 2015)
and their natural versions with the per-unit block Fisher, kept by a moving average with
Tikhonov damping and inverted by Sherman–Morrison updates (Amari 1998; Várady, Volpi, Malagò &
Ay 2022).

>>> hm = ig.nn.helmholtz.HelmholtzMachine((64, 32, 16), seed=0)                  # doctest: +SKIP
>>> rws = ig.nn.helmholtz.ReweightedWakeSleep(hm, lr=0.05, natural=True, seed=0)  # doctest: +SKIP
>>> for xb in batches: rws.step(xb)                                               # doctest: +SKIP
>>> hm.log_likelihood(x_test, samples=1000).mean()                                # doctest: +SKIP
"""
from .fisher import BlockFisher, NetFisher, block_fisher, fisher_factors
from .gradients import WakeSleepGradients, reweighted_wake_sleep, unit_gradients, write_grads
from .model import BernoulliNet, Conditional, HelmholtzMachine, RecognitionNet, SigmoidBeliefNet
from .training import ReweightedWakeSleep

__all__ = ["HelmholtzMachine", "SigmoidBeliefNet", "RecognitionNet", "BernoulliNet", "Conditional",
           "BlockFisher", "NetFisher", "block_fisher", "fisher_factors", "reweighted_wake_sleep",
           "WakeSleepGradients", "unit_gradients", "write_grads", "ReweightedWakeSleep"]
