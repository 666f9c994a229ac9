"""Acquisition functions of a fitted Laplace estimator: what to label or evaluate next.

Plain functions of a fitted estimator (or a Pipeline ending in one, ``X`` transformed by
the earlier steps) and candidate rows ``X``, numpy in and out, one value per row.

- Active learning (classifiers): :func:`predictive_entropy` (total uncertainty),
  :func:`mutual_information` / :func:`bald` (the epistemic part: the information a label
  would give about the weights).
- Bayesian optimisation (regressors), for **minimisation** as in scikit-optimize:
  :func:`expected_improvement` (the row of largest value next),
  :func:`upper_confidence_bound` (the optimistic bound, mean − κ·std when minimising: the
  row of smallest value next), :func:`thompson_sample` (one function from the posterior,
  jointly over the rows: the row of smallest value next). These speak of the unknown
  function f, so by default they use its posterior, the epistemic std (σ excluded, as
  scikit-optimize's Gaussian process does for its acquisition); ``noise=True`` uses the
  predictive std of an observation instead (σ included, what ``predict(X,
  return_std=True)`` returns).
"""

import numbers

import numpy as np
from scipy.special import entr
from scipy.stats import norm
from sklearn.base import is_regressor

from .ood import _final_step

__all__ = ["predictive_entropy", "mutual_information", "bald", "expected_improvement",
           "upper_confidence_bound", "thompson_sample"]


def _entropies(proba, multilabel):
    """Entropy (nats) along the last axis; multilabel: each label's Bernoulli entropy summed."""
    if multilabel:
        return (entr(proba) + entr(1.0 - proba)).sum(axis=-1)
    return entr(proba).sum(axis=-1)


def _is_multilabel(proba):
    return not np.allclose(proba.sum(axis=-1), 1.0, atol=1e-6)


def predictive_entropy(estimator, X):
    """Entropy of the predictive class probabilities (total uncertainty).

    Parameters
    ----------
    estimator : fitted LaplaceClassifier or Pipeline ending in one
        Any classifier with ``predict_proba`` works too.
    X : array-like of shape (n_samples, n_features)
        Candidate rows.

    Returns
    -------
    entropy : ndarray of shape (n_samples,)
        H[p(y | x)] in nats of ``predict_proba(X)`` (the estimator's ``link_approx``);
        multilabel: the labels' Bernoulli entropies summed.
    """
    est, Xt = _final_step(estimator, X)
    if hasattr(est, "predict_dist") and hasattr(est, "predict_proba"):
        return np.asarray(est.predict_dist(Xt).entropy(), dtype=float)
    proba = np.clip(np.asarray(est.predict_proba(Xt), dtype=float), 0.0, 1.0)
    return _entropies(proba, _is_multilabel(proba))


def mutual_information(estimator, X, n_samples=100, random_state=None):
    """Mutual information between a row's label and the weights (BALD).

    H[E p] − E[H p] over class-probability draws of the posterior
    (``estimator.sample_proba``), both terms from the same draws, so the value is never
    negative. Its expectation is that of the GLM predictive's Monte Carlo link.

    Parameters
    ----------
    estimator : fitted LaplaceClassifier or Pipeline ending in one
        Any classifier with ``sample_proba(X, n_samples, random_state)`` of shape
        (n_samples, n_rows, n_classes).
    X : array-like of shape (n_rows, n_features)
        Candidate rows.
    n_samples : int, default=100
        Number of draws.
    random_state : int, RandomState instance or None, default=None
        Seed of the draws, as in scikit-learn.

    Returns
    -------
    mutual_information : ndarray of shape (n_rows,)
        In nats; multilabel: summed over the labels (each label's own information).

    Raises
    ------
    ValueError
        If the estimator cannot draw class probabilities.
    """
    est, Xt = _final_step(estimator, X)
    if not hasattr(est, "sample_proba"):
        raise ValueError(f"mutual_information needs sample_proba; {type(est).__name__} has "
                         "none (use a fitted LaplaceClassifier).")
    draws = np.asarray(est.sample_proba(Xt, n_samples=n_samples, random_state=random_state),
                       dtype=float)
    multilabel = _is_multilabel(draws)
    value = _entropies(draws.mean(axis=0), multilabel) - _entropies(draws, multilabel).mean(0)
    return np.maximum(value, 0.0)


def bald(estimator, X, n_samples=100, random_state=None):
    """Bayesian active learning by disagreement: :func:`mutual_information`.

    Parameters
    ----------
    estimator : fitted LaplaceClassifier or Pipeline ending in one
        As in :func:`mutual_information`.
    X : array-like of shape (n_rows, n_features)
        Candidate rows.
    n_samples : int, default=100
        Number of draws.
    random_state : int, RandomState instance or None, default=None
        Seed of the draws, as in scikit-learn.

    Returns
    -------
    bald : ndarray of shape (n_rows,)
        The mutual information in nats (the row of largest value to label next).
    """
    return mutual_information(estimator, X, n_samples=n_samples, random_state=random_state)


def _mean_std(estimator, X, noise, what):
    """(mean, std) of one target per row: the function's (epistemic) or, with ``noise``,
    an observation's."""
    est, Xt = _final_step(estimator, X)
    if not is_regressor(est):
        raise ValueError(f"{what} needs a regressor; got {type(est).__name__}.")
    if not isinstance(noise, (bool, np.bool_)):
        raise ValueError(f"noise must be True or False; got {noise!r}.")
    if hasattr(est, "predict_dist"):
        dist = est.predict_dist(Xt)
        mean = np.asarray(dist.mean, dtype=float)
        std = np.asarray(dist.std if noise else np.sqrt(dist.epistemic_var), dtype=float)
    else:  # another regressor: the std its predict(return_std=True) gives
        mean, std = (np.asarray(a, dtype=float) for a in est.predict(Xt, return_std=True))
    if mean.ndim != 1:
        raise ValueError(f"{what} is for one target; this estimator predicts "
                         f"{mean.shape[1]} (select one, or fit one per target).")
    return mean, std


def _check_real(name, value, minimum=None):
    if (not isinstance(value, numbers.Real) or isinstance(value, bool)
            or not np.isfinite(value) or (minimum is not None and value < minimum)):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{name} must be a finite real number{bound}; got {value!r}.")
    return float(value)


def expected_improvement(estimator, X, best, xi=0.0, *, minimize=True, noise=False):
    """Expected improvement over ``best`` (for minimisation, as scikit-optimize's ``EI``).

    E[max(best − xi − f(x), 0)] under the Gaussian posterior of f(x) (mean μ, std s):
    (best − xi − μ)·Φ(z) + s·φ(z), z = (best − xi − μ)/s; at s = 0 the improvement of μ.
    With ``minimize=False``, E[max(f(x) − best − xi, 0)].

    Parameters
    ----------
    estimator : fitted LaplaceRegressor or Pipeline ending in one
        One target. Another regressor is read through ``predict(X, return_std=True)``.
    X : array-like of shape (n_samples, n_features)
        Candidate rows.
    best : float
        The best value observed so far (the smallest when minimising), in the units of y.
    xi : float, default=0.0
        Improvement required beyond ``best`` (larger: more exploration).
    minimize : bool, default=True
        Whether smaller values of y are better.
    noise : bool, default=False
        Whether to use the std of an observation (σ included) instead of that of f.

    Returns
    -------
    ei : ndarray of shape (n_samples,)
        The expected improvement, ≥ 0 (the row of largest value to evaluate next).

    Raises
    ------
    ValueError
        If ``best`` or ``xi`` is not a finite number, or the estimator is no
        single-target regressor.
    """
    best, xi = _check_real("best", best), _check_real("xi", xi)
    mean, std = _mean_std(estimator, X, noise, "expected_improvement")
    gain = (best - xi - mean) if minimize else (mean - best - xi)
    out = np.maximum(gain, 0.0)
    positive = std > 0
    z = gain[positive] / std[positive]
    out[positive] = gain[positive] * norm.cdf(z) + std[positive] * norm.pdf(z)
    return out


def upper_confidence_bound(estimator, X, kappa=1.96, *, minimize=True, noise=False):
    """The optimistic confidence bound: mean − κ·std when minimising (scikit-optimize's ``LCB``).

    "Upper" in the sense of the optimism of a maximisation (mean + κ·std with
    ``minimize=False``): when minimising, the optimistic value is the lower bound, and
    the row to evaluate next is the one of smallest value.

    Parameters
    ----------
    estimator : fitted LaplaceRegressor or Pipeline ending in one
        One target. Another regressor is read through ``predict(X, return_std=True)``.
    X : array-like of shape (n_samples, n_features)
        Candidate rows.
    kappa : float, default=1.96
        Weight of the std, ≥ 0 (larger: more exploration).
    minimize : bool, default=True
        Whether smaller values of y are better: mean − κ·std (pick the smallest), else
        mean + κ·std (pick the largest).
    noise : bool, default=False
        Whether to use the std of an observation (σ included) instead of that of f.

    Returns
    -------
    bound : ndarray of shape (n_samples,)
        The bound, in the units of y.

    Raises
    ------
    ValueError
        If ``kappa`` is negative or not a finite number, or the estimator is no
        single-target regressor.
    """
    kappa = _check_real("kappa", kappa, minimum=0)
    mean, std = _mean_std(estimator, X, noise, "upper_confidence_bound")
    return mean - kappa * std if minimize else mean + kappa * std


def thompson_sample(estimator, X, random_state=None):
    """One function drawn from the posterior, jointly over the rows (Thompson sampling).

    The draw of ``estimator.sample_functions(X, 1, random_state)``: the GLM
    f(x, θ*) + J(x)(θ − θ*) for one θ from the posterior (the variance outside the
    training range drawn jointly too), the same θ for every row, without noise; the
    row of smallest value is Thompson sampling's choice when minimising.

    Parameters
    ----------
    estimator : fitted LaplaceRegressor or Pipeline ending in one
        Any regressor with ``sample_functions``.
    X : array-like of shape (n_samples, n_features)
        Candidate rows.
    random_state : int, RandomState instance or None, default=None
        Seed of the draw, as in scikit-learn.

    Returns
    -------
    sample : ndarray of shape (n_samples,) or (n_samples, n_targets)
        The drawn function at each row, in the units of y.

    Raises
    ------
    ValueError
        If the estimator is no regressor that draws functions.
    """
    est, Xt = _final_step(estimator, X)
    if not (is_regressor(est) and hasattr(est, "sample_functions")):
        raise ValueError(f"thompson_sample needs a LaplaceRegressor; got {type(est).__name__}.")
    draw = np.asarray(est.sample_functions(Xt, n_samples=1, random_state=random_state)[0],
                      dtype=float)
    one_target = np.ndim(est.predict(Xt[:1])) == 1
    return draw[:, 0] if one_target else draw
