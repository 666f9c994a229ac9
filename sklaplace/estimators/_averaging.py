"""``model_averaging=True``: the "auto" candidates' predictives mixed by stacking.

The weights maximise the held-out rows' log-likelihood of the weighted mixture over the
simplex (stacking of predictive distributions, Yao et al. 2018), a concave problem, from
the held-out predictions of the selection pass (:mod:`._selection`: each candidate's GLM
predictive at its tuned hyperparameters; no further held-out fit). With fewer than
``MIN_HELD_OUT_ROWS`` held-out rows the candidates are scored by their evidence
instead, and the weights are the posterior model probabilities under a uniform prior
(Bayesian model averaging). Weights below ``NEGLIGIBLE`` are set to 0 and the rest
renormalized; each candidate of non-zero weight is then refit warm on all rows (as the
chosen one is without averaging) and kept as a fitted estimator of one architecture
(``estimators_``); the estimator's predictions are the weighted mixture of theirs
(:mod:`.distributions._mixture`).
"""

import copy

import numpy as np
import torch
from scipy.optimize import minimize
from scipy.special import softmax
from sklearn.utils import check_random_state

from ..distributions._joint import sample_joint
from ..distributions._mixture import CategoricalMixturePrediction, NormalMixturePrediction

#: Stacking weights below this are set to 0 (that candidate is not refit) and the rest
#: renormalized.
NEGLIGIBLE = 1e-3


def problems(p, continual=False):
    """The rules of ``model_averaging`` (messages; [] if none)."""
    value = p.get("model_averaging", False)
    if not isinstance(value, (bool, np.bool_)):
        return [f"model_averaging must be a bool, got {value!r}."]
    if not value:
        return []
    if continual:  # (partial_fit is unavailable: partial_fit_reasons)
        return ["model_averaging=True averages the candidates of hidden_layer_sizes='auto' "
                "in fit; partial_fit keeps one architecture: use model_averaging=False."]
    sizes = p.get("hidden_layer_sizes")
    several = (isinstance(sizes, str) or isinstance(sizes, (list, tuple)) and len(sizes) > 0
               and all(isinstance(c, (list, tuple)) for c in sizes))
    if p.get("net") is not None or not several:
        return ["model_averaging=True averages the candidate architectures of "
                "hidden_layer_sizes='auto' (or a list of tuples) of the default MLP; "
                f"got net={type(p.get('net')).__name__ if p.get('net') is not None else None} "
                f"and hidden_layer_sizes={sizes!r}."]
    if p.get("noise") == "heteroscedastic":
        return ["model_averaging=True needs noise='homoscedastic' (the heteroscedastic "
                "regressor keeps one architecture)."]
    return []


def partial_fit_reasons(estimator):
    """Why ``partial_fit`` is unavailable ([] if not): it keeps one architecture."""
    return ["model_averaging=True (use False)"] if getattr(estimator, "model_averaging",
                                                           False) is not False else []


def stacking_weights(log_lik, sample_weight=None):
    """The weights w on the simplex maximising Σ_i v_i log Σ_k w_k p_k(y_i | x_i).

    ``log_lik`` (n, K): log p_k(y_i | x_i) of the held-out rows; ``sample_weight`` v
    (None: 1). Concave in w; SLSQP from the uniform weights, in the rows' scaled
    likelihoods (each row divided by its largest).
    """
    log_lik = np.asarray(log_lik, dtype=np.float64)
    n, k = log_lik.shape
    if k == 1:
        return np.ones(1)
    v = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    v = v / v.sum()
    lik = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))

    def objective(w):
        mix = np.maximum(lik @ w, 1e-300)
        return -v @ np.log(mix), -(v / mix) @ lik

    result = minimize(objective, np.full(k, 1.0 / k), jac=True, method="SLSQP",
                      bounds=[(0.0, 1.0)] * k,
                      constraints={"type": "eq", "fun": lambda w: w.sum() - 1.0,
                                   "jac": lambda w: np.ones_like(w)},
                      options={"ftol": 1e-12, "maxiter": 500})
    return _normalized(result.x)


def evidence_weights(log_evidence):
    """Posterior model probabilities under a uniform prior: softmax of the evidences."""
    return _normalized(softmax(np.asarray(log_evidence, dtype=np.float64)))


def _normalized(w):
    w = np.clip(np.asarray(w, dtype=np.float64), 0.0, None)
    w = np.where(w < NEGLIGIBLE * w.sum(), 0.0, w)
    return w / w.sum()


def store(estimator, candidates, weights, results, refit):
    """Refit the candidates of non-zero weight, keep them as ``estimators_`` and store the
    one of largest weight as the estimator's own fit (``net_``, ``laplace_`` …).

    ``candidates``: (sizes, selection-pass fit) per row of ``results`` (None where
    skipped); ``refit(sizes, fit)`` → the fit on all rows.
    """
    fits, subs = [], []
    for (sizes, fit), w in zip(candidates, weights):
        if w > 0:
            fits.append(refit(sizes, fit))
            sub = copy.copy(estimator)
            sub.hidden_layer_sizes, sub.model_averaging = tuple(sizes), False
            sub._store(*fits[-1])
            sub.hidden_layer_sizes_ = tuple(sizes)
            if hasattr(sub, "_record_scaling"):
                sub._record_scaling()
            subs.append(sub)
    kept = weights[weights > 0]
    top = int(np.argmax(kept))
    estimator._store(*fits[top])
    estimator.hidden_layer_sizes_ = subs[top].hidden_layer_sizes_
    estimator.model_selection_results_ = results
    estimator.model_weights_, estimator.estimators_ = weights, subs
    return estimator


def averaged(estimator):
    """Whether ``estimator`` is a fit with ``model_averaging=True``."""
    return "estimators_" in estimator.__dict__


def refuse(estimator, what):
    """Raise a ValueError naming ``model_averaging`` where ``what`` of a single model has
    no meaning for the mixture."""
    if averaged(estimator):
        raise ValueError(
            f"{what} is not available for a fit with model_averaging=True: it belongs to one "
            "network, and the predictive is a mixture of several (estimators_, with the "
            "weights model_weights_). Use estimators_[k] for one candidate, or refit with "
            "model_averaging=False.")


def _kept_weights(estimator):
    return estimator.model_weights_[estimator.model_weights_ > 0]


def proba(estimator, X):
    """The classifier's mixture Σ_k w_k p_k."""
    return sum(w * sub.predict_proba(X)
               for w, sub in zip(_kept_weights(estimator), estimator.estimators_))


def classifier_dist(estimator, X):
    """The classifier's :class:`CategoricalMixturePrediction`."""
    return CategoricalMixturePrediction(tuple(sub.predict_dist(X)
                                              for sub in estimator.estimators_),
                                        _kept_weights(estimator))


def regressor_dist(estimator, X):
    """The regressor's :class:`NormalMixturePrediction`."""
    moments = [sub._output_moments(X) for sub in estimator.estimators_]
    return NormalMixturePrediction(*(np.stack([m[i] for m in moments], axis=-1)
                                     for i in range(3)), _kept_weights(estimator))


def regressor_gradients(estimator, X, return_std, return_std_grad):
    """``predict(X, return_mean_grad=True[, return_std_grad=True])`` of the mixture: with
    v = Σ_k w_k (σ_k² + μ_k²) − μ², ∇μ = Σ_k w_k ∇μ_k and ∇σ = ∇v / (2σ), from each
    candidate's own gradients; the mean and std are ``predict``'s."""
    mean, std = estimator.predict(X, return_std=True)
    w = _kept_weights(estimator)
    parts = [sub.predict(X, return_std=True, return_mean_grad=True, return_std_grad=True)
             for sub in estimator.estimators_]
    one = len(mean) == 1  # (one row: its gradient alone, as scikit-optimize expects)
    mu, grad_mean, grad_second = 0.0, 0.0, 0.0
    for w_k, (m, s, gm, gs) in zip(w, parts):
        gm, gs = (gm[None], gs[None]) if one else (gm, gs)
        mu = mu + w_k * m
        grad_mean = grad_mean + w_k * gm
        grad_second = grad_second + w_k * 2 * (s[..., None] * gs + m[..., None] * gm)
    grad_std = (grad_second - 2 * mu[..., None] * grad_mean) / (2 * std[..., None])
    if one:
        grad_mean, grad_std = grad_mean[0], grad_std[0]
    out = (mean,) + ((std,) if return_std else ()) + (grad_mean,)
    return out + ((grad_std,) if return_std_grad else ())


def regressor_joint(estimator, X):
    """The mixture's joint mean (n, C) and covariance (n, C, n, C) over the rows of ``X``:
    Σ_k w_k (C_k + μ_k μ_kᵀ) − μ μᵀ, in the units of y."""
    w = _kept_weights(estimator)
    mean = second = 0.0
    for w_k, sub in zip(w, estimator.estimators_):
        m, c = sub._joint_moments()(sub, X)
        mean = mean + w_k * m
        second = second + w_k * (c + np.einsum("ic,jd->icjd", m, m))
    return mean, second - np.einsum("ic,jd->icjd", mean, mean)


def regressor_sample_y(estimator, X, n_samples, random_state):
    """Joint draws of y from the mixture: each draw's candidate by its weight, then that
    candidate's joint predictive over all rows (``sample_y``'s shapes)."""
    rng = check_random_state(random_state)
    counts = rng.multinomial(n_samples, _kept_weights(estimator))
    draws = [sample_joint(sub, X, int(c), rng, sub._joint_moments())
             for sub, c in zip(estimator.estimators_, counts) if c]
    draws = np.concatenate(draws, axis=-1)
    return draws[..., rng.permutation(n_samples)]  # the candidates' draws interleaved


def function_samples(estimator, X, n_samples, rng):
    """Function draws of the mixture (model units, (n_samples, n_rows, n_outputs)): each
    draw's candidate by its weight, then a draw of that candidate's posterior."""
    counts = rng.multinomial(n_samples, _kept_weights(estimator))
    draws = [sub._function_samples(X, int(c), rng.randint(0, 2**31 - 1))
             for sub, c in zip(estimator.estimators_, counts) if c]
    order = torch.as_tensor(rng.permutation(n_samples), device=draws[0].device)
    return torch.cat(draws)[order]  # the candidates' draws interleaved
