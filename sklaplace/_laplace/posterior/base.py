"""What every posterior structure shares: a prior is applied to a copy, never in place."""

import copy


class Posterior:
    """Base of the posterior structures (see the package docstring)."""

    def with_prior(self, delta, s):
        """A posterior at prior precision ``delta`` and curvature scale ``s``.

        A shallow copy: it shares the curvature and its decomposition with ``self``
        (no new memory beyond the per-prior state), and ``self`` is left as it was, so
        the one fitted curvature serves the evidence, tuning and prediction at once.
        """
        new = copy.copy(self)
        new._apply_prior(delta, s)
        return new

    def scalar_spectrum(self):
        """(κ, P) with log det(s·H + δI) = Σ log(s·κ_j + δ) + (P − len κ)·log δ at a scalar
        δ, or None where the structure's determinant has no such form."""
        return None
