"""Link functions: class probabilities from a Gaussian over the logits.

The expected softmax E[softmax(f)] under f ~ N(μ, Σ) has no closed form; the links
approximate it: the extended probit of the marginal variances, the mean-field probit
of the pairwise logit differences (exact for two classes as the binary probit of
f1 − f0), the Laplace bridge's Dirichlet parameters (Hobbhahn et al.), and Monte Carlo
with draws shared by all rows.  Re-exported by :mod:`sklaplace.distributions`, the
public home of these functions (their ``__module__``).
"""

import numpy as np
from scipy.special import logsumexp, softmax

_VAR_FLOOR = 1e-12
# ``bridge_alpha``: largest log α kept (e^600 ≈ 4e260: row sums stay finite).
_LOG_ALPHA_MAX = 600.0


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


# Documented, shown and pickled as sklaplace.distributions.<name>, where they were defined
# before this module was split off and where users import them from.
for _function in (probit_proba, centered_logit_var, mean_field_proba, probit_link,
                  binary_probit_proba, bridge_alpha, mc_proba):
    _function.__module__ = "sklaplace.distributions"
del _function
