"""Figures of the geometry: KL balls vs metric ellipses, geodesics, solver trajectories, gradient fields.

Every function builds a :class:`matplotlib.figure.Figure` without pyplot (no
display, no global state) and returns it; nothing is shown.  Numbers behind a
figure are attached to it as ``fig.infogeo_curves`` (or ``fig.infogeo_data``)
so that tests and users can check what was drawn.
"""
from .fields import plot_gradient_field
from .geodesics import barycentric, plot_geodesics
from .kl_ball import kl_ball, plot_kl_ball
from .trajectories import View, plot_trajectories

__all__ = ["plot_kl_ball", "kl_ball", "plot_geodesics", "barycentric", "plot_trajectories", "View",
           "plot_gradient_field"]
