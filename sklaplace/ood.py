"""Out-of-distribution detection: scores from a fitted estimator, their metrics, and a
detector in scikit-learn's outlier API.

Kept apart from :mod:`sklaplace.metrics` (pure functions of arrays) because
:func:`ood_scores` calls an estimator; both functions are also importable from
``sklaplace.metrics``.
"""

import math
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, OutlierMixin, _fit_context, is_classifier, is_regressor
from sklearn.frozen import FrozenEstimator
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._checks import _check_sample_weight
from ._multilabel import MultilabelPrediction, label_entropy
from .distributions import _entropy

__all__ = ["ood_scores", "ood_detection_metrics", "LaplaceOODDetector"]

OOD_SCORE_KINDS = (
    "max_proba",
    "entropy",
    "mutual_information",
    "dirichlet_precision",
    "std",
)


def _unfrozen(estimator):
    """The estimator inside (nested) ``FrozenEstimator`` wrappers."""
    while isinstance(estimator, FrozenEstimator):
        estimator = estimator.estimator
    return estimator


def _last_step(estimator):
    """The Laplace estimator itself, or the last step of a Pipeline (unfrozen)."""
    estimator = _unfrozen(estimator)
    return _unfrozen(estimator[-1]) if isinstance(estimator, Pipeline) else estimator


def _final_step(estimator, X):
    """``(last estimator, X transformed by the preceding steps)`` for Pipelines."""
    estimator = _unfrozen(estimator)
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
        - Multilabel (a ``MultilabelPrediction``, or ``predict_proba`` rows that do not
          sum to one): ``"max_proba"`` is ``1 - mean_l max(p_l, 1 - p_l)``, the entropy
          and the mutual information are summed over the labels, and
          ``"dirichlet_precision"`` is refused.
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
            return _one_minus_confidence(np.asarray(dist.proba(), dtype=float),
                                         isinstance(dist, MultilabelPrediction))
        if kind == "entropy":
            return np.asarray(dist.entropy(), dtype=float)
        if kind == "mutual_information":
            return np.asarray(dist.mutual_information(), dtype=float)
        alpha = np.asarray(dist.dirichlet().alpha, dtype=float)
        return -np.log(alpha.sum(axis=1))

    if kind in ("max_proba", "entropy") and hasattr(est, "predict_proba"):
        proba = np.clip(np.asarray(est.predict_proba(Xt), dtype=float), 0.0, 1.0)
        multilabel = not np.allclose(proba.sum(axis=1), 1.0, atol=1e-6)
        if kind == "max_proba":
            return _one_minus_confidence(proba, multilabel)
        return label_entropy(proba) if multilabel else _entropy(proba)
    raise ValueError(
        f"kind={kind!r} needs an estimator with predict_dist (a Laplace estimator); "
        f"{name} has none."
    )


def _one_minus_confidence(proba, multilabel):
    """1 − the confidence of each row: max_c p_c, or per label max(p, 1 − p) averaged."""
    if multilabel:
        return 1.0 - np.maximum(proba, 1.0 - proba).mean(axis=1)
    return 1.0 - proba.max(axis=1)


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
    weight = _check_sample_weight(sample_weight, y_ood.shape[0])
    y_ood = y_ood.astype(int)
    fpr, tpr, _ = roc_curve(y_ood, scores, drop_intermediate=False, sample_weight=weight)
    return {
        "auroc": float(roc_auc_score(y_ood, scores, sample_weight=weight)),
        "aupr": float(average_precision_score(y_ood, scores, sample_weight=weight)),
        "fpr_at_95_tpr": float(fpr[np.argmax(tpr >= 0.95)]),
    }




class LaplaceOODDetector(OutlierMixin, BaseEstimator):
    """Out-of-distribution detector around a fitted Laplace estimator (outlier API).

    It turns an OOD score of :func:`ood_scores` into a detector like
    :class:`~sklearn.ensemble.IsolationForest`: ``fit`` takes held-out in-distribution
    rows and sets the threshold ``offset_`` so that a fraction ``target_fpr`` of
    in-distribution rows is flagged; ``predict`` returns +1 (inlier) or -1 (outlier).

    The wrapped estimator must be fitted already and is never refitted, nor cloned:
    ``clone(detector)`` (and hence ``GridSearchCV`` or ``cross_val_score`` over the detector)
    keeps the same fitted estimator, as :class:`~sklearn.frozen.FrozenEstimator` does.
    Setting its nested parameters (``estimator__...``) changes that estimator in place
    without refitting it: do not.

    Parameters
    ----------
    estimator : fitted LaplaceClassifier, LaplaceRegressor or Pipeline ending in one
        Gives the scores through :func:`ood_scores` (the Pipeline's earlier steps transform
        ``X``). Other fitted estimators work for the scores :func:`ood_scores` can compute
        without ``predict_dist`` (``"max_proba"``, ``"entropy"``, ``"std"``).
    score : {"auto", "max_proba", "entropy", "mutual_information", \
            "dirichlet_precision", "std"}, default="auto"
        The uncertainty that decides; see :func:`ood_scores`. ``"auto"``: the mutual
        information (``"mutual_information"``, the epistemic part) for a classifier, the
        predictive std (``"std"``) for a regressor. Confidence and entropy also grow where
        classes overlap and saturate far from the data (a tanh or ReLU net is confident
        there); the mutual information measures what the Laplace posterior adds.
    target_fpr : float, default=0.05
        Fraction of in-distribution rows to flag (the false-positive rate), in (0, 1).

    Attributes
    ----------
    score_ : str
        The score used (``score`` with ``"auto"`` resolved).
    offset_ : float
        Threshold on :meth:`score_samples`: rows scoring below it are outliers. It is the
        k-th smallest score of the ``n`` fit rows with ``k = floor(target_fpr * (n + 1))``,
        so a fresh in-distribution row (exchangeable with the fit rows) is flagged with
        probability ``k / (n + 1) <= target_fpr`` (split-conformal), and ``k - 1`` fit rows
        are flagged.
    n_fit_rows_ : int
        Number of rows the threshold was set on.

    See Also
    --------
    sklaplace.metrics.ood_scores : The scores, with the opposite sign (higher = more OOD).
    sklaplace.metrics.ood_detection_metrics : Threshold-free AUROC / AUPR of the scores.
    sklearn.ensemble.IsolationForest : The same API for unsupervised outlier detection.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_iris
    >>> from sklaplace import LaplaceClassifier
    >>> from sklaplace.ood import LaplaceOODDetector
    >>> X, y = load_iris(return_X_y=True)
    >>> rng = np.random.RandomState(0)
    >>> order = rng.permutation(len(X))
    >>> train, held_out = order[:100], order[100:]
    >>> clf = LaplaceClassifier(max_epochs=50, hyperparameter_tuning="evidence",
    ...                         random_state=0).fit(X[train], y[train])
    >>> detector = LaplaceOODDetector(clf, target_fpr=0.1).fit(X[held_out])
    >>> detector.predict(X[held_out][:3] + 100.0).tolist()  # far from the data
    [-1, -1, -1]
    """

    _parameter_constraints = {
        "estimator": [HasMethods(["predict"])],
        "score": [StrOptions({"auto", *OOD_SCORE_KINDS})],
        "target_fpr": [Interval(Real, 0, 1, closed="neither")],
    }

    def __init__(self, estimator, *, score="auto", target_fpr=0.05):
        self.estimator = estimator
        self.score = score
        self.target_fpr = target_fpr

    def __sklearn_clone__(self):
        # Keep the fitted estimator (cloning it would unfit it); drop this fit.
        return type(self)(self.estimator, score=self.score, target_fpr=self.target_fpr)

    def _resolved_score(self):
        if self.score != "auto":
            return self.score
        final = _last_step(self.estimator)
        if is_classifier(final):
            return "mutual_information"
        if is_regressor(final):
            return "std"
        raise ValueError(
            f"score='auto' needs a classifier or a regressor; {type(final).__name__} is "
            f"neither. Pass one of {OOD_SCORE_KINDS}."
        )

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y=None):
        """Set the threshold on held-out in-distribution rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            In-distribution rows the estimator was not trained on (a held-out split): on
            training rows the estimator is more confident than on new ones, and the
            threshold would flag too few.
        y : None
            Ignored.

        Returns
        -------
        self : LaplaceOODDetector
            The fitted detector.

        Raises
        ------
        ValueError
            If ``X`` has fewer than ``ceil(1 / target_fpr) - 1`` rows (no row could be
            flagged), or the estimator cannot give the score.
        sklearn.exceptions.NotFittedError
            If the wrapped estimator is not fitted.
        """
        check_is_fitted(_last_step(self.estimator))
        self.score_ = self._resolved_score()
        scores = np.sort(-ood_scores(self.estimator, X, kind=self.score_))
        n_rows = scores.shape[0]
        k = math.floor(self.target_fpr * (n_rows + 1) + 1e-9)
        if k < 1:
            raise ValueError(
                f"target_fpr={self.target_fpr} needs at least "
                f"{math.ceil(1 / self.target_fpr - 1e-9) - 1} in-distribution rows in fit; "
                f"got {n_rows}."
            )
        self.offset_ = float(scores[k - 1])
        self.n_fit_rows_ = n_rows
        return self

    def score_samples(self, X):
        """Normality of each row: higher is more in-distribution (``-ood_scores``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs.

        Returns
        -------
        scores : ndarray of shape (n_samples,)
            ``-ood_scores(estimator, X, kind=score_)``, e.g. ``max_c p_c - 1`` for
            ``"max_proba"`` or ``-std`` for ``"std"``.
        """
        check_is_fitted(self)
        return -ood_scores(self.estimator, X, kind=self.score_)

    def decision_function(self, X):
        """Score relative to the threshold: negative for outliers.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs.

        Returns
        -------
        decision : ndarray of shape (n_samples,)
            ``score_samples(X) - offset_``.
        """
        return self.score_samples(X) - self.offset_

    def predict(self, X):
        """Whether each row is in distribution (+1) or out of distribution (-1).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs.

        Returns
        -------
        is_inlier : ndarray of shape (n_samples,)
            +1 where ``decision_function(X) >= 0``, else -1.
        """
        return np.where(self.decision_function(X) < 0, -1, 1)
