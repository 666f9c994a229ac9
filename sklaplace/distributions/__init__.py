"""Predictive distributions returned by ``predict_dist``.

Numpy in, numpy out (float64), vectorized over rows. The module also holds the
link functions that map a Gaussian over logits to class probabilities:
probit / extended probit, the Laplace bridge and Monte Carlo with common random
numbers.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import stats
from scipy.special import digamma, entr, softmax
from sklearn.utils import check_random_state

from .._checks import _check_confidence, _check_n_samples
from ._dirichlet import DirichletPrediction
from ._links import (_psd_sqrt, _sample_logits, binary_probit_proba, bridge_alpha,
                     centered_logit_var, mc_proba, mean_field_proba, probit_link, probit_proba)
from .._multilabel import MultilabelPrediction, multilabel_probit_proba
from ._mixture import CategoricalMixturePrediction, NormalMixturePrediction
from ._scipy_like import _broadcast_checked, _NormalScipyMixin, _RowsMixin

__all__ = [
    "probit_proba",
    "mean_field_proba",
    "binary_probit_proba",
    "multilabel_probit_proba",
    "centered_logit_var",
    "bridge_alpha",
    "mc_proba",
    "NormalPrediction",
    "LogitGaussianPrediction",
    "DirichletPrediction",
    "MultilabelPrediction",
    "NormalMixturePrediction",
    "CategoricalMixturePrediction",
]

_LINKS = ("probit", "bridge", "mc", "nn")


def _entropy(proba):
    """Row entropy in nats of probabilities along the last axis (0 log 0 = 0)."""
    return entr(proba).sum(axis=-1)


# --------------------------------------------------------------------------- regression
@dataclass(frozen=True, eq=False)
class NormalPrediction(_NormalScipyMixin, _RowsMixin):
    """Gaussian predictive distribution of a Laplace regressor.

    It behaves like the frozen ``scipy.stats.norm(loc=mean, scale=std)`` that
    :meth:`to_scipy` returns: ``pdf``, ``logpdf``, ``cdf``, ``logcdf``, ``sf``, ``logsf``,
    ``ppf``, ``isf``, ``interval``, ``median``, ``entropy``, ``moment``, ``support``,
    ``expect`` and ``rvs`` give scipy's values. One difference, on purpose: ``mean``,
    ``std`` and ``var`` are arrays, not methods as in scipy. They are the predictive's
    parameters next to ``epistemic_var`` and ``aleatoric_var`` (``var`` is their sum), and
    ``dist.mean`` is what every release has returned; turning them into methods would make
    ``dist.mean + 1`` fail. ``to_scipy()`` gives the scipy object where methods are needed.

    ``dist[rows]`` (an integer, a slice, a boolean mask or an index array) is the
    predictive of those rows, a ``NormalPrediction`` with the epistemic / aleatoric split
    kept (an integer keeps the row axis: ``dist[3]`` is ``dist[[3]]``); ``len(dist)`` is the
    number of rows.

    Parameters
    ----------
    mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        Predictive mean.
    epistemic_var : ndarray of the same shape as ``mean``
        Variance of the function value under the weight posterior.
    aleatoric_var : ndarray of the same shape as ``mean``
        Observation noise variance ``sigma**2``.
    """

    mean: np.ndarray
    epistemic_var: np.ndarray
    aleatoric_var: np.ndarray

    _ROW_FIELDS = ("mean", "epistemic_var", "aleatoric_var")

    def __post_init__(self):
        mean = np.asarray(self.mean, dtype=np.float64)
        for name in ("mean", "epistemic_var", "aleatoric_var"):
            value = np.broadcast_to(np.asarray(getattr(self, name), dtype=np.float64), mean.shape)
            if name != "mean" and not (np.all(np.isfinite(value)) and np.all(value >= 0)):
                raise ValueError(f"{name} must be finite and non-negative.")
            object.__setattr__(self, name, value)

    @property
    def var(self):
        """Total predictive variance, epistemic plus aleatoric."""
        return self.epistemic_var + self.aleatoric_var

    @property
    def std(self):
        """Total predictive standard deviation."""
        return np.sqrt(self.var)

    def _like_mean(self, values, name):
        """``values`` as an array that broadcasts to ``mean``'s shape without growing it
        (a (n, 1) column against (n,) means would silently give an (n, n) result)."""
        return _broadcast_checked(values, self.mean.shape, name)

    def interval(self, confidence=0.95):
        """Central predictive interval.

        Parameters
        ----------
        confidence : float, default=0.95
            Probability mass inside the interval, in (0, 1).

        Returns
        -------
        lower, upper : ndarray of the same shape as ``mean``
            Bounds of the interval.

        Raises
        ------
        ValueError
            If ``confidence`` is not in (0, 1).
        """
        confidence = _check_confidence(confidence)
        half = stats.norm.ppf(0.5 + confidence / 2.0) * self.std
        return self.mean - half, self.mean + half

    def logpdf(self, y):
        """Log density of ``y`` (broadcast against ``mean``).

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        logpdf : ndarray
            Log predictive density of each value.
        """
        return stats.norm.logpdf(self._like_mean(y, "y"), loc=self.mean, scale=self.std)

    def cdf(self, y):
        """Cumulative distribution function at ``y`` (broadcast against ``mean``).

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        cdf : ndarray
            Predictive probability of a value at most ``y``.
        """
        return stats.norm.cdf(self._like_mean(y, "y"), loc=self.mean, scale=self.std)

    def ppf(self, q):
        """Quantile function at ``q`` (scalar or broadcastable against ``mean``).

        Parameters
        ----------
        q : float or array-like
            Probabilities in [0, 1], broadcastable to the shape of ``mean``.

        Returns
        -------
        ppf : ndarray
            Predictive quantiles.
        """
        return stats.norm.ppf(self._like_mean(q, "q"), loc=self.mean, scale=self.std)

    def sample(self, n_samples=1, random_state=None):
        """Draw targets from the predictive.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows) or (n_samples, n_rows, n_outputs)
            Draws of the target, noise included (the shape of ``mean`` after the draws').

        Raises
        ------
        ValueError
            If ``n_samples`` is not a positive integer.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        noise = rng.standard_normal((n_samples, *self.mean.shape))
        return self.mean + self.std * noise

    def to_scipy(self):
        """Return the frozen ``scipy.stats.norm(loc=mean, scale=std)``.

        Returns
        -------
        dist : scipy.stats.rv_continuous frozen distribution
            The same predictive as a scipy object.
        """
        return stats.norm(loc=self.mean, scale=self.std)
@dataclass(frozen=True, eq=False)
class LogitGaussianPrediction(_RowsMixin):
    """Gaussian predictive over the logits of a Laplace classifier.

    ``dist[rows]`` (an integer, a slice, a boolean mask or an index array) is the predictive
    of those rows with the same link and settings (an integer keeps the row axis);
    ``len(dist)`` is the number of rows. Monte Carlo draws are shared by all rows, so the
    selected rows' probabilities are those of the whole set.

    Parameters
    ----------
    logit_mean : ndarray of shape (n_samples, n_classes)
        Mean of the logits.
    logit_cov : ndarray of shape (n_samples, n_classes, n_classes)
        Covariance of the logits (positive semi-definite).
    link : {"probit", "bridge", "mc", "nn"}, default="probit"
        How :meth:`proba` integrates the softmax: extended probit, Laplace-bridge
        Dirichlet mean, Monte Carlo over the logit Gaussian, or the average softmax of
        ``logit_samples`` (logits of sampled weights).
    n_samples : int, default=100
        Number of Monte Carlo draws for ``"mc"`` and for :meth:`mutual_information`.
    seed : int, default=0
        Prediction seed of the Monte Carlo draws, shared by all rows.
    single_logit : bool, default=False
        Whether the model has one Bernoulli logit ``f`` stored as the two logits
        ``(-f/2, f/2)`` with covariance ``[[v/4, -v/4], [-v/4, v/4]]``. The probit link
        then uses the binary probit on ``f``.
    logit_samples : ndarray of shape (n_draws, n_samples, n_classes), default=None
        Logits computed from weight samples; required for ``link="nn"``.
    """

    logit_mean: np.ndarray
    logit_cov: np.ndarray
    link: str = "probit"
    n_samples: int = 100
    seed: int = 0
    single_logit: bool = False
    logit_samples: np.ndarray = None

    _ROW_FIELDS = ("logit_mean", "logit_cov")
    _DRAW_FIELDS = ("logit_samples",)

    def __post_init__(self):
        mean = np.asarray(self.logit_mean, dtype=np.float64)
        cov = np.asarray(self.logit_cov, dtype=np.float64)
        if mean.ndim != 2 or cov.shape != (*mean.shape, mean.shape[1]):
            raise ValueError(
                "logit_mean must have shape (n, C) and logit_cov shape (n, C, C); "
                f"got {mean.shape} and {cov.shape}."
            )
        if self.link not in _LINKS:
            raise ValueError(f"link must be one of {_LINKS}, got {self.link!r}.")
        _check_n_samples(self.n_samples)
        if self.single_logit and mean.shape[1] != 2:
            raise ValueError("single_logit=True requires exactly 2 logit columns.")
        object.__setattr__(self, "logit_mean", mean)
        object.__setattr__(self, "logit_cov", cov)
        if self.logit_samples is not None:
            samples = np.asarray(self.logit_samples, dtype=np.float64)
            if samples.ndim != 3 or samples.shape[1:] != mean.shape:
                raise ValueError(
                    f"logit_samples must have shape (S, {mean.shape[0]}, {mean.shape[1]}), "
                    f"got {samples.shape}."
                )
            object.__setattr__(self, "logit_samples", samples)
        elif self.link == "nn":
            raise ValueError('link="nn" requires logit_samples.')

    @property
    def logit_var(self):
        """Marginal logit variances, the diagonal of ``logit_cov``; shape (n, C)."""
        return np.diagonal(self.logit_cov, axis1=1, axis2=2).copy()

    @cached_property
    def _cov_sqrt(self):
        return _psd_sqrt(self.logit_cov)

    def _z(self):
        rng = np.random.default_rng(self.seed)
        return rng.standard_normal((self.n_samples, self.logit_mean.shape[1]))

    def _sample_proba(self):
        """Softmax of logit draws, shape (n, S, C): ``logit_samples`` or common-random MC."""
        if self.logit_samples is not None:
            return softmax(np.swapaxes(self.logit_samples, 0, 1), axis=-1)
        return softmax(_sample_logits(self.logit_mean, self._cov_sqrt, self._z()), axis=-1)

    def proba(self):
        """Predictive class probabilities under ``link``; shape (n, C), rows sum to one.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Predictive probability of each class.
        """
        if self.link == "probit":
            return probit_link(self.logit_mean, self.logit_cov)
        if self.link == "bridge":
            return self.dirichlet().mean
        if self.link == "mc":
            return softmax(
                _sample_logits(self.logit_mean, self._cov_sqrt, self._z()), axis=-1
            ).mean(axis=1)
        return softmax(self.logit_samples, axis=-1).mean(axis=0)

    def entropy(self):
        """Entropy in nats of :meth:`proba` (total predictive uncertainty); shape (n,).

        Returns
        -------
        entropy : ndarray of shape (n_samples,)
            Entropy of the predictive class probabilities.
        """
        return _entropy(self.proba())

    def mutual_information(self):
        """Epistemic uncertainty ``H[E p] - E[H p]``; shape (n,).

        With the probit or Monte Carlo link both terms come from the same draws of
        the logits: ``logit_samples`` when given, else ``n_samples`` Monte Carlo
        draws from ``seed`` shared by all rows, so the estimate is never negative
        (Jensen). Taking ``H[E p]`` from the probit instead would leave a difference
        smaller than that approximation's error. With the bridge both come from its
        Dirichlet, in closed form (``E[H p] = ψ(α₀ + 1) − Σ_k (α_k / α₀) ψ(α_k + 1)``),
        so that ``entropy() − mutual_information()``, the expected entropy, is never
        negative (the draws' MI could exceed the entropy of the bridge's mean, which
        for two classes is the MAP probability).

        Returns
        -------
        mutual_information : ndarray of shape (n_samples,)
            Mutual information in nats between the label and the logits.
        """
        if self.link == "bridge" and self.logit_samples is None:
            alpha = self.dirichlet().alpha
            a0 = alpha.sum(axis=1)
            mean = alpha / a0[:, None]
            expected = digamma(a0 + 1.0) - (mean * digamma(alpha + 1.0)).sum(axis=1)
            return np.clip(_entropy(mean) - expected, 0.0, None)
        proba = self._sample_proba()
        return np.maximum(_entropy(proba.mean(axis=1)) - _entropy(proba).mean(axis=1), 0.0)

    def sample(self, n_samples=1, random_state=None):
        """Draw logits from ``N(logit_mean, logit_cov)``.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n, C)
            Draws of the logits of each row.

        Raises
        ------
        ValueError
            If ``n_samples`` is not a positive integer.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        z = rng.standard_normal((n_samples, *self.logit_mean.shape))
        return self.logit_mean + np.einsum("nij,snj->sni", self._cov_sqrt, z)

    def dirichlet(self):
        """Laplace-bridge Dirichlet of the logit Gaussian (uses the marginal variances).

        As in Hobbhahn et al. (Eq. 7) and laplace-torch, the variances are the raw
        ``logit_var``: unlike the probit's, they include the variance of a shift
        common to all logits, which the softmax ignores.

        Returns
        -------
        dist : DirichletPrediction
            Dirichlet with ``alpha = bridge_alpha(logit_mean, logit_var)``.
        """
        return DirichletPrediction(bridge_alpha(self.logit_mean, self.logit_var))
