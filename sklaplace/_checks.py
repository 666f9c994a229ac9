"""Argument checks shared by the public functions and the distributions' methods:
confidence levels and numbers of draws (:mod:`sklaplace.distributions`), and the
metrics' labels, probabilities, regression predictions, sample weights and
multi-output averaging (:mod:`sklaplace.metrics`, :mod:`sklaplace.ood`)."""

import numbers
import warnings
from numbers import Integral, Real

import numpy as np

_STRATEGIES = ("uniform", "quantile")
_MULTIOUTPUT = ("uniform_average", "raw_values")


def _check_confidence(confidence):
    if not isinstance(confidence, Real) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}.")
    return float(confidence)


def _check_n_samples(n_samples):
    if not isinstance(n_samples, Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")
    return int(n_samples)


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
            f"y_true must be 1-D labels of shape (n_samples,); got shape {y_true.shape}"
            + (". A multilabel indicator matrix is scored label by label: pass y_true[:, l] "
               "and y_prob[:, l] (each label a binary problem)."
               if y_true.ndim == 2 and y_true.shape[1] > 1 else ".")
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
