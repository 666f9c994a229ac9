"""Scores and calibration of Gaussian predictions N(mean, std²): negative log-likelihood,
CRPS, interval coverage, the calibration curve of the probability integral transform and
its error, and sharpness. Re-exported by :mod:`sklaplace.metrics`, the public home of
these functions (their ``__module__``).
"""

import numpy as np
from scipy.stats import norm

from .._checks import (_average, _check_confidence, _check_n, _check_regression,
                      _check_sample_weight, _check_std)


def gaussian_nll(y_true, mean, std, *, multioutput="uniform_average", sample_weight=None):
    """Mean negative log-likelihood of ``y_true`` under ``Normal(mean, std**2)``.

    ``0.5 * log(2 pi std**2) + (y - mean)**2 / (2 std**2)``, averaged over samples.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the shape of ``y_true``
        Predictive means.
    std : array-like broadcastable to the shape of ``y_true``
        Predictive standard deviations (> 0), e.g. from ``predict(X, return_std=True)``.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        For 2-D targets: average over outputs, or return one value per output.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    nll : float or ndarray of shape (n_outputs,)
        Lower is better (natural log).
    """
    y_true, mean, std, weight = _check_regression(y_true, mean, std, sample_weight)
    z = (y_true - mean) / std
    values = 0.5 * np.log(2 * np.pi) + np.log(std) + 0.5 * z**2
    return _average(values, multioutput, weight)


def crps_gaussian(y_true, mean, std, *, multioutput="uniform_average", sample_weight=None):
    """Mean continuous ranked probability score of Gaussian predictions.

    ``CRPS(N(mu, s^2), y) = integral (F(x) - 1[x >= y])^2 dx
    = s * (z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi))`` with ``z = (y - mu) / s``
    (Gneiting & Raftery, 2007), averaged over samples. It has the units of ``y``.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the shape of ``y_true``
        Predictive means.
    std : array-like broadcastable to the shape of ``y_true``
        Predictive standard deviations (> 0).
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        For 2-D targets: average over outputs, or return one value per output.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    crps : float or ndarray of shape (n_outputs,)
        Lower is better.

    References
    ----------
    Gneiting, Raftery. "Strictly proper scoring rules, prediction, and estimation". JASA 2007.
    """
    y_true, mean, std, weight = _check_regression(y_true, mean, std, sample_weight)
    z = (y_true - mean) / std
    values = std * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    return _average(values, multioutput, weight)


def interval_coverage(y_true, mean, std, *, confidence=0.95, sample_weight=None):
    """Coverage and mean width of the central Gaussian prediction interval.

    The interval is ``mean ± z * std`` with ``z = Phi^{-1}((1 + confidence) / 2)``; the
    coverage (PICP) is the fraction of targets inside it, pooled over all samples and outputs.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the shape of ``y_true``
        Predictive means.
    std : array-like broadcastable to the shape of ``y_true``
        Predictive standard deviations (> 0).
    confidence : float, default=0.95
        Nominal coverage, in (0, 1).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    coverage : float
        (Weighted) fraction of targets within the interval; ``confidence`` when calibrated.
    mean_width : float
        (Weighted) mean interval width ``2 z std``, in the units of ``y``.
    """
    y_true, mean, std, weight = _check_regression(y_true, mean, std, sample_weight)
    confidence = _check_confidence(confidence)
    half_width = norm.ppf(0.5 + confidence / 2) * std
    inside = (y_true >= mean - half_width) & (y_true <= mean + half_width)
    weight = None if weight is None else np.broadcast_to(
        weight.reshape((-1,) + (1,) * (y_true.ndim - 1)), y_true.shape)
    return (float(np.average(inside, weights=weight)),
            float(np.average(2 * half_width, weights=weight)))


def _levels(n_levels):
    n_levels = _check_n(n_levels, "n_levels")
    return (np.arange(n_levels) + 0.5) / n_levels


def regression_calibration_curve(y_true, mean, std, *, n_levels=10, sample_weight=None):
    """Expected vs observed frequency of ``y <= F^{-1}(p)`` (quantile calibration curve).

    For each level ``p_j`` the observed frequency is ``mean_t 1[F_t(y_t) <= p_j]``, where
    ``F_t`` is the Gaussian predictive CDF of sample ``t`` (Kuleshov et al., 2018). Samples
    and outputs are pooled.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the shape of ``y_true``
        Predictive means.
    std : array-like broadcastable to the shape of ``y_true``
        Predictive standard deviations (> 0).
    n_levels : int, default=10
        Number of levels ``p_j = (j - 1/2) / n_levels``, j = 1..n_levels (bin midpoints of
        [0, 1]; the end points 0 and 1 are calibrated by construction).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    expected : ndarray of shape (n_levels,)
        The levels ``p_j``.
    observed : ndarray of shape (n_levels,)
        The observed frequencies ``p̂_j``; equal to ``expected`` when calibrated.
    """
    y_true, mean, std, weight = _check_regression(y_true, mean, std, sample_weight)
    expected = _levels(n_levels)
    pit = norm.cdf((y_true - mean) / std)  # probability integral transform
    if weight is not None:
        weight = np.broadcast_to(weight.reshape((-1,) + (1,) * (pit.ndim - 1)), pit.shape)
        weight = weight.ravel()
    observed = np.average(pit.ravel()[None, :] <= expected[:, None], axis=1, weights=weight)
    return expected, observed


def regression_calibration_error(y_true, mean, std, *, n_levels=10, sample_weight=None):
    """Quantile calibration error of Kuleshov et al. (2018).

    ``cal = sum_j (p_j - p̂_j)^2`` with unit weights, where ``p̂_j`` is the observed fraction
    of targets below the predicted ``p_j``-quantile (see
    :func:`regression_calibration_curve`). It is a *sum* over levels, as in the paper, so its
    scale grows with ``n_levels``; 0 means calibrated at these levels.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    mean : array-like of the shape of ``y_true``
        Predictive means.
    std : array-like broadcastable to the shape of ``y_true``
        Predictive standard deviations (> 0).
    n_levels : int, default=10
        Number of levels ``p_j = (j - 1/2) / n_levels``.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    error : float
        Non-negative; lower is better.

    References
    ----------
    Kuleshov, Fenner, Ermon. "Accurate uncertainties for deep learning using calibrated
    regression". ICML 2018 (the calibration error of its diagnostic tools).
    """
    expected, observed = regression_calibration_curve(
        y_true, mean, std, n_levels=n_levels, sample_weight=sample_weight
    )
    return float(np.sum((expected - observed) ** 2))


def sharpness(std, *, sample_weight=None):
    """Sharpness of predictive distributions: ``sqrt(mean(std**2))``.

    The root-mean predictive variance, as defined in uncertainty-toolbox
    (``uncertainty_toolbox.metrics_calibration.sharpness``); pooled over samples and outputs.
    Smaller is sharper; only meaningful together with a calibration metric.

    Parameters
    ----------
    std : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Predictive standard deviations (> 0).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights (one per row, shared by its outputs); integer weights equal
        repeated rows.

    Returns
    -------
    sharpness : float
        In the units of ``y``.
    """
    std = np.asarray(std, dtype=float)
    if std.size == 0:
        raise ValueError("std is empty.")
    _check_std(std)
    if sample_weight is None:
        return float(np.sqrt(np.mean(std**2)))
    weight = _check_sample_weight(sample_weight, std.shape[0] if std.ndim else 0)
    weight = np.broadcast_to(weight.reshape((-1,) + (1,) * (std.ndim - 1)), std.shape)
    return float(np.sqrt(np.average(std**2, weights=weight)))


# Documented, shown and pickled as sklaplace.metrics.<name>, where they were defined before
# this module was split off and where users import them from.
for _function in (gaussian_nll, crps_gaussian, interval_coverage, regression_calibration_curve,
                  regression_calibration_error, sharpness):
    _function.__module__ = "sklaplace.metrics"
del _function
