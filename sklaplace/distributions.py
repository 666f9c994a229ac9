"""Predictive distributions returned by ``predict_dist``.

Numpy in, numpy out (float64), vectorized over rows. The module also holds the
link functions that map a Gaussian over logits to class probabilities:
probit / extended probit, the Laplace bridge and Monte Carlo with common random
numbers.
"""

from dataclasses import dataclass
from functools import cached_property
from numbers import Integral, Real

import numpy as np
from scipy import stats
from scipy.special import digamma, entr, gammaln, logsumexp, softmax
from sklearn.utils import check_random_state

from ._scipy_like import _NormalScipyMixin, _RowsMixin

__all__ = [
    "probit_proba",
    "mean_field_proba",
    "binary_probit_proba",
    "centered_logit_var",
    "bridge_alpha",
    "mc_proba",
    "NormalPrediction",
    "LogitGaussianPrediction",
    "DirichletPrediction",
]

_LINKS = ("probit", "bridge", "mc", "nn")
_VAR_FLOOR = 1e-12
# ``bridge_alpha``: largest log α kept (e^600 ≈ 4e260: row sums stay finite).
_LOG_ALPHA_MAX = 600.0


# --------------------------------------------------------------------------- helpers
def _check_confidence(confidence):
    if not isinstance(confidence, Real) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}.")
    return float(confidence)


def _check_n_samples(n_samples):
    if not isinstance(n_samples, Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")
    return int(n_samples)


def _entropy(proba):
    """Row entropy in nats of probabilities along the last axis (0 log 0 = 0)."""
    return entr(proba).sum(axis=-1)


def _psd_sqrt(cov):
    """Batched square root ``L`` with ``L @ L.T == cov`` for PSD, possibly singular, ``cov``.

    Uses a symmetric eigendecomposition with eigenvalues clipped at 0, so it never fails on
    rank-deficient or slightly indefinite (round-off) matrices.
    """
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    eigval, eigvec = np.linalg.eigh(cov)
    return eigvec * np.sqrt(np.clip(eigval, 0.0, None))[..., None, :]


def _sample_logits(logit_mean, cov_sqrt, z):
    """Logit draws ``mu_n + L_n z_s`` of shape (n, S, C) for shared ``z`` of shape (S, C)."""
    return logit_mean[:, None, :] + np.einsum("nij,sj->nsi", cov_sqrt, z)


# --------------------------------------------------------------------------- links
def probit_proba(logit_mean, logit_var):
    """Extended probit approximation of the expected softmax.

    Computes ``softmax(mu_j / sqrt(1 + pi / 8 * var_j))`` row-wise. It uses only the
    marginal logit variances and ignores their correlations. For two classes the
    estimators use :func:`binary_probit_proba` of the difference f1 − f0 instead
    (two-class softmax is the sigmoid of that difference).

    Parameters
    ----------
    logit_mean : array-like of shape (n_samples, n_classes)
        Means of the Gaussian over logits.
    logit_var : array-like of shape (n_samples, n_classes)
        Marginal variances of the logits.

    Returns
    -------
    proba : ndarray of shape (n_samples, n_classes)
        Approximate predictive class probabilities; rows sum to one.
    """
    mu = np.asarray(logit_mean, dtype=np.float64)
    var = np.asarray(logit_var, dtype=np.float64)
    return softmax(mu / np.sqrt(1.0 + np.pi / 8.0 * var), axis=-1)


def centered_logit_var(logit_cov):
    """Marginal variances of the logits centred to sum zero, f − mean(f)·1.

    Softmax is invariant to adding the same value to every logit, so the
    component of the logit Gaussian along 1 says nothing about the class
    probabilities (it is where the prior on, e.g., the last biases goes
    unconstrained by a softmax likelihood). The centred logits have the same
    softmax; their variances are (P Σ P)_cc with P = I − 11ᵀ/C. Used by the
    extended probit, which would otherwise read that direction as uncertainty.

    Parameters
    ----------
    logit_cov : array-like of shape (n_samples, n_classes, n_classes)
        Covariances of the logits.

    Returns
    -------
    var : ndarray of shape (n_samples, n_classes)
        Variances of the centred logits, clipped at 0.
    """
    cov = np.asarray(logit_cov, dtype=np.float64)
    n_classes = cov.shape[-1]
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    row = cov.sum(axis=-1)
    total = row.sum(axis=-1, keepdims=True)
    return np.maximum(diag - 2.0 * row / n_classes + total / n_classes**2, 0.0)


def mean_field_proba(logit_mean, logit_cov):
    """Mean-field probit approximation of the expected softmax (Lu, Ie & Sha 2020).

    Each class probability is written through the pairwise logit differences,
    ``softmax_k(f) = 1 / (1 + Σ_{j≠k} exp(−(f_k − f_j)))``, and each difference
    f_k − f_j ~ N(μ_k − μ_j, v_kj) is replaced by its probit-scaled mean
    ``(μ_k − μ_j) / sqrt(1 + π v_kj / 8)``, with v_kj = Σ_kk + Σ_jj − 2Σ_kj the
    variance of the difference under the full logit covariance; the result is
    normalized to sum to one. It reads only differences of logits, so it is
    invariant to a shift of every logit by the same Gaussian amount (which a
    softmax cannot see), and for two classes it is exactly the binary probit of
    f1 − f0. Against Monte Carlo it is closer than the extended probit of the
    marginal variances (``tests/test_uncertainty.py``).

    Parameters
    ----------
    logit_mean : array-like of shape (n_samples, n_classes)
        Means of the Gaussian over logits.
    logit_cov : array-like of shape (n_samples, n_classes, n_classes)
        Covariances of the logits.

    Returns
    -------
    proba : ndarray of shape (n_samples, n_classes)
        Approximate predictive class probabilities; rows sum to one.
    """
    mu = np.asarray(logit_mean, dtype=np.float64)
    cov = np.asarray(logit_cov, dtype=np.float64)
    n_classes = mu.shape[-1]
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    var = np.maximum(diag[..., :, None] + diag[..., None, :] - 2.0 * cov, 0.0)
    z = -(mu[..., :, None] - mu[..., None, :]) / np.sqrt(1.0 + np.pi / 8.0 * var)
    z[..., np.arange(n_classes), np.arange(n_classes)] = -np.inf  # j ≠ k
    log_p = -np.logaddexp(0.0, logsumexp(z, axis=-1))
    return softmax(log_p, axis=-1)  # normalized: p_k / Σ_j p_j


def probit_link(logit_mean, logit_cov):
    """The ``link_approx="probit"`` predictive of a Gaussian over logits.

    :func:`mean_field_proba`; for two logits the binary probit of f1 − f0, which
    it equals, computed directly.
    """
    if np.shape(logit_mean)[-1] == 2:
        return _difference_probit_proba(logit_mean, logit_cov)
    return mean_field_proba(logit_mean, logit_cov)


def _difference_probit_proba(logit_mean, logit_cov):
    """:func:`binary_probit_proba` of f1 − f0 for two logits (their softmax is the sigmoid
    of that difference); shape (n_samples, 2)."""
    var = logit_cov[:, 0, 0] + logit_cov[:, 1, 1] - 2.0 * logit_cov[:, 0, 1]
    return binary_probit_proba(logit_mean[:, 1] - logit_mean[:, 0], np.maximum(var, 0.0))


def binary_probit_proba(f_mean, f_var):
    """Probit approximation for a single Bernoulli logit.

    ``p = sigmoid(f / sqrt(1 + pi * v / 8))`` approximates ``E[sigmoid(f)]`` under
    ``f ~ N(f_mean, f_var)``.

    Parameters
    ----------
    f_mean : array-like of shape (n_samples,)
        Mean of the logit of the positive class.
    f_var : array-like of shape (n_samples,)
        Variance of that logit.

    Returns
    -------
    proba : ndarray of shape (n_samples, 2)
        Columns ``[1 - p, p]``.
    """
    scale = np.sqrt(1.0 + np.pi / 8.0 * np.asarray(f_var, dtype=np.float64))
    z = np.divide(f_mean, scale, dtype=np.float64)  # f / sqrt(1 + π v / 8)
    # sigmoid(±z) from one exponential e = exp(-|z|) ≤ 1, both sides without cancellation:
    # sigmoid(|z|) = 1 / (1 + e) and sigmoid(-|z|) = e / (1 + e).
    e = np.exp(-np.abs(z))
    large = 1.0 / (1.0 + e)
    small = e * large
    positive = z >= 0
    proba = np.empty(z.shape + (2,))
    proba[..., 1] = np.where(positive, large, small)
    proba[..., 0] = np.where(positive, small, large)
    return proba


def bridge_alpha(logit_mean, logit_var):
    """Dirichlet parameters of the Laplace bridge.

    ``alpha_k = (1 / var_k) * (1 - 2 / K + exp(mu_k) / K**2 * sum_l exp(-mu_l))``
    (Hobbhahn et al., Eq. 7). The map is invariant to adding a constant to a row of
    ``mu``; it is evaluated on row-centred means in log space. Variances are clipped
    below at 1e-12. A row whose ``alpha`` would overflow float64 (logit means hundreds
    apart, far from the data) is divided by a common factor: its mean ``alpha / alpha_0``
    is unchanged and it stays concentrated far beyond float64's resolution (its
    smallest entries are floored at the smallest normal float).

    Parameters
    ----------
    logit_mean : array-like of shape (n_samples, n_classes)
        Means of the Gaussian over logits.
    logit_var : array-like of shape (n_samples, n_classes)
        Marginal variances of the logits (correlations are ignored).

    Returns
    -------
    alpha : ndarray of shape (n_samples, n_classes)
        Concentration parameters of the Dirichlet.
    """
    mu = np.asarray(logit_mean, dtype=np.float64)
    var = np.clip(np.asarray(logit_var, dtype=np.float64), _VAR_FLOOR, None)
    n_classes = mu.shape[-1]
    mu = mu - mu.mean(axis=-1, keepdims=True)
    log_term = mu + logsumexp(-mu, axis=-1, keepdims=True) - 2.0 * np.log(n_classes)
    if n_classes > 2:
        log_term = np.logaddexp(np.log1p(-2.0 / n_classes), log_term)
    log_alpha = log_term - np.log(var)
    excess = np.clip(log_alpha.max(axis=-1, keepdims=True) - _LOG_ALPHA_MAX, 0.0, None)
    return np.maximum(np.exp(log_alpha - excess), np.finfo(np.float64).tiny)


def mc_proba(logit_mean, logit_cov, z):
    """Monte Carlo estimate of ``E[softmax(f)]`` with ``f ~ N(mu_n, Sigma_n)``.

    The standard normal draws ``z`` are shared by all rows (common random numbers), so
    the result for a row does not depend on which other rows are present.

    Parameters
    ----------
    logit_mean : array-like of shape (n_samples, n_classes)
        Means of the Gaussian over logits.
    logit_cov : array-like of shape (n_samples, n_classes, n_classes)
        Covariances of the logits; positive semi-definite, possibly singular.
    z : array-like of shape (n_draws, n_classes)
        Standard normal draws.

    Returns
    -------
    proba : ndarray of shape (n_samples, n_classes)
        Average of ``softmax(mu_n + L_n z_s)`` over the draws, with ``L_n L_n^T = Sigma_n``.
    """
    mu = np.asarray(logit_mean, dtype=np.float64)
    cov_sqrt = _psd_sqrt(np.asarray(logit_cov, dtype=np.float64))
    z = np.asarray(z, dtype=np.float64)
    return softmax(_sample_logits(mu, cov_sqrt, z), axis=-1).mean(axis=1)


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
        values = np.asarray(values, dtype=np.float64)
        try:
            shape = np.broadcast_shapes(values.shape, self.mean.shape)
        except ValueError:
            shape = None
        if shape != self.mean.shape:
            raise ValueError(
                f"{name} of shape {values.shape} does not broadcast to the predictive's shape "
                f"{self.mean.shape}.")
        return values

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
        samples : ndarray of shape (n_samples, *mean.shape)
            Draws of the target, noise included.

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


# --------------------------------------------------------------------------- classification
@dataclass(frozen=True, eq=False)
class DirichletPrediction(_RowsMixin):
    """Dirichlet over class probabilities, e.g. from the Laplace bridge.

    ``dist[rows]`` (an integer, a slice, a boolean mask or an index array) is the Dirichlet
    of those rows (an integer keeps the row axis); ``len(dist)`` is the number of rows.

    Parameters
    ----------
    alpha : ndarray of shape (n_samples, n_classes)
        Positive concentration parameters.
    """

    alpha: np.ndarray

    _ROW_FIELDS = ("alpha",)

    def __post_init__(self):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim != 2:
            raise ValueError(f"alpha must have shape (n_samples, n_classes), got {alpha.shape}.")
        if not (np.all(np.isfinite(alpha)) and np.all(alpha > 0)):
            raise ValueError("alpha must be finite and positive.")
        object.__setattr__(self, "alpha", alpha)

    @property
    def precision(self):
        """Precision ``alpha_0``, the row sum of ``alpha``; shape (n_samples,)."""
        return self.alpha.sum(axis=1)

    @property
    def mean(self):
        """Expected class probabilities ``alpha / alpha_0``; shape (n_samples, n_classes)."""
        return self.alpha / self.precision[:, None]

    @property
    def var(self):
        """Marginal variances of the class probabilities; shape (n_samples, n_classes)."""
        mean = self.mean  # α_k (α_0 − α_k) / (α_0² (α_0 + 1)), without squaring α_0
        return mean * (1.0 - mean) / (self.precision[:, None] + 1.0)

    def marginal(self, k):
        """Marginal of class ``k``: frozen ``scipy.stats.beta(alpha_k, alpha_0 - alpha_k)``.

        Parameters
        ----------
        k : int
            Column index of the class.

        Returns
        -------
        beta : scipy.stats.rv_continuous frozen distribution
            The Beta marginal of the probability of class ``k``, one per row.
        """
        a_k = self.alpha[:, k]
        return stats.beta(a_k, self.precision - a_k)

    def entropy(self):
        """Differential entropy of the Dirichlet of each row; shape (n_samples,).

        Returns
        -------
        entropy : ndarray of shape (n_samples,)
            Differential entropy in nats.
        """
        alpha, a0 = self.alpha, self.precision
        n_classes = alpha.shape[1]
        log_beta = gammaln(alpha).sum(axis=1) - gammaln(a0)
        return (
            log_beta
            + (a0 - n_classes) * digamma(a0)
            - ((alpha - 1.0) * digamma(alpha)).sum(axis=1)
        )

    def sample(self, n_samples=1, random_state=None):
        """Draw probability vectors.

        Normalized gamma draws, computed in log space with
        ``Gamma(a) = Gamma(a + 1) * U**(1 / a)`` so that small concentrations do not
        underflow to all-zero rows.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed or generator, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows, n_classes)
            Rows sum to one.

        Raises
        ------
        ValueError
            If ``n_samples`` is not a positive integer.
        """
        n_samples = _check_n_samples(n_samples)
        rng = check_random_state(random_state)
        size = (n_samples, *self.alpha.shape)
        log_gamma = np.log(rng.standard_gamma(self.alpha + 1.0, size=size))
        log_gamma += np.log1p(-rng.uniform(size=size)) / self.alpha
        return softmax(log_gamma, axis=-1)

    def top_k_sets(self, confidence=0.95):
        """Uncertainty-aware top-k sets (Hobbhahn et al., Alg. 1).

        Classes are sorted by ``alpha``. Starting from the top class, class ``i`` is
        added while the upper ``1 - T/2`` quantile of its Beta marginal exceeds the
        lower ``T/2`` quantile of class ``i - 1``, with ``T = 1 - confidence``.

        Parameters
        ----------
        confidence : float, default=0.95
            In (0, 1).

        Returns
        -------
        mask : ndarray of bool, shape (n_samples, n_classes)
            Set membership in the original column order.

        Raises
        ------
        ValueError
            If ``confidence`` is not in (0, 1).
        """
        tail = (1.0 - _check_confidence(confidence)) / 2.0
        n_rows, n_classes = self.alpha.shape
        order = np.argsort(-self.alpha, axis=1, kind="stable")
        sorted_alpha = np.take_along_axis(self.alpha, order, axis=1)
        rest = self.precision[:, None] - sorted_alpha
        keep = np.zeros((n_rows, n_classes), dtype=bool)
        keep[:, 0] = True
        if n_classes > 1:
            lower = stats.beta.ppf(tail, sorted_alpha[:, :-1], rest[:, :-1])
            upper = stats.beta.ppf(1.0 - tail, sorted_alpha[:, 1:], rest[:, 1:])
            keep[:, 1:] = np.logical_and.accumulate(upper > lower, axis=1)
        mask = np.empty_like(keep)
        np.put_along_axis(mask, order, keep, axis=1)
        return mask


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
