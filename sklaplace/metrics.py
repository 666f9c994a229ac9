"""Calibration and model-selection metrics (the out-of-distribution scores live in
:mod:`sklaplace.ood` and are re-exported here).

Every function takes and returns numpy values and follows scikit-learn's argument order
``(y_true, y_prob_or_score, *, ...)``. Functions that take an estimator also accept a
:class:`~sklearn.pipeline.Pipeline` whose last step is the Laplace estimator.

Classification metrics take labels as :func:`sklearn.metrics.log_loss` does: the columns of
``y_prob`` are the sorted unique labels of ``y_true``, or of ``labels=`` when given (the
estimator's ``classes_`` are in that order). Integer ``y_true`` in ``0 .. C-1`` are column
indices, so a sample without every class needs no ``labels``. Every metric takes
``sample_weight``; integer weights equal repeated rows.
"""

import numbers
import warnings

import numpy as np
from scipy.stats import norm
from sklearn.metrics import brier_score_loss, log_loss

from .distributions import _check_confidence
from .ood import _last_step, ood_detection_metrics, ood_scores  # noqa: F401 - re-exported

__all__ = [
    "expected_calibration_error",
    "maximum_calibration_error",
    "reliability_curve",
    "multiclass_brier_score",
    "negative_log_likelihood",
    "gaussian_nll",
    "crps_gaussian",
    "interval_coverage",
    "regression_calibration_curve",
    "regression_calibration_error",
    "sharpness",
    "ood_scores",
    "ood_detection_metrics",
    "evidence_scorer",
    "neg_gaussian_nll_scorer",
    "neg_crps_scorer",
    "neg_coverage_error_scorer",
]

_STRATEGIES = ("uniform", "quantile")
_MULTIOUTPUT = ("uniform_average", "raw_values")


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------


def _check_sample_weight(sample_weight, n_samples):
    """``None`` or a float array of shape (n_samples,), finite, non-negative, positive sum."""
    if sample_weight is None:
        return None
    weight = np.asarray(sample_weight, dtype=float)
    if weight.shape != (n_samples,):
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per sample; got "
            f"{weight.shape}."
        )
    if not np.all(np.isfinite(weight)) or np.any(weight < 0) or weight.sum() <= 0:
        raise ValueError("sample_weight must be finite, non-negative and not all zero.")
    return weight


def _encode_labels(y_true, n_classes, labels):
    """Column indices of ``y_true`` in ``y_prob``: the sorted labels (of ``labels`` or of
    ``y_true``) as in ``log_loss``; integer ``y_true`` in 0..C-1 without ``labels`` are the
    column indices themselves."""
    if labels is None and y_true.dtype.kind in "iubf":
        finite = y_true.dtype.kind != "f" or np.all(np.isfinite(y_true))
        if finite and np.all(y_true == np.round(y_true)) and y_true.min() >= 0 and (
            y_true.max() < n_classes
        ):
            return y_true.astype(int)
    if labels is None:
        classes = np.unique(y_true)
        if classes.size != n_classes:
            raise ValueError(
                f"y_true holds {classes.size} labels {classes.tolist()[:10]} but y_prob has "
                f"{n_classes} columns; pass labels= (e.g. the estimator's classes_) to say "
                "which label each column is."
            )
    else:
        labels = np.asarray(labels)
        classes = np.unique(labels)
        if labels.ndim != 1 or classes.size != labels.size or classes.size != n_classes:
            raise ValueError(
                f"labels must hold {n_classes} distinct labels, one per column of y_prob "
                f"(in sorted order, as in log_loss); got {labels.tolist()}."
            )
        if not np.array_equal(classes, labels):
            warnings.warn(
                f"labels {labels.tolist()} are not sorted; the columns of y_prob are taken to "
                f"be the sorted labels {classes.tolist()}, as in sklearn.metrics.log_loss.",
                UserWarning,
            )
    try:
        index = np.clip(np.searchsorted(classes, y_true), 0, n_classes - 1)
        known = classes[index] == y_true
    except TypeError:  # labels and y_true of incomparable types
        known = np.zeros(y_true.shape, dtype=bool)
    if not np.all(known):
        unknown = np.unique(y_true[~np.asarray(known, dtype=bool)]).tolist()[:10]
        raise ValueError(f"y_true holds labels not in labels: {unknown}.")
    return index


def _check_classification(y_true, y_prob, labels=None, sample_weight=None):
    """Return ``(y_true as column indices (n,), y_prob as (n, C), sample_weight or None)``.

    Probabilities of a lower precision (float32 nets) are renormalized after the cast
    to float64 where their rows sum to one within that precision, so that float64's
    sum-to-one check does not flag their rounding.
    """
    given = np.asarray(y_prob)
    y_prob = given.astype(float)
    if given.ndim == 2 and given.dtype.kind == "f" and given.dtype.itemsize < 8:
        sums = y_prob.sum(axis=1, keepdims=True)
        if np.all(np.abs(sums - 1.0) <= given.shape[1] * np.finfo(given.dtype).eps):
            y_prob = y_prob / sums
    y_true = np.asarray(y_true)
    if y_prob.ndim == 1:
        y_prob = np.column_stack([1.0 - y_prob, y_prob])
    elif y_prob.ndim != 2 or y_prob.shape[1] < 2:
        raise ValueError(
            "y_prob must have shape (n_samples, n_classes) with n_classes >= 2, or "
            f"(n_samples,) for the probability of class 1; got shape {y_prob.shape}."
        )
    if y_true.ndim != 1:
        raise ValueError(
            f"y_true must be 1-D labels of shape (n_samples,); got shape {y_true.shape}."
        )
    if y_true.shape[0] != y_prob.shape[0]:
        raise ValueError(
            f"y_true and y_prob have different numbers of samples: {y_true.shape[0]} vs "
            f"{y_prob.shape[0]}."
        )
    if y_true.shape[0] == 0:
        raise ValueError("y_true and y_prob are empty.")
    if not np.all(np.isfinite(y_prob)) or y_prob.min() < 0 or y_prob.max() > 1:
        raise ValueError("y_prob must contain finite probabilities in [0, 1].")
    sums = y_prob.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=1e-5):  # float32 rounding passes
        worst = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(
            f"y_prob rows must sum to 1 (one probability per class); row {worst} sums to "
            f"{sums[worst]:.6g}."
        )
    y_true = _encode_labels(y_true, y_prob.shape[1], labels)
    return y_true, y_prob, _check_sample_weight(sample_weight, y_prob.shape[0])


def _check_n(value, name, minimum=1):
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, numbers.Integral)
        or value < minimum
    ):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def _check_strategy(strategy):
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be one of {_STRATEGIES}; got {strategy!r}.")


def _check_regression(y_true, mean, std, sample_weight=None):
    """Return float arrays ``y_true, mean, std`` of one common shape and the checked
    ``sample_weight`` (None, or one weight per row), or raise ValueError."""
    y_true = np.asarray(y_true, dtype=float)
    mean = np.asarray(mean, dtype=float)
    std = np.asarray(std, dtype=float)
    if y_true.ndim not in (1, 2):
        raise ValueError(
            f"y_true must have shape (n_samples,) or (n_samples, n_outputs); got {y_true.shape}."
        )
    if y_true.size == 0:
        raise ValueError("y_true is empty.")
    if mean.shape != y_true.shape:
        raise ValueError(
            f"mean must have the shape of y_true {y_true.shape}; got {mean.shape}."
        )
    try:
        std = np.broadcast_to(std, y_true.shape)
    except ValueError:
        raise ValueError(
            f"std must have the shape of y_true {y_true.shape} (or broadcast to it); "
            f"got {std.shape}."
        ) from None
    _check_std(std)
    if not (np.all(np.isfinite(y_true)) and np.all(np.isfinite(mean))):
        raise ValueError("y_true and mean must be finite.")
    return y_true, mean, std, _check_sample_weight(sample_weight, y_true.shape[0])


def _check_std(std):
    if not np.all(np.isfinite(std)) or np.any(std <= 0):
        raise ValueError("std must be finite and strictly positive.")


def _average(values, multioutput, weight=None):
    """(Weighted) mean over samples; for 2-D inputs also over outputs unless ``raw_values``."""
    if multioutput not in _MULTIOUTPUT:
        raise ValueError(f"multioutput must be one of {_MULTIOUTPUT}; got {multioutput!r}.")
    per_output = np.average(values, axis=0, weights=weight)
    if multioutput == "raw_values" and values.ndim == 2:
        return per_output
    return float(np.mean(per_output))


# --------------------------------------------------------------------------------------
# classification calibration
# --------------------------------------------------------------------------------------


def _binned_top_label(y_true, y_prob, n_bins, strategy, labels=None, sample_weight=None):
    """Per-bin (confidence, accuracy, count) sums for all bins, empty ones included; with
    ``sample_weight`` every sum is weighted and ``count`` is the bin's weight."""
    y_true, y_prob, weight = _check_classification(y_true, y_prob, labels, sample_weight)
    n_bins = _check_n(n_bins, "n_bins")
    _check_strategy(strategy)
    confidence = y_prob.max(axis=1)
    correct = (y_prob.argmax(axis=1) == y_true).astype(float)
    levels = np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "uniform":
        edges = levels
    elif weight is None:
        edges = np.quantile(confidence, levels)
    else:  # weighted quantiles (numpy has them for the inverted CDF only)
        edges = np.quantile(confidence, levels, weights=weight, method="inverted_cdf")
    # Right-closed bins (e_{b-1}, e_b]; the first bin also holds its left edge. Comparing
    # against the edge array (not ceil(conf * n_bins)) keeps 0.3 in (0.2, 0.3].
    bin_ids = np.searchsorted(edges[1:-1], confidence, side="left")
    if weight is None:
        counts = np.bincount(bin_ids, minlength=n_bins)
        weight = np.ones_like(confidence)
    else:
        counts = np.bincount(bin_ids, weights=weight, minlength=n_bins)
    conf_sum = np.bincount(bin_ids, weights=weight * confidence, minlength=n_bins)
    acc_sum = np.bincount(bin_ids, weights=weight * correct, minlength=n_bins)
    return conf_sum, acc_sum, counts


def reliability_curve(
    y_true, y_prob, *, n_bins=10, strategy="uniform", labels=None, sample_weight=None
):
    """Top-label reliability diagram: mean confidence and accuracy per bin.

    Confidence is the largest predicted probability of a sample, and a sample is correct when
    its arg-max class equals ``y_true``. Only non-empty bins are returned.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels. The columns of ``y_prob`` are the sorted labels of ``labels``, else of
        ``y_true``, as in :func:`sklearn.metrics.log_loss`; integers ``0 .. n_classes-1``
        without ``labels`` are column indices.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities, e.g. ``predict_proba(X)``. A 1-D array is the probability of
        class 1 of a binary problem.
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: bins of equal width on [0, 1], right-closed ``((b-1)/B, b/B]`` with
        0 in the first bin (Guo et al., 2017). ``"quantile"``: edges at the quantiles of the
        confidences, so bins hold (about) equally many samples.
    labels : array-like of shape (n_classes,), default=None
        The labels of the columns of ``y_prob`` (taken in sorted order, as in
        :func:`sklearn.metrics.log_loss`), e.g. the estimator's ``classes_``. Needed when
        ``y_true`` does not hold every label and is not made of column indices.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; integer weights equal repeated rows. Bins hold weight instead of
        counts, and ``"quantile"`` bins are weighted quantiles (inverted CDF).

    Returns
    -------
    confidence : ndarray of shape (n_nonempty_bins,)
        Mean confidence per bin (weighted with ``sample_weight``).
    accuracy : ndarray of shape (n_nonempty_bins,)
        Fraction of correct predictions per bin (weighted with ``sample_weight``).
    counts : ndarray of shape (n_nonempty_bins,)
        Number of samples per bin; the sum of their weights with ``sample_weight``.

    See Also
    --------
    expected_calibration_error : The count-weighted gap between these two curves.
    sklaplace.plotting.ReliabilityDisplay : Plot of this curve.
    """
    conf_sum, acc_sum, counts = _binned_top_label(
        y_true, y_prob, n_bins, strategy, labels, sample_weight
    )
    nonempty = counts > 0
    counts = counts[nonempty]
    return conf_sum[nonempty] / counts, acc_sum[nonempty] / counts, counts


def expected_calibration_error(
    y_true, y_prob, *, n_bins=10, strategy="uniform", labels=None, sample_weight=None
):
    """Top-label expected calibration error (ECE).

    ``ECE = sum_b (n_b / n) * |acc_b - conf_b|`` over the confidence bins, where ``acc_b``
    is the accuracy and ``conf_b`` the mean top-label confidence of the ``n_b`` samples of
    bin ``b`` (Naeini et al., 2015; Guo et al., 2017).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels. The columns of ``y_prob`` are the sorted labels of ``labels``, else of
        ``y_true``, as in :func:`sklearn.metrics.log_loss`; integers ``0 .. n_classes-1``
        without ``labels`` are column indices.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width right-closed bins on [0, 1] or equal-mass bins; see
        :func:`reliability_curve`.
    labels : array-like of shape (n_classes,), default=None
        The labels of the columns of ``y_prob`` (taken in sorted order, as in
        :func:`sklearn.metrics.log_loss`), e.g. the estimator's ``classes_``. Needed when
        ``y_true`` does not hold every label and is not made of column indices.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; integer weights equal repeated rows. Bins hold weight instead of
        counts, and ``"quantile"`` bins are weighted quantiles (inverted CDF).

    Returns
    -------
    ece : float
        In [0, 1]; 0 for a perfectly calibrated classifier (at this binning).

    References
    ----------
    Naeini, Cooper, Hauskrecht. "Obtaining well calibrated probabilities using Bayesian
    binning". AAAI 2015. Guo, Pleiss, Sun, Weinberger. "On calibration of modern neural
    networks". ICML 2017.
    """
    conf_sum, acc_sum, counts = _binned_top_label(
        y_true, y_prob, n_bins, strategy, labels, sample_weight
    )
    return float(np.abs(acc_sum - conf_sum).sum() / counts.sum())


def maximum_calibration_error(
    y_true, y_prob, *, n_bins=10, strategy="uniform", labels=None, sample_weight=None
):
    """Top-label maximum calibration error (MCE).

    ``MCE = max_b |acc_b - conf_b|`` over the non-empty confidence bins (Naeini et al., 2015;
    Guo et al., 2017). Parameters as in :func:`expected_calibration_error`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels. The columns of ``y_prob`` are the sorted labels of ``labels``, else of
        ``y_true``, as in :func:`sklearn.metrics.log_loss`; integers ``0 .. n_classes-1``
        without ``labels`` are column indices.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins; see :func:`reliability_curve`.
    labels : array-like of shape (n_classes,), default=None
        The labels of the columns of ``y_prob`` (taken in sorted order, as in
        :func:`sklearn.metrics.log_loss`), e.g. the estimator's ``classes_``. Needed when
        ``y_true`` does not hold every label and is not made of column indices.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; integer weights equal repeated rows. Bins hold weight instead of
        counts, and ``"quantile"`` bins are weighted quantiles (inverted CDF).

    Returns
    -------
    mce : float
        In [0, 1].
    """
    confidence, accuracy, _ = reliability_curve(
        y_true, y_prob, n_bins=n_bins, strategy=strategy, labels=labels,
        sample_weight=sample_weight,
    )
    return float(np.max(np.abs(accuracy - confidence)))


def multiclass_brier_score(y_true, y_prob, *, labels=None, sample_weight=None):
    """Multi-class Brier score: mean over samples of ``sum_c (p_c - 1[y = c])**2``.

    This is Brier's (1950) original score, as in :func:`sklearn.metrics.brier_score_loss`
    with ``scale_by_half=False`` (which it wraps). For a binary problem it is twice the
    familiar binary Brier score ``mean((p_1 - y)**2)``, and it ranges in [0, 2].

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels. The columns of ``y_prob`` are the sorted labels of ``labels``, else of
        ``y_true``, as in :func:`sklearn.metrics.log_loss`; integers ``0 .. n_classes-1``
        without ``labels`` are column indices.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    labels : array-like of shape (n_classes,), default=None
        The labels of the columns of ``y_prob`` (taken in sorted order, as in
        :func:`sklearn.metrics.log_loss`), e.g. the estimator's ``classes_``. Needed when
        ``y_true`` does not hold every label and is not made of column indices.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; integer weights equal repeated rows.

    Returns
    -------
    score : float
        Lower is better.
    """
    y_true, y_prob, weight = _check_classification(y_true, y_prob, labels, sample_weight)
    columns = np.arange(y_prob.shape[1])
    return float(brier_score_loss(y_true, y_prob, labels=columns, scale_by_half=False,
                                  sample_weight=weight))


def negative_log_likelihood(y_true, y_prob, *, labels=None, sample_weight=None):
    """Mean negative log predictive probability of the true class, ``mean(-log p_y)``.

    Wraps :func:`sklearn.metrics.log_loss` (probabilities clipped to machine epsilon).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels. The columns of ``y_prob`` are the sorted labels of ``labels``, else of
        ``y_true``, as in :func:`sklearn.metrics.log_loss`; integers ``0 .. n_classes-1``
        without ``labels`` are column indices.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    labels : array-like of shape (n_classes,), default=None
        The labels of the columns of ``y_prob`` (taken in sorted order, as in
        :func:`sklearn.metrics.log_loss`), e.g. the estimator's ``classes_``. Needed when
        ``y_true`` does not hold every label and is not made of column indices.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; integer weights equal repeated rows.

    Returns
    -------
    nll : float
        Lower is better (natural log).
    """
    y_true, y_prob, weight = _check_classification(y_true, y_prob, labels, sample_weight)
    return float(log_loss(y_true, y_prob, labels=np.arange(y_prob.shape[1]),
                          sample_weight=weight))


# --------------------------------------------------------------------------------------
# regression
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# model selection
# --------------------------------------------------------------------------------------


def evidence_scorer(estimator, X=None, y=None):
    """Scorer returning the Laplace log evidence of the fitted estimator.

    For ``GridSearchCV(est, grid, scoring=evidence_scorer)``. It returns
    ``estimator.log_evidence_`` (of the last step for a Pipeline) and ignores ``X`` and
    ``y``: it scores the *training* fit of each fold, not the held-out fold, so the
    "test" scores of the search are evidences of the training folds. For a classifier
    whose prior precision was chosen by held-out NLL (``hyperparameter_tuning_ ==
    "cv"``) it is the evidence at the evidence's own optimum δ, so that it compares
    models rather than priors; a regressor tuned that way is refused.

    Parameters
    ----------
    estimator : fitted Laplace estimator or Pipeline ending in one
        The fitted estimator whose ``log_evidence_`` is returned.
    X, y : ignored
        Present for the scorer signature ``scorer(estimator, X, y)``.

    Returns
    -------
    log_evidence : float
        Higher is better.

    Raises
    ------
    ValueError
        If the estimator (the last step of a Pipeline) has no ``log_evidence_``, or is a
        regressor whose δ and σ were chosen by held-out NLL.
    """
    est = _last_step(estimator)
    if not hasattr(est, "log_evidence_"):
        raise ValueError(
            f"{type(est).__name__} has no log_evidence_; evidence_scorer needs a fitted "
            "Laplace estimator."
        )
    select = getattr(est, "_log_evidence_for_selection", None)  # sklaplace's estimators
    return float(est.log_evidence_) if select is None else select()



# The scorers of probabilistic regression (GridSearchCV(scoring=...)) live in _scoring.py,
# which builds on the metrics above.
from ._scoring import (  # noqa: E402
    neg_coverage_error_scorer,
    neg_crps_scorer,
    neg_gaussian_nll_scorer,
)
