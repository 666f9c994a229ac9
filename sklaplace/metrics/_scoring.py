"""Scorers of probabilistic regression and of multilabel probabilities for
``GridSearchCV(scoring=...)``.

Plain callables ``scorer(estimator, X, y)`` (``make_scorer`` cannot reach
``predict(X, return_std=True)``); importable from :mod:`sklaplace.metrics`.
"""

import numpy as np

from ._classification import per_label_nll
from ._regression import crps_gaussian, gaussian_nll, interval_coverage
from ..ood import _last_step

__all__ = ["neg_gaussian_nll_scorer", "neg_crps_scorer", "neg_coverage_error_scorer",
           "neg_per_label_nll_scorer"]


def _mean_std(estimator, X):
    """``predict(X, return_std=True)`` of a regressor or of a Pipeline ending in one (the
    Pipeline passes ``return_std`` to its last step)."""
    try:
        return estimator.predict(X, return_std=True)
    except TypeError:
        raise ValueError(
            f"{type(_last_step(estimator)).__name__} has no predict(X, return_std=True); "
            "the probabilistic regression scorers need a regressor that returns its "
            "predictive std (e.g. LaplaceRegressor)."
        ) from None


def neg_gaussian_nll_scorer(estimator, X, y, sample_weight=None):
    """Scorer: the negated mean Gaussian negative log-likelihood of ``y``.

    For ``GridSearchCV(reg, grid, scoring=neg_gaussian_nll_scorer)``: it scores the
    held-out fold by :func:`gaussian_nll` of ``estimator.predict(X, return_std=True)``
    (averaged over outputs), negated so that greater is better, as scikit-learn's
    ``"neg_*"`` scorers.

    Parameters
    ----------
    estimator : fitted regressor or Pipeline ending in one
        Needs ``predict(X, return_std=True)`` (a ``LaplaceRegressor``,
        ``GaussianProcessRegressor``, ``BayesianRidge``).
    X : array-like of shape (n_samples, n_features)
        Inputs.
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights.

    Returns
    -------
    score : float
        ``-gaussian_nll(y, mean, std)``; higher is better.

    Notes
    -----
    For ``LaplaceRegressor(model_averaging=True)``, whose predictive is a mixture of
    Gaussians, this is the NLL of the Gaussian with the mixture's mean and total std, not
    of the mixture itself, whose NLL is ``-predict_dist(X).logpdf(y).mean()``.
    """
    mean, std = _mean_std(estimator, X)
    return -gaussian_nll(y, mean, std, sample_weight=sample_weight)


def neg_crps_scorer(estimator, X, y, sample_weight=None):
    """Scorer: the negated mean CRPS of the Gaussian predictive at ``y``.

    :func:`crps_gaussian` of ``estimator.predict(X, return_std=True)`` (averaged over
    outputs), negated so that greater is better; for ``GridSearchCV(scoring=...)``.

    Parameters
    ----------
    estimator : fitted regressor or Pipeline ending in one
        Needs ``predict(X, return_std=True)``.
    X : array-like of shape (n_samples, n_features)
        Inputs.
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights.

    Returns
    -------
    score : float
        ``-crps_gaussian(y, mean, std)``, in the units of ``y``; higher is better.
    """
    mean, std = _mean_std(estimator, X)
    return -crps_gaussian(y, mean, std, sample_weight=sample_weight)


def neg_coverage_error_scorer(estimator, X, y, sample_weight=None, *, confidence=0.95):
    """Scorer: minus the gap between the coverage of the central interval and its level.

    ``-|coverage - confidence|`` with the coverage of :func:`interval_coverage` on
    ``estimator.predict(X, return_std=True)``; 0 is best. For another level pass
    ``functools.partial(neg_coverage_error_scorer, confidence=0.9)``. It says nothing about
    sharpness (infinitely wide intervals that cover 95 % score 0 at 0.95): pair it with a
    proper score such as :func:`neg_gaussian_nll_scorer`.

    Parameters
    ----------
    estimator : fitted regressor or Pipeline ending in one
        Needs ``predict(X, return_std=True)``.
    X : array-like of shape (n_samples, n_features)
        Inputs.
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Targets.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights.
    confidence : float, default=0.95
        Nominal coverage of the interval, in (0, 1).

    Returns
    -------
    score : float
        In [-1, 0]; higher is better.
    """
    mean, std = _mean_std(estimator, X)
    coverage, _ = interval_coverage(y, mean, std, confidence=confidence,
                                    sample_weight=sample_weight)
    return -abs(coverage - confidence)


def neg_per_label_nll_scorer(estimator, X, y, sample_weight=None):
    """Scorer: the negated mean per-label NLL of a multilabel classifier.

    For ``GridSearchCV(clf, grid, scoring=neg_per_label_nll_scorer)`` or
    ``cross_val_score`` on an indicator ``y``: :func:`per_label_nll` of
    ``estimator.predict_proba(X)`` (the binary log loss of each label, averaged over the
    labels and the rows), negated so that greater is better, as scikit-learn's
    ``"neg_*"`` scorers. Its ``"neg_log_loss"`` takes one class per row, not an
    indicator matrix.

    Parameters
    ----------
    estimator : fitted multilabel classifier or Pipeline ending in one
        Its ``predict_proba(X)`` returns each label's probability, shape
        (n_samples, n_labels) (:class:`~sklaplace.LaplaceClassifier`,
        ``MLPClassifier``, ``OneVsRestClassifier``), or a list of one
        (n_samples, 2) array per label (``RandomForestClassifier``,
        ``MultiOutputClassifier``), whose second columns are taken.
    X : array-like of shape (n_samples, n_features)
        Inputs.
    y : array-like of shape (n_samples, n_labels)
        Indicator matrix of 0 and 1, one column per label.
    sample_weight : array-like of shape (n_samples,), default=None
        Row weights.

    Returns
    -------
    score : float
        ``-per_label_nll(y, estimator.predict_proba(X))``; higher is better.
    """
    proba = estimator.predict_proba(X)
    if isinstance(proba, list):  # one (n, 2) array per label: the probability of 1
        proba = np.stack([np.asarray(p)[:, -1] for p in proba], axis=1)
    return -per_label_nll(y, proba, sample_weight=sample_weight)
