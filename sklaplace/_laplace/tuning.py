"""The tuners of δ (and σ) after the curvature: the evidence, and held-out NLL.

Each returns a :class:`~.hyperparameters.Hyperparameters` (whole-net δ, model-units σ)
and writes nowhere:

- :func:`by_evidence`: bounded maximisation of the Laplace log evidence over the
  free values of ``prior_structure`` (:class:`~.prior.PriorGroups`), σ bounded by
  the targets' spread;
- :func:`by_held_out`: one scalar δ (and σ) by the held-out NLL of the predictive
  over the grid of :mod:`.holdout` (one-SE rule, broad side), the variances of every
  δ at once, by chunks of held-out rows within a memory budget
  (:func:`~.holdout.held_out_chunks`: per-layer factors for a Kronecker posterior
  over nn.Linear layers, else one set of Jacobians per chunk);
- :func:`by_held_out_refined`: the same for the *refined* predictive, one refinement
  per decade of δ.

The classifier's NLL of held-out labels depends on its link: ``scorers`` is the pair
(NLL of GLM moments, NLL of logit draws) the estimator gives.
"""

import functools

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from . import holdout, progress
from .curvature import noise_power
from .evidence import maximize_evidence
from .fitted import fill_rows, generator
from .holdout import (LOG10_PRIOR_GRID, held_out_chunks, one_standard_error_choice,
                      warn_at_grid_bound)
from .hyperparameters import (SIGMA_FLOOR, Hyperparameters, sigma_floor, target_unit,
                              weighted_spread)
from .prior import PriorGroups, subset_prior


def by_evidence(evidence, subset, prior_structure, prior_precision, sigma, y_model,
                sample_weight=None, spread=None, heads=None, head_log_scale=None):
    """Bounded maximisation of the evidence from ``prior_precision`` (whole net) and σ
    (a tensor, or None for a classifier): the :class:`Hyperparameters` at the optimum.
    ``spread``: the targets' std per output, where ``y_model`` is not in memory;
    ``heads``: the groups of ``prior_structure`` split by output head (:class:`PriorGroups`),
    ``head_log_scale`` ({head: log s}) the heads whose δ is searched within s times the
    bounds."""
    groups = PriorGroups(prior_structure, subset, heads)
    offset = None
    if heads is not None and head_log_scale:
        offset = np.array([head_log_scale.get(h, 0.0) for h in groups.head_of_groups(heads)])
    log0 = groups.log_start(subset_prior(prior_precision, subset)).numpy()
    log_sigma0 = floor = ceiling = None
    if evidence.gaussian:
        log_sigma0 = np.log(sigma.cpu().numpy())
        # the scale of σ: the targets' spread (1 for a constant target, as TargetScale's),
        # or the MAP's residuals where they are larger (a constant task after another)
        if spread is None:
            spread = weighted_spread(np.asarray(y_model).reshape(len(y_model), -1),
                                     sample_weight, axis=0)
        rms = np.sqrt(evidence.sse.cpu().numpy() / evidence.n_rows)
        spread = np.maximum(target_unit(spread), rms)
        floor, ceiling = SIGMA_FLOOR * spread, 10 * spread
        if sigma.dim() == 0:
            floor, ceiling = floor.mean(), ceiling.max()
    log_delta, log_sigma = maximize_evidence(evidence, log0, groups.expand, log_sigma0, floor,
                                             sigma_ceiling=ceiling, log_offset=offset)
    if evidence.gaussian:
        sigma = torch.as_tensor(np.exp(log_sigma), dtype=torch.float64)
    return Hyperparameters.of(groups.to_whole(np.exp(log_delta), prior_precision), sigma)


def _at_prior(posterior, delta, s):
    """``posterior`` at a scalar prior precision ``delta`` and curvature scale ``s``."""
    return posterior.with_prior(torch.tensor(float(delta), dtype=torch.float64),
                                torch.tensor(float(s), dtype=torch.float64))


def _scaled_moments(mean, v, c_of, sigma):
    """GLM held-out moments at σ: the mean and c(σ)·v (:func:`_held_out_gaussian`)."""
    return mean, c_of(sigma) * v


def _draw_outputs(posterior, subset, X, n_samples, seed):
    """The net at θ* + ε on ``X`` for the n_samples draws ε ~ N(0, Σ) of the prediction
    seed (the draws ``predict`` makes with ``pred_type="nn"``): (S, n, C)."""
    eps = posterior.sample(n_samples, generator(seed))
    return torch.stack([subset.forward(X, subset.theta + e) for e in eps])


def _sampled_moments(subset, X, eps, c_of, sigma):
    """Mean and variance (flattened, numpy) of the net at θ* + √c(σ)·ε₁ over the draws."""
    root = np.sqrt(c_of(sigma))
    samples = torch.stack([subset.forward(X, subset.theta + root * e) for e in eps])
    var = samples.var(0, correction=int(len(eps) > 1))
    return samples.mean(0).cpu().numpy().ravel(), var.cpu().numpy().ravel()


#: Newton steps at most after the bounded search of σ (GLM moments); they stop once a step
#: moves log σ by at most this many ulps.
SIGMA_NEWTON_STEPS = 8
SIGMA_NEWTON_ULPS = 4


def _stationary_log_sigma(t, bounds, y, weight, mean, v, c1, power):
    """Newton steps on t = log σ from the bounded search's result to the stationary point of
    the held-out NLL of the GLM moments, var(t) = c1·v·e^(p·t) + e^(2t) (c(σ) = c1·σᵖ).

    The search stops within its ``xatol``, where the rounding of the moments (their sums'
    order: chunks of rows, the CPU's kernels) decides the point; the stationary point is
    a function of the moments alone. A step that would leave the bounds, or a curvature
    that is not positive, keeps the search's t (an optimum at a bound)."""
    r2, w = (y - mean) ** 2, np.ones_like(y) if weight is None else weight
    for _ in range(SIGMA_NEWTON_STEPS):
        a, b = c1 * v * np.exp(power * t), np.exp(2 * t)
        var, d1, d2 = a + b, power * a + 2 * b, power**2 * a + 4 * b
        l1, l2 = 0.5 * (1 / var - r2 / var**2), 0.5 * (2 * r2 / var**3 - 1 / var**2)
        grad, curv = w @ (l1 * d1), w @ (l2 * d1**2 + l1 * d2)
        if not curv > 0 or not bounds[0] <= t - grad / curv <= bounds[1]:
            return t
        t, step = t - grad / curv, grad / curv
        if abs(step) <= SIGMA_NEWTON_ULPS * np.spacing(max(1.0, abs(t))):
            break
    return t


def _moments_by_chunks(subset, posterior, X):
    """``subset.moments(X, posterior)`` by chunks of rows whose buffers (the subset's
    ``row_bytes``) fit :data:`~.holdout.MANY_BYTES`: (f (n, C), J Σ Jᵀ (n, C, C))."""
    n_out = subset.forward(X[:1]).shape[-1]
    size = max(1, holdout.MANY_BYTES // subset.row_bytes(n_out, True, posterior))
    out = None
    for start in range(0, len(X), size):
        rows = slice(start, min(start + size, len(X)))
        out = fill_rows(out, subset.moments(X[rows], posterior), rows, len(X))
    return out


def _held_out_gaussian(moments, y, floor, weight=None, polish=None):
    """Per-cell held-out Gaussian NLL at the best σ (bounded 1-D search, then ``polish(t,
    bounds, y, weight)`` where given); ``moments(σ)`` gives the predictive mean and
    epistemic variance (flattened); (losses (n·C,), σ)."""
    y = y.cpu().numpy().ravel()

    def losses(log_sigma):
        sigma = np.exp(log_sigma)
        mean, v = moments(sigma)
        var = v + sigma**2
        return 0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)

    r2 = (y - moments(floor)[0]) ** 2
    upper = np.log(10 * max(np.sqrt(np.average(r2, weights=weight)), floor))
    total = (lambda t: losses(t).sum()) if weight is None else (lambda t: losses(t) @ weight)
    bounds = (np.log(floor), upper)
    t = minimize_scalar(total, bounds=bounds, method="bounded", options={"xatol": 1e-6}).x
    if polish is not None:
        t = polish(t, bounds, y, weight)
    return losses(t), float(np.exp(t))


def grid_losses(evidence, posterior, subset, Xv, yv, scorers, *, sampled=False,
                n_samples=None, seed=None):
    """(the δ grid, held-out NLL per δ and row (K, n)) of a classifier's predictive of
    ``posterior`` (its curvature, without prior) on (Xv, yv): the GLM moments of every δ
    from one pass of Jacobians, or with ``sampled`` the net at the same draws for each
    whole decade of the grid. What :func:`by_held_out` chooses from (and the dask fit's
    held-out rows, partition by partition)."""
    deltas = 10.0 ** (LOG10_PRIOR_GRID[::4] if sampled else LOG10_PRIOR_GRID)
    nll, nll_of_samples = scorers
    scale = float(evidence.scale(None))
    with torch.no_grad():
        if sampled:
            losses = [nll_of_samples(_draw_outputs(_at_prior(posterior, d, scale), subset,
                                                   Xv, n_samples, seed), yv)
                      for d in deltas]
        else:
            losses = np.empty((len(deltas), len(Xv)))
            for rows, f, covs in held_out_chunks(posterior, subset, Xv, deltas, scale):
                for k, cov in enumerate(covs):
                    losses[k, rows] = nll(f, cov, yv[rows])
    return deltas, np.asarray(losses)


def by_held_out(evidence, posterior, subset, Xv, yv, w_val, y_model, w_fit, sigma, *,
                sampled, n_samples, seed, scorers=None):
    """Scalar δ (and σ) by held-out NLL over the grid (one-SE rule, broad side) of the
    predictive of ``posterior`` (its curvature, without prior); (Hyperparameters, the
    chosen held-out NLL). ``sigma``: the classifier's σ (kept).

    ``sampled`` (``pred_type="nn"``) scores the sampled net over the whole decades of
    the grid, the same draws z for every δ (common random numbers). With row weights
    the held-out NLL and its standard error are those of the rows duplicated by their
    weights (weighted means, Σ w rows)."""
    deltas = 10.0 ** (LOG10_PRIOR_GRID[::4] if sampled else LOG10_PRIOR_GRID)
    with torch.no_grad():
        if not evidence.gaussian:
            deltas, losses = grid_losses(evidence, posterior, subset, Xv, yv, scorers,
                                         sampled=sampled, n_samples=n_samples, seed=seed)
            chosen = one_standard_error_choice(losses, w_val)
            warn_at_grid_bound(chosen, deltas)
            return (Hyperparameters.of(float(deltas[chosen]), sigma),
                    float(np.average(losses[chosen], weights=w_val)))
        # Gaussian: Σ(δ, σ) = c·(H + ρI)⁻¹ with c = 1/s(σ) and ρ = c·δ, so one
        # variance (one set of draws ε₁ ~ N(0, (H + ρI)⁻¹)) per ρ serves every σ,
        # searched in 1-D per ρ.
        floor = float(sigma_floor(weighted_spread(y_model, w_fit)))
        n_out = yv.reshape(len(yv), -1).shape[1]
        w_cells = None if w_val is None else np.repeat(w_val, n_out)

        def c_of(sigma):
            return 1.0 / float(evidence.scale(torch.tensor(sigma, dtype=torch.float64)))

        fits = []
        if not sampled:  # the held-out means and, per ρ, the variances: (K, n, C)
            f_np, variances = None, None
            for rows, f, covs in held_out_chunks(posterior, subset, Xv, deltas, 1.0):
                if variances is None:
                    f_np = np.empty((len(Xv), f.shape[1]))
                    variances = np.empty((len(deltas), len(Xv), f.shape[1]))
                f_np[rows] = f.cpu().numpy()
                for k, cov in enumerate(covs):
                    v = torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0)
                    variances[k, rows] = v.cpu().numpy()
            f_np = f_np.ravel()
        for k, rho in enumerate(deltas):
            if sampled:
                eps = _at_prior(posterior, rho, 1.0).sample(n_samples, generator(seed))
                moments = functools.partial(_sampled_moments, subset, Xv, eps, c_of)
                polish = None
            else:
                moments = functools.partial(_scaled_moments, f_np, variances[k].ravel(),
                                            c_of)
                polish = functools.partial(_stationary_log_sigma, mean=f_np,
                                           v=variances[k].ravel(), c1=c_of(1.0),
                                           power=noise_power(evidence.curvature))
            fits.append(_held_out_gaussian(moments, yv, floor, w_cells, polish))
    chosen = one_standard_error_choice([losses for losses, _ in fits], w_cells)
    warn_at_grid_bound(chosen, deltas, name="prior_precision / s(sigma_noise)")
    losses, sigma = fits[chosen]
    sigma_t = torch.tensor(sigma, dtype=torch.float64)
    return (Hyperparameters.of(float(deltas[chosen] * evidence.scale(sigma_t)), sigma_t),
            float(np.average(losses, weights=w_cells)))


def by_held_out_refined(refine_at, subset, Xv, yv, w_val, sigma, *, sampled, n_samples,
                        seed, scorers, log=None):
    """Scalar δ by the held-out NLL of the *refined* predictive (the sampled net's with
    ``sampled``; one-SE rule) over the whole decades of the grid, one refinement each:
    ``refine_at(δ of the subset)`` gives (refined subset, posterior); (Hyperparameters
    with the classifier's ``sigma``, NLL).
    Scoring the unrefined predictive would pick the width of another posterior: with
    the MAP-ward one-SE rule often δ = 1e4, under which the refined mean shrinks
    towards θ = 0."""
    nll, nll_of_samples = scorers
    deltas = 10.0 ** LOG10_PRIOR_GRID[::4]
    losses = []
    shown = (progress.Progress(len(deltas), "held-out tuning of the refined predictive", log)
             if log is not None else None)
    for value in deltas:
        if shown is not None:
            shown.update(unit="decade of δ")
        refined, posterior = refine_at(subset_prior(float(value), subset))
        with torch.no_grad():
            if sampled:  # the net at draws around the refined mean
                losses.append(nll_of_samples(
                    _draw_outputs(posterior, refined, Xv, n_samples, seed), yv))
            else:
                losses.append(nll(*_moments_by_chunks(refined, posterior, Xv), yv))
    if shown is not None:
        shown.close()
    chosen = one_standard_error_choice(losses, w_val)
    warn_at_grid_bound(chosen, deltas)
    if log is not None:
        log(f"refined held-out NLL per decade of δ: {np.round(np.mean(losses, 1), 4)}")
    return (Hyperparameters.of(float(deltas[chosen]), sigma),
            float(np.average(losses[chosen], weights=w_val)))
