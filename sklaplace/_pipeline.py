"""``predict_dist`` through a Pipeline."""

from .ood import _final_step

__all__ = ["predict_dist"]


def predict_dist(estimator, X):
    """Predictive distribution of a Laplace estimator, or of a Pipeline ending in one.

    For a Pipeline, ``X`` is transformed by every step but the last, then the last step's
    ``predict_dist`` is called: ``pipe[-1].predict_dist(pipe[:-1].transform(X))``.

    Parameters
    ----------
    estimator : fitted LaplaceClassifier, LaplaceRegressor or Pipeline ending in one
        Also inside a :class:`~sklearn.frozen.FrozenEstimator`.
    X : array-like of shape (n_samples, n_features)
        Inputs (of the Pipeline's first step).

    Returns
    -------
    dist : NormalPrediction or LogitGaussianPrediction
        What the estimator's ``predict_dist`` returns.

    Raises
    ------
    ValueError
        If the (last) estimator has no ``predict_dist``.
    """
    final, Xt = _final_step(estimator, X)
    if not hasattr(final, "predict_dist"):
        raise ValueError(
            f"{type(final).__name__} has no predict_dist; predict_dist needs a Laplace "
            "estimator (or a Pipeline ending in one)."
        )
    return final.predict_dist(Xt)
