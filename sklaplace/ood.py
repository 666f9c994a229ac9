"""Out-of-distribution detection: scores from a fitted estimator and their metrics.

Kept apart from :mod:`sklaplace.metrics` (pure functions of arrays) because
:func:`ood_scores` calls an estimator; both names are also importable from
``sklaplace.metrics``.
"""

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from sklearn.pipeline import Pipeline

from .distributions import _entropy

__all__ = ["ood_scores", "ood_detection_metrics"]

OOD_SCORE_KINDS = (
    "max_proba",
    "entropy",
    "mutual_information",
    "dirichlet_precision",
    "std",
)


def _last_step(estimator):
    """The Laplace estimator itself, or the last step of a Pipeline."""
    return estimator[-1] if isinstance(estimator, Pipeline) else estimator


def _final_step(estimator, X):
    """``(last estimator, X transformed by the preceding steps)`` for Pipelines."""
    if isinstance(estimator, Pipeline) and len(estimator) > 1:
        X = estimator[:-1].transform(X)
    return _last_step(estimator), X


def ood_scores(estimator, X, *, kind="max_proba"):
    """Out-of-distribution scores: higher means more likely out of distribution.

    Parameters
    ----------
    estimator : fitted estimator or Pipeline
        A fitted ``LaplaceClassifier`` / ``LaplaceRegressor``, or a Pipeline ending in one
        (``X`` is transformed by the earlier steps). Estimators without ``predict_dist`` (e.g.
        a plain MAP baseline) are accepted for ``"max_proba"`` and ``"entropy"`` (through
        ``predict_proba``) and ``"std"`` (through ``predict(X, return_std=True)``).
    X : array-like of shape (n_samples, n_features)
        Inputs.
    kind : {"max_proba", "entropy", "mutual_information", "dirichlet_precision", "std"}, \
            default="max_proba"
        - ``"max_proba"``: ``1 - max_c p_c`` of ``predict_dist(X).proba()``.
        - ``"entropy"``: entropy of the predictive (total uncertainty), in nats.
        - ``"mutual_information"``: mutual information between label and weights
          (epistemic uncertainty).
        - ``"dirichlet_precision"``: ``-log(alpha_0)``, with ``alpha_0 = sum_c alpha_c`` the
          precision of the Laplace-bridge Dirichlet (low precision = OOD).
        - ``"std"`` (regressors): predictive standard deviation, averaged over outputs for
          multi-output targets.

    Returns
    -------
    scores : ndarray of shape (n_samples,)
        Use with :func:`ood_detection_metrics`, in-distribution labelled 0 and OOD 1.

    Raises
    ------
    ValueError
        If ``kind`` is unknown or the estimator cannot give it (e.g. ``"std"``
        of a classifier, ``"mutual_information"`` without ``predict_dist``).
    """
    if kind not in OOD_SCORE_KINDS:
        raise ValueError(f"kind must be one of {OOD_SCORE_KINDS}; got {kind!r}.")
    est, Xt = _final_step(estimator, X)
    name = type(est).__name__
    has_dist = hasattr(est, "predict_dist")

    if kind == "std":
        if has_dist:
            dist = est.predict_dist(Xt)
            if not hasattr(dist, "std"):
                raise ValueError(
                    f"kind='std' needs a regressor; {name}.predict_dist returns no `std`. "
                    f"For classifiers use one of {OOD_SCORE_KINDS[:-1]}."
                )
            std = np.asarray(dist.std, dtype=float)
        else:
            try:
                _, std = est.predict(Xt, return_std=True)
            except TypeError:
                raise ValueError(
                    f"kind='std' needs predict_dist or predict(X, return_std=True); {name} "
                    "has neither."
                ) from None
            std = np.asarray(std, dtype=float)
        return std.mean(axis=1) if std.ndim == 2 else std

    if has_dist:
        dist = est.predict_dist(Xt)
        if not hasattr(dist, "proba"):
            raise ValueError(
                f"kind={kind!r} needs a classifier; {name}.predict_dist has no `proba`. "
                "For regressors use kind='std'."
            )
        if kind == "max_proba":
            return 1.0 - np.asarray(dist.proba(), dtype=float).max(axis=1)
        if kind == "entropy":
            return np.asarray(dist.entropy(), dtype=float)
        if kind == "mutual_information":
            return np.asarray(dist.mutual_information(), dtype=float)
        alpha = np.asarray(dist.dirichlet().alpha, dtype=float)
        return -np.log(alpha.sum(axis=1))

    if kind in ("max_proba", "entropy") and hasattr(est, "predict_proba"):
        proba = np.asarray(est.predict_proba(Xt), dtype=float)
        return 1.0 - proba.max(axis=1) if kind == "max_proba" else _entropy(np.clip(proba, 0.0, 1.0))
    raise ValueError(
        f"kind={kind!r} needs an estimator with predict_dist (a Laplace estimator); "
        f"{name} has none."
    )


def ood_detection_metrics(y_ood, scores, *, sample_weight=None):
    """Threshold-free OOD-detection metrics, with OOD as the positive class.

    Parameters
    ----------
    y_ood : array-like of shape (n_samples,)
        1 for out-of-distribution samples, 0 for in-distribution ones.
    scores : array-like of shape (n_samples,)
        OOD scores, higher = more likely OOD (e.g. from :func:`ood_scores`).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights, passed to scikit-learn's curves; integer weights equal repeated
        rows.

    Returns
    -------
    metrics : dict
        - ``"auroc"``: :func:`sklearn.metrics.roc_auc_score`.
        - ``"aupr"``: :func:`sklearn.metrics.average_precision_score` (OOD positive).
        - ``"fpr_at_95_tpr"``: the false-positive rate at the first threshold (scanning
          from high to low scores) where the true-positive rate reaches 0.95, from
          :func:`sklearn.metrics.roc_curve` with all thresholds kept. Lower is better.

    Raises
    ------
    ValueError
        If ``y_ood`` and ``scores`` are not 1-D of equal length, ``y_ood`` does not
        hold both 0 and 1 (and nothing else), or a score is not finite.
    """
    y_ood = np.asarray(y_ood)
    scores = np.asarray(scores, dtype=float)
    if y_ood.ndim != 1 or scores.ndim != 1 or y_ood.shape != scores.shape:
        raise ValueError(
            "y_ood and scores must be 1-D arrays of equal length; got shapes "
            f"{y_ood.shape} and {scores.shape}."
        )
    if not np.all(np.isin(y_ood, (0, 1))) or np.unique(y_ood).size != 2:
        raise ValueError(
            "y_ood must contain both 0 (in-distribution) and 1 (out-of-distribution) and "
            "nothing else."
        )
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite.")
    from .metrics import _check_sample_weight  # metrics imports this module

    weight = _check_sample_weight(sample_weight, y_ood.shape[0])
    y_ood = y_ood.astype(int)
    fpr, tpr, _ = roc_curve(y_ood, scores, drop_intermediate=False, sample_weight=weight)
    return {
        "auroc": float(roc_auc_score(y_ood, scores, sample_weight=weight)),
        "aupr": float(average_precision_score(y_ood, scores, sample_weight=weight)),
        "fpr_at_95_tpr": float(fpr[np.argmax(tpr >= 0.95)]),
    }


