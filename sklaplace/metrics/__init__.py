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

from ._classification import (expected_calibration_error, maximum_calibration_error,
                                      multiclass_brier_score, negative_log_likelihood,
                                      per_label_nll, reliability_curve)
from ._regression import (crps_gaussian, gaussian_nll, interval_coverage,
                                  regression_calibration_curve, regression_calibration_error,
                                  sharpness)
from ._scoring import (neg_coverage_error_scorer, neg_crps_scorer, neg_gaussian_nll_scorer,
                       neg_per_label_nll_scorer)
from ..ood import _last_step, ood_detection_metrics, ood_scores

__all__ = [
    "expected_calibration_error",
    "maximum_calibration_error",
    "reliability_curve",
    "multiclass_brier_score",
    "negative_log_likelihood",
    "per_label_nll",
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
    "neg_per_label_nll_scorer",
]


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
