"""Calibration and proper scores of class probabilities: the top-label reliability curve,
expected and maximum calibration error, multi-class Brier score and negative
log-likelihood, and the per-label negative log-likelihood of multilabel probabilities.
Re-exported by :mod:`sklaplace.metrics`, the public home of these
functions (their ``__module__``).
"""

import numpy as np
from sklearn.metrics import log_loss

from .._checks import (_check_classification, _check_n, _check_sample_weight,
                       _check_strategy)


def _weighted_quantile(values, levels, weight):
    """``np.quantile(values, levels, weights=weight, method="inverted_cdf")`` (NumPy ≥ 2.0):
    per level, the smallest value whose share of the total weight reaches it."""
    order = np.argsort(values)
    cdf = np.cumsum(weight[order], dtype=np.float64)
    cdf /= cdf[-1]
    cdf[cdf == 0] = -1  # leading zero weights: level 0 is the first value of positive weight
    index = np.minimum(np.searchsorted(cdf, levels, side="left"), values.size - 1)
    return values[order][index]


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
    else:
        edges = _weighted_quantile(confidence, levels, weight)
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
    with ``scale_by_half=False`` (scikit-learn 1.7 and later). For a binary problem it is
    twice the familiar binary Brier score ``mean((p_1 - y)**2)``, and it ranges in [0, 2].

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
    one_hot = np.eye(y_prob.shape[1])[y_true]
    return float(np.average(np.sum((one_hot - y_prob) ** 2, axis=1), weights=weight))


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


def per_label_nll(y_true, y_prob, *, sample_weight=None):
    """Mean per-label negative log-likelihood of multilabel probabilities.

    The binary log loss of each label, ``-(y log p + (1 - y) log(1 - p))``, averaged over
    the labels of a row and then over the rows: what ``log_loss`` is per column of an
    indicator matrix. Probabilities are clipped to ``[eps, 1 - eps]`` (machine epsilon of
    their dtype), as :func:`sklearn.metrics.log_loss` does.

    Parameters
    ----------
    y_true : array-like of shape (n_samples, n_labels)
        Indicator matrix of 0 and 1, one column per label (as ``MLPClassifier`` and
        :class:`~sklaplace.LaplaceClassifier` take for multilabel ``y``).
    y_prob : array-like of shape (n_samples, n_labels)
        Probability of each label, e.g. ``predict_proba(X)`` of a multilabel fit.
    sample_weight : array-like of shape (n_samples,), default=None
        Row weights; integer weights equal repeated rows.

    Returns
    -------
    nll : float
        In nats per label; lower is better (``log 2`` for p = 0.5 everywhere).

    See Also
    --------
    neg_per_label_nll_scorer : This metric, negated, as a scorer for ``GridSearchCV``.
    negative_log_likelihood : The NLL of one class per row.
    """
    y_true, y_prob = _check_indicator(y_true, y_prob)
    weight = _check_sample_weight(sample_weight, y_true.shape[0])
    eps = np.finfo(y_prob.dtype).eps
    p = np.clip(y_prob, eps, 1 - eps)
    per_row = -(y_true * np.log(p) + (1.0 - y_true) * np.log1p(-p)).mean(axis=1)
    return float(np.average(per_row, weights=weight))


def _check_indicator(y_true, y_prob):
    """(y_true as float64, y_prob as floats) of :func:`per_label_nll`, both (n, L)."""
    y_true = np.asarray(y_true.toarray() if hasattr(y_true, "toarray") else y_true)
    y_prob = np.asarray(y_prob)
    if y_prob.dtype.kind != "f":
        y_prob = y_prob.astype(np.float64)
    if y_true.ndim != 2 or y_prob.shape != y_true.shape:
        raise ValueError(
            "y_true must be an indicator matrix of shape (n_samples, n_labels) and y_prob "
            f"the probabilities of the same shape; got {y_true.shape} and {y_prob.shape}. "
            "For one class per row use negative_log_likelihood.")
    if not np.isin(y_true, (0, 1)).all():
        raise ValueError("y_true must hold only 0 and 1 (an indicator matrix); got the "
                         f"values {np.unique(y_true)[:10].tolist()}.")
    if not (np.all(np.isfinite(y_prob)) and np.all((y_prob >= 0) & (y_prob <= 1))):
        raise ValueError("y_prob must hold probabilities in [0, 1].")
    return y_true.astype(np.float64), y_prob


# Documented, shown and pickled as sklaplace.metrics.<name>, where they were defined before
# this module was split off and where users import them from.
for _function in (reliability_curve, expected_calibration_error, maximum_calibration_error,
                  multiclass_brier_score, negative_log_likelihood, per_label_nll):
    _function.__module__ = "sklaplace.metrics"
del _function
