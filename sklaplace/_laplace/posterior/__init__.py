"""Posterior structures behind one small interface.

Each structure holds the likelihood curvature H (GGN or empirical Fisher) of
the Laplace weights in its own format and, for a prior precision ``delta``
(a 0-d tensor, or one value per parameter) and a curvature scale ``s``
(1/T, times 1/σ² for a Gaussian likelihood), answers:

- ``log_det(delta, s)``: log det(s·H + diag(delta)), differentiable in both;
- ``with_prior(delta, s)``: a posterior at those hyperparameters (a copy sharing
  the decomposition; the curvature object itself never changes);
- ``functional_variance(J)``: J Σ Jᵀ for Jacobians J of shape (n, C, P);
- ``sample(n_samples, generator)``: draws θ − θ* from N(0, Σ), shape (S, P);
- ``marginal_variance()``: diag Σ.
"""

from .base import Posterior
from .diag import DiagPosterior
from .eigen import EigenPosterior
from .kron import KronPosterior

__all__ = ["DiagPosterior", "EigenPosterior", "KronPosterior", "Posterior"]
