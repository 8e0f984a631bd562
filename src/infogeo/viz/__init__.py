"""Figures of the geometry: KL balls vs metric ellipses, geodesics, solver trajectories, gradient fields, Gaussians.

Every plotting function draws like pyplot's own: on the axes given as ``ax=``, else on the
current axes (``plt.gca()``; a function with several panels adds them to the current
figure, or to a new one if that is in use), and returns the Axes (an array of Axes for
several panels).  So ``plt.savefig(...)`` and ``plt.show()`` work after a call, and
nothing is shown by the function itself.  The numbers behind a picture are attached to
the returned axes as ``ax.infogeo_data``, so that tests and users can check what was drawn.
"""
from .fields import plot_gradient_field
from .gaussians import plot_gaussians
from .geodesics import barycentric, plot_geodesics
from .kl_ball import kl_ball, plot_kl_ball
from .trajectories import View, plot_trajectories

__all__ = ["plot_kl_ball", "kl_ball", "plot_geodesics", "barycentric", "plot_trajectories", "View",
           "plot_gradient_field", "plot_gaussians"]
