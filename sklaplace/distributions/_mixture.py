"""The predictives of ``model_averaging=True``: weighted mixtures of the candidates'.

:class:`NormalMixturePrediction` (the regressor's): per row (and output) the mixture
Σ_k w_k N(μ_k, σ_k²) of the candidates' Gaussian predictives; its ``mean``, ``var`` and
``std`` are the mixture's (law of total variance), ``logpdf`` / ``pdf`` / ``cdf`` its
density and distribution function, ``ppf`` and ``interval`` its quantiles (by bisection
on the cdf), ``sample`` its draws. :class:`CategoricalMixturePrediction` (the
classifier's): Σ_k w_k p_k of the candidates' :class:`LogitGaussianPrediction`.
"""

from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.special import entr, logsumexp
from sklearn.utils import check_random_state

from .._checks import _check_confidence, _check_n_samples
from ._scipy_like import _broadcast_checked, _RowsMixin

#: Bisection steps of :meth:`NormalMixturePrediction.ppf`: the bracket's width / 2**100.
_BISECTIONS = 100


def _check_weights(weights, k):
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (k,) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
        raise ValueError(f"weights must be {k} non-negative values summing to 1, got {weights}.")
    return weights


@dataclass(frozen=True, eq=False)
class NormalMixturePrediction(_RowsMixin):
    """Mixture of Gaussian predictives, the regressor's with ``model_averaging=True``.

    Per row (and output) the density Σ_k w_k N(y; μ_k, σ_k²), σ_k² = epistemic_k +
    aleatoric_k, of the candidate architectures' predictives with the stacking weights.
    ``mean``, ``std`` and ``var`` are arrays (as in :class:`NormalPrediction`): the
    mixture's mean Σ w_k μ_k and total variance Σ w_k (σ_k² + (μ_k − mean)²);
    ``epistemic_var`` holds the candidates' disagreement with their epistemic variance,
    ``aleatoric_var`` the weighted noise. ``dist[rows]`` selects rows.

    Parameters
    ----------
    component_mean : ndarray of shape (n_samples, K) or (n_samples, n_outputs, K)
        Each candidate's predictive mean (the last axis the candidates).
    component_epistemic_var : ndarray of the same shape
        Each candidate's epistemic variance.
    component_aleatoric_var : ndarray of the same shape
        Each candidate's noise variance σ².
    weights : ndarray of shape (K,)
        Mixture weights, non-negative, summing to 1.
    """

    component_mean: np.ndarray
    component_epistemic_var: np.ndarray
    component_aleatoric_var: np.ndarray
    weights: np.ndarray

    _ROW_FIELDS = ("component_mean", "component_epistemic_var", "component_aleatoric_var")

    def __post_init__(self):
        mean = np.asarray(self.component_mean, dtype=np.float64)
        object.__setattr__(self, "weights", _check_weights(self.weights, mean.shape[-1]))
        for name in self._ROW_FIELDS:
            value = np.broadcast_to(np.asarray(getattr(self, name), dtype=np.float64),
                                    mean.shape)
            if name != "component_mean" and not (np.all(np.isfinite(value))
                                                 and np.all(value >= 0)):
                raise ValueError(f"{name} must be finite and non-negative.")
            object.__setattr__(self, name, value)

    @property
    def mean(self):
        """Mixture mean Σ w_k μ_k."""
        return self.component_mean @ self.weights

    @property
    def aleatoric_var(self):
        """Weighted noise variance Σ w_k σ²_noise,k."""
        return self.component_aleatoric_var @ self.weights

    @property
    def epistemic_var(self):
        """Σ w_k (epistemic_k + (μ_k − mean)²): within and between the candidates."""
        spread = (self.component_mean - self.mean[..., None]) ** 2
        return (self.component_epistemic_var + spread) @ self.weights

    @property
    def var(self):
        """Total variance of the mixture (law of total variance)."""
        return self.epistemic_var + self.aleatoric_var

    @property
    def std(self):
        """Total standard deviation of the mixture."""
        return np.sqrt(self.var)

    def _scale(self):
        return np.sqrt(self.component_epistemic_var + self.component_aleatoric_var)

    def _y(self, y, name="y"):
        shape = self.component_mean.shape[:-1]
        return np.broadcast_to(_broadcast_checked(y, shape, name), shape)[..., None]

    def logpdf(self, y):
        """Log density of the mixture at ``y`` (broadcast against ``mean``).

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        logpdf : ndarray
            The mixture's log density log Σ_k w_k N(y; μ_k, σ_k²) of each value.
        """
        with np.errstate(divide="ignore"):
            log_w = np.log(self.weights)
        parts = stats.norm.logpdf(self._y(y), loc=self.component_mean, scale=self._scale())
        return logsumexp(parts + log_w, axis=-1)

    def pdf(self, y):
        """Density of the mixture at ``y``.

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        pdf : ndarray
            Σ_k w_k N(y; μ_k, σ_k²) of each value.
        """
        return np.exp(self.logpdf(y))

    def cdf(self, y):
        """Distribution function of the mixture at ``y``.

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        cdf : ndarray
            Σ_k w_k Φ((y − μ_k) / σ_k) of each value.
        """
        parts = stats.norm.cdf(self._y(y), loc=self.component_mean, scale=self._scale())
        return parts @ self.weights

    def ppf(self, q):
        """Compute the mixture's quantiles (bisection on :meth:`cdf`).

        Parameters
        ----------
        q : float or array-like
            Probabilities in (0, 1), broadcastable to the shape of ``mean``.

        Returns
        -------
        ppf : ndarray
            The values y with ``cdf(y) = q``.
        """
        q = self._y(q, "q")[..., 0]
        if np.any((q <= 0) | (q >= 1)):
            raise ValueError("q must lie in (0, 1).")
        # the mixture's quantile lies between the candidates' smallest and largest
        each = self.component_mean + stats.norm.ppf(q)[..., None] * self._scale()
        low, high = each.min(axis=-1), each.max(axis=-1)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (low + high)
            below = self.cdf(mid) < q
            low, high = np.where(below, mid, low), np.where(below, high, mid)
        return 0.5 * (low + high)

    def interval(self, confidence=0.95):
        """Central interval of the mixture: its quantiles at (1 ∓ confidence) / 2.

        Parameters
        ----------
        confidence : float, default=0.95
            Probability mass inside the interval, in (0, 1).

        Returns
        -------
        lower, upper : ndarray of the same shape as ``mean``
            Bounds of the interval.
        """
        confidence = _check_confidence(confidence)
        return self.ppf(0.5 - confidence / 2.0), self.ppf(0.5 + confidence / 2.0)

    def sample(self, n_samples=1, random_state=None):
        """Draw targets from the mixture: a candidate by its weight, then its Gaussian.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows) or (n_samples, n_rows, n_outputs)
            Draws of the target, noise included.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        shape = (n_samples, *self.component_mean.shape[:-1])
        k = rng.choice(len(self.weights), size=shape, p=self.weights)[..., None]
        full = (*shape, len(self.weights))
        loc = np.take_along_axis(np.broadcast_to(self.component_mean, full), k, -1)[..., 0]
        scale = np.take_along_axis(np.broadcast_to(self._scale(), full), k, -1)[..., 0]
        return loc + scale * rng.standard_normal(shape)


@dataclass(frozen=True, eq=False)
class CategoricalMixturePrediction:
    """Mixture of class predictives, the classifier's with ``model_averaging=True``.

    ``proba() = Σ_k w_k p_k`` of the candidate architectures' predictives.
    ``dist[rows]`` selects rows of every candidate; ``len(dist)`` is the number of rows.

    Parameters
    ----------
    components : tuple of LogitGaussianPrediction
        The candidates' predictives over the same rows.
    weights : ndarray of shape (K,)
        Mixture weights, non-negative, summing to 1.
    """

    components: tuple
    weights: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "components", tuple(self.components))
        object.__setattr__(self, "weights", _check_weights(self.weights, len(self.components)))

    def __len__(self):
        return len(self.components[0])

    def __getitem__(self, key):
        """Rows ``key`` of every candidate (an integer keeps the row axis)."""
        return CategoricalMixturePrediction(tuple(c[key] for c in self.components),
                                            self.weights)

    def proba(self):
        """Mixture class probabilities Σ_k w_k p_k; rows sum to one.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Predictive probability of each class.
        """
        return sum(w * c.proba() for w, c in zip(self.weights, self.components))

    def entropy(self):
        """Entropy in nats of :meth:`proba`; shape (n,).

        Returns
        -------
        entropy : ndarray of shape (n_samples,)
            Entropy of the mixture's class probabilities.
        """
        return entr(self.proba()).sum(axis=-1)

    def mutual_information(self):
        """Epistemic uncertainty of the mixture; shape (n,).

        Its entropy less the weighted expected entropy of the candidates (their own
        mutual information counted within).

        Returns
        -------
        mutual_information : ndarray of shape (n_samples,)
            Mutual information in nats between the label and the model (candidate and
            weights).
        """
        expected = sum(w * (c.entropy() - c.mutual_information())
                       for w, c in zip(self.weights, self.components))
        return np.maximum(self.entropy() - expected, 0.0)
