"""Calibration and model-selection metrics (the out-of-distribution scores live in
:mod:`sklaplace.ood` and are re-exported here).

Every function takes and returns numpy values and follows scikit-learn's argument order
``(y_true, y_prob_or_score, *, ...)``. Functions that take an estimator also accept a
:class:`~sklearn.pipeline.Pipeline` whose last step is the Laplace estimator.

Classification metrics take ``y_true`` as integer class *indices* ``0 .. C-1`` matching the
columns of ``y_prob``. Encode labels with the estimator's ``classes_`` first::

    y_idx = np.searchsorted(clf.classes_, y)
    expected_calibration_error(y_idx, clf.predict_proba(X))
"""

import numbers

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
]

_STRATEGIES = ("uniform", "quantile")
_MULTIOUTPUT = ("uniform_average", "raw_values")


# --------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------


def _check_classification(y_true, y_prob):
    """Return ``(y_true as int indices (n,), y_prob as (n, C))`` or raise ValueError.

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
            f"y_true must be 1-D class indices of shape (n_samples,); got shape {y_true.shape}."
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
    n_classes = y_prob.shape[1]
    if y_true.dtype.kind not in "iub":
        if y_true.dtype.kind == "f" and np.all(np.isfinite(y_true)) and np.all(
            y_true == np.round(y_true)
        ):
            y_true = y_true.astype(int)
        else:
            raise ValueError(
                "y_true must hold integer class indices 0..n_classes-1 (encode labels with "
                "np.searchsorted(estimator.classes_, y)); got dtype "
                f"{y_true.dtype}."
            )
    y_true = y_true.astype(int)
    if y_true.min() < 0 or y_true.max() >= n_classes:
        raise ValueError(
            f"y_true must hold class indices in [0, {n_classes - 1}] (the columns of "
            f"y_prob); got values in [{y_true.min()}, {y_true.max()}]. Encode labels with "
            "np.searchsorted(estimator.classes_, y)."
        )
    return y_true, y_prob


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


def _check_regression(y_true, mean, std):
    """Return float arrays ``y_true, mean, std`` of one common shape, or raise ValueError."""
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
    return y_true, mean, std


def _check_std(std):
    if not np.all(np.isfinite(std)) or np.any(std <= 0):
        raise ValueError("std must be finite and strictly positive.")


def _average(values, multioutput):
    """Mean over samples; for 2-D inputs also over outputs unless ``raw_values``."""
    if multioutput not in _MULTIOUTPUT:
        raise ValueError(f"multioutput must be one of {_MULTIOUTPUT}; got {multioutput!r}.")
    per_output = values.mean(axis=0)
    if multioutput == "raw_values" and values.ndim == 2:
        return per_output
    return float(np.mean(per_output))


# --------------------------------------------------------------------------------------
# classification calibration
# --------------------------------------------------------------------------------------


def _binned_top_label(y_true, y_prob, n_bins, strategy):
    """Per-bin (confidence, accuracy, count) for all bins, empty ones included."""
    y_true, y_prob = _check_classification(y_true, y_prob)
    n_bins = _check_n(n_bins, "n_bins")
    _check_strategy(strategy)
    confidence = y_prob.max(axis=1)
    correct = (y_prob.argmax(axis=1) == y_true).astype(float)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        edges = np.quantile(confidence, np.linspace(0.0, 1.0, n_bins + 1))
    # Right-closed bins (e_{b-1}, e_b]; the first bin also holds its left edge. Comparing
    # against the edge array (not ceil(conf * n_bins)) keeps 0.3 in (0.2, 0.3].
    bin_ids = np.searchsorted(edges[1:-1], confidence, side="left")
    counts = np.bincount(bin_ids, minlength=n_bins)
    conf_sum = np.bincount(bin_ids, weights=confidence, minlength=n_bins)
    acc_sum = np.bincount(bin_ids, weights=correct, minlength=n_bins)
    return conf_sum, acc_sum, counts


def reliability_curve(y_true, y_prob, *, n_bins=10, strategy="uniform"):
    """Top-label reliability diagram: mean confidence and accuracy per bin.

    Confidence is the largest predicted probability of a sample, and a sample is correct when
    its arg-max class equals ``y_true``. Only non-empty bins are returned.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True class indices ``0 .. n_classes-1`` (the column order of ``y_prob``). Encode
        labels with the estimator's ``classes_``: ``np.searchsorted(est.classes_, y)``.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities, e.g. ``predict_proba(X)``. A 1-D array is the probability of
        class 1 of a binary problem.
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: bins of equal width on [0, 1], right-closed ``((b-1)/B, b/B]`` with
        0 in the first bin (Guo et al., 2017). ``"quantile"``: edges at the quantiles of the
        confidences, so bins hold (about) equally many samples.

    Returns
    -------
    confidence : ndarray of shape (n_nonempty_bins,)
        Mean confidence per bin.
    accuracy : ndarray of shape (n_nonempty_bins,)
        Fraction of correct predictions per bin.
    counts : ndarray of shape (n_nonempty_bins,)
        Number of samples per bin.

    See Also
    --------
    expected_calibration_error : The count-weighted gap between these two curves.
    sklaplace.plotting.ReliabilityDisplay : Plot of this curve.
    """
    conf_sum, acc_sum, counts = _binned_top_label(y_true, y_prob, n_bins, strategy)
    nonempty = counts > 0
    counts = counts[nonempty]
    return conf_sum[nonempty] / counts, acc_sum[nonempty] / counts, counts


def expected_calibration_error(y_true, y_prob, *, n_bins=10, strategy="uniform"):
    """Top-label expected calibration error (ECE).

    ``ECE = sum_b (n_b / n) * |acc_b - conf_b|`` over the confidence bins, where ``acc_b``
    is the accuracy and ``conf_b`` the mean top-label confidence of the ``n_b`` samples of
    bin ``b`` (Naeini et al., 2015; Guo et al., 2017).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True class indices ``0 .. n_classes-1`` (the column order of ``y_prob``). Encode
        labels with the estimator's ``classes_``: ``np.searchsorted(est.classes_, y)``.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width right-closed bins on [0, 1] or equal-mass bins; see
        :func:`reliability_curve`.

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
    conf_sum, acc_sum, counts = _binned_top_label(y_true, y_prob, n_bins, strategy)
    return float(np.abs(acc_sum - conf_sum).sum() / counts.sum())


def maximum_calibration_error(y_true, y_prob, *, n_bins=10, strategy="uniform"):
    """Top-label maximum calibration error (MCE).

    ``MCE = max_b |acc_b - conf_b|`` over the non-empty confidence bins (Naeini et al., 2015;
    Guo et al., 2017). Parameters as in :func:`expected_calibration_error`.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True class indices ``0 .. n_classes-1``.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).
    n_bins : int, default=10
        Number of confidence bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins; see :func:`reliability_curve`.

    Returns
    -------
    mce : float
        In [0, 1].
    """
    confidence, accuracy, _ = reliability_curve(
        y_true, y_prob, n_bins=n_bins, strategy=strategy
    )
    return float(np.max(np.abs(accuracy - confidence)))


def multiclass_brier_score(y_true, y_prob):
    """Multi-class Brier score: mean over samples of ``sum_c (p_c - 1[y = c])**2``.

    This is Brier's (1950) original score, as in :func:`sklearn.metrics.brier_score_loss`
    with ``scale_by_half=False`` (which it wraps). For a binary problem it is twice the
    familiar binary Brier score ``mean((p_1 - y)**2)``, and it ranges in [0, 2].

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True class indices ``0 .. n_classes-1``.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).

    Returns
    -------
    score : float
        Lower is better.
    """
    y_true, y_prob = _check_classification(y_true, y_prob)
    labels = np.arange(y_prob.shape[1])
    return float(brier_score_loss(y_true, y_prob, labels=labels, scale_by_half=False))


def negative_log_likelihood(y_true, y_prob):
    """Mean negative log predictive probability of the true class, ``mean(-log p_y)``.

    Wraps :func:`sklearn.metrics.log_loss` (probabilities clipped to machine epsilon).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True class indices ``0 .. n_classes-1``.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted probabilities. A 1-D array is the probability of class 1 (binary).

    Returns
    -------
    nll : float
        Lower is better (natural log).
    """
    y_true, y_prob = _check_classification(y_true, y_prob)
    return float(log_loss(y_true, y_prob, labels=np.arange(y_prob.shape[1])))


# --------------------------------------------------------------------------------------
# regression
# --------------------------------------------------------------------------------------


def gaussian_nll(y_true, mean, std, *, multioutput="uniform_average"):
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

    Returns
    -------
    nll : float or ndarray of shape (n_outputs,)
        Lower is better (natural log).
    """
    y_true, mean, std = _check_regression(y_true, mean, std)
    z = (y_true - mean) / std
    values = 0.5 * np.log(2 * np.pi) + np.log(std) + 0.5 * z**2
    return _average(values, multioutput)


def crps_gaussian(y_true, mean, std, *, multioutput="uniform_average"):
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

    Returns
    -------
    crps : float or ndarray of shape (n_outputs,)
        Lower is better.

    References
    ----------
    Gneiting, Raftery. "Strictly proper scoring rules, prediction, and estimation". JASA 2007.
    """
    y_true, mean, std = _check_regression(y_true, mean, std)
    z = (y_true - mean) / std
    values = std * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    return _average(values, multioutput)


def interval_coverage(y_true, mean, std, *, confidence=0.95):
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

    Returns
    -------
    coverage : float
        Fraction of targets within the interval; ``confidence`` when calibrated.
    mean_width : float
        Mean interval width ``2 z std``, in the units of ``y``.
    """
    y_true, mean, std = _check_regression(y_true, mean, std)
    confidence = _check_confidence(confidence)
    half_width = norm.ppf(0.5 + confidence / 2) * std
    inside = (y_true >= mean - half_width) & (y_true <= mean + half_width)
    return float(inside.mean()), float(np.mean(2 * half_width))


def _levels(n_levels):
    n_levels = _check_n(n_levels, "n_levels")
    return (np.arange(n_levels) + 0.5) / n_levels


def regression_calibration_curve(y_true, mean, std, *, n_levels=10):
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

    Returns
    -------
    expected : ndarray of shape (n_levels,)
        The levels ``p_j``.
    observed : ndarray of shape (n_levels,)
        The observed frequencies ``p̂_j``; equal to ``expected`` when calibrated.
    """
    y_true, mean, std = _check_regression(y_true, mean, std)
    expected = _levels(n_levels)
    pit = norm.cdf((y_true - mean) / std).ravel()  # probability integral transform
    observed = (pit[None, :] <= expected[:, None]).mean(axis=1)
    return expected, observed


def regression_calibration_error(y_true, mean, std, *, n_levels=10):
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

    Returns
    -------
    error : float
        Non-negative; lower is better.

    References
    ----------
    Kuleshov, Fenner, Ermon. "Accurate uncertainties for deep learning using calibrated
    regression". ICML 2018 (the calibration error of its diagnostic tools).
    """
    expected, observed = regression_calibration_curve(y_true, mean, std, n_levels=n_levels)
    return float(np.sum((expected - observed) ** 2))


def sharpness(std):
    """Sharpness of predictive distributions: ``sqrt(mean(std**2))``.

    The root-mean predictive variance, as defined in uncertainty-toolbox
    (``uncertainty_toolbox.metrics_calibration.sharpness``); pooled over samples and outputs.
    Smaller is sharper; only meaningful together with a calibration metric.

    Parameters
    ----------
    std : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Predictive standard deviations (> 0).

    Returns
    -------
    sharpness : float
        In the units of ``y``.
    """
    std = np.asarray(std, dtype=float)
    if std.size == 0:
        raise ValueError("std is empty.")
    _check_std(std)
    return float(np.sqrt(np.mean(std**2)))


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
    return est._log_evidence_for_selection()
