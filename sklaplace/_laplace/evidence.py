"""Laplace log marginal likelihood and its bounded post-hoc maximisation.

With prior N(0, D⁻¹) on the P Laplace weights θ* (Laplace Redux Eq. 6,
DIGEST §1.3):

    log Z = log p(D | θ*) − ½ θ*ᵀ D θ* + ½ log det D − ½ log det(s·H + D),

where H is the likelihood curvature at unit noise and temperature and
s = 1/T (times 1/σ² for a Gaussian likelihood).
"""

import math
import warnings

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

from .curvature import noise_power
from .likelihoods import gaussian_log_likelihood
from .threads import single_threaded_blas

LOG_PRIOR_BOUNDS = (math.log(1e-4), math.log(1e4))


def group_sums(theta, index, n_groups):
    """(number of weights, Σ θ²) of each group of ``index``."""
    with torch.no_grad():
        counts = torch.bincount(index, minlength=n_groups).to(theta.dtype)
        squares = torch.zeros(n_groups, dtype=theta.dtype, device=theta.device).index_add_(
            0, index, theta**2)
    return counts, squares


def log_prior_term(theta, delta, index=None, sums=None):
    """−½ θᵀ D θ + ½ log det D for a 0-d or per-parameter ``delta``, or one value per
    group with ``index`` (parameter i has ``delta[index[i]]``; ``sums``: its
    ``group_sums``, if known)."""
    if delta.dim() == 0:
        return -0.5 * delta * (theta @ theta) + 0.5 * theta.numel() * torch.log(delta)
    if index is not None:
        counts, squares = sums if sums is not None else group_sums(theta, index, delta.numel())
        return -0.5 * (delta * squares).sum() + 0.5 * (counts * torch.log(delta)).sum()
    return -0.5 * (delta * theta**2).sum() + 0.5 * torch.log(delta).sum()


def curvature_scale(gaussian, curvature, temperature, sigma):
    """The factor s of the curvature: 1/T, times 1/σ² (GGN) or 1/σ⁴ (EF) for a scalar σ."""
    if gaussian and sigma.dim() == 0:
        return 1.0 / (sigma ** noise_power(curvature) * temperature)
    return torch.tensor(1.0 / temperature, dtype=torch.float64)


class Evidence:
    """The log evidence of one fitted LA as a function of (δ, σ).

    Parameters
    ----------
    posterior : posterior structure
        Curvature at unit noise (a scalar σ) or at the given per-output noise.
    theta : tensor (P,)
        MAP values of the Laplace weights.
    temperature : float
    n_rows : int
    sse : tensor (C,) or None
        Per-output sums of squared residuals (Gaussian likelihood), else None.
    nll : float
        Summed negative log-likelihood at unit temperature (classification).
    curvature : {"ggn", "ef"}
        The EF depends on a scalar σ as 1/σ⁴, the GGN as 1/σ².
    rebuild : callable or None
        ``out_scale (C,) -> posterior`` for a per-output σ (the curvature is
        recomputed with out_scale = 1/σ).
    """

    def __init__(self, posterior, theta, temperature, n_rows, sse=None, nll=0.0,
                 curvature="ggn", rebuild=None):
        self.posterior = posterior
        self.theta = theta
        self.temperature = temperature
        self.n_rows = n_rows
        self.sse = sse
        self.nll = nll
        self.curvature = curvature
        self.rebuild = rebuild

    @classmethod
    def at_fit(cls, posterior, theta, likelihood, f, y, weight, temperature, curvature="ggn",
               rebuild=None):
        """The evidence of a fitted LA from the MAP outputs ``f`` (n, C) on its rows ``(y,
        weight)``: per-output sums of squares for a Gaussian likelihood, else the summed
        NLL (row-weighted; N is then Σ w). Post-hoc and online tuning both build it here."""
        n_rows = len(f) if weight is None else float(weight.sum())
        if likelihood.has_noise:
            sq = (y.reshape(f.shape) - f) ** 2
            sse = (sq if weight is None else sq * weight[:, None]).sum(0)
            return cls(posterior, theta, temperature, n_rows, sse=sse, curvature=curvature,
                       rebuild=rebuild)
        row_nll = likelihood.nll(f, y)
        nll = (row_nll if weight is None else row_nll * weight).sum().item()
        return cls(posterior, theta, temperature, n_rows, nll=nll, curvature=curvature)

    def _group_sums(self, index, n_groups):
        """``group_sums`` of θ, kept for the last ``index`` (tuning passes the same one)."""
        cached = self.__dict__.get("_sums_cache")
        if cached is None or cached[0] is not index or cached[1] != n_groups:
            cached = (index, n_groups, group_sums(self.theta, index, n_groups))
            self._sums_cache = cached
        return cached[2]

    def log_likelihood(self, sigma=None):
        """log p(D | θ*) / T at noise ``sigma`` (Gaussian), or the fixed classification term."""
        if self.gaussian:
            return gaussian_log_likelihood(self.sse, self.n_rows, sigma) / self.temperature
        return -self.nll / self.temperature

    def _on_theta_device(self, delta, sigma, index):
        """(δ, σ, index) on θ's device: the optimizer's hyperparameters live on the CPU."""
        device = self.theta.device
        sigma = None if sigma is None else torch.as_tensor(sigma).to(device)
        return delta.to(device), sigma, None if index is None else self._on_device(index)

    def _on_device(self, index):
        """``index`` on θ's device, the same tensor for the same ``index`` (caches key on it)."""
        cached = self.__dict__.get("_index_cache")
        if cached is None or cached[0] is not index:
            cached = self._index_cache = (index, index.to(self.theta.device))
        return cached[1]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_sums_cache", None)
        state.pop("_index_cache", None)
        return state

    @property
    def gaussian(self):
        return self.sse is not None

    def scale(self, sigma):
        return curvature_scale(self.gaussian, self.curvature, self.temperature, sigma)

    def posterior_for(self, sigma):
        if self.gaussian and sigma.dim() > 0:
            return self.rebuild(1.0 / sigma.detach().to(self.theta.device))
        return self.posterior

    def closed_form(self, tune_sigma, log_sigma0):
        """(objective, hessian) of x = (log δ[, log σ]) ↦ −log Z in closed form, in float64
        numpy, for a scalar δ and a scalar σ (or none) where the posterior's determinant is
        a sum over a spectrum κ (:meth:`~.posterior.base.Posterior.scalar_spectrum`); None
        otherwise. With d = δ, a_j = s·κ_j, w_j = 1/(a_j + d), q = θᵀθ:

            ∂ log Z/∂ log δ = ½ (r − d·q − d Σ w_j),
            ∂ log Z/∂ log σ = (S/σ² − N·C)/T + ½ p Σ a_j w_j  (s ∝ σ⁻ᵖ, S = Σ SSE),

        the same function and gradients :meth:`__call__` gives by autograd, O(r) an
        evaluation without a graph.
        """
        if type(self).__call__ is not Evidence.__call__:  # another function of (δ, σ)
            return None
        spectrum = self.posterior.scalar_spectrum()
        if spectrum is None or (self.gaussian and (log_sigma0 is None
                                                   or np.ndim(log_sigma0) > 0)):
            return None
        kappa, n_params = spectrum
        kappa = kappa.detach().to(device="cpu", dtype=torch.float64).numpy()
        r, q, T = kappa.size, float(self.theta.double() @ self.theta.double()), self.temperature
        with_sigma = self.gaussian and tune_sigma
        p = noise_power(self.curvature)
        if self.gaussian:
            S, NC = float(self.sse.double().sum()), self.n_rows * self.sse.numel()
        fixed_v = None if log_sigma0 is None else float(log_sigma0)

        def parts(x):
            u = x[0]
            v = x[1] if with_sigma else fixed_v
            d = math.exp(u)
            if self.gaussian:
                s = math.exp(-p * v) / T
                loglik = (-0.5 * NC * math.log(2 * math.pi) - NC * v
                          - 0.5 * S * math.exp(-2 * v)) / T
            else:
                s, loglik = 1.0 / T, -self.nll / T
            a = s * kappa
            w = 1.0 / (a + d)
            log_z = (loglik - 0.5 * d * q + 0.5 * n_params * u
                     - 0.5 * (np.log(a + d).sum() + (n_params - r) * u))
            return u, v, d, a, w, log_z

        def objective(x):
            u, v, d, a, w, log_z = parts(x)
            grad = [0.5 * (r - d * q - d * w.sum())]
            if with_sigma:
                grad.append((S * math.exp(-2 * v) - NC) / T + 0.5 * p * (a * w).sum())
            return -log_z, -np.array(grad)

        def hessian(x):
            u, v, d, a, w, _ = parts(x)
            h_uu = -0.5 * d * q - 0.5 * d * w.sum() + 0.5 * d * d * (w * w).sum()
            if not with_sigma:
                return -np.array([[h_uu]])
            aw2 = (a * w * w).sum()
            h_uv = -0.5 * p * d * aw2
            h_vv = -2 * S * math.exp(-2 * v) / T - 0.5 * p * p * d * aw2
            return -np.array([[h_uu, h_uv], [h_uv, h_vv]])

        return objective, hessian

    def __call__(self, delta, sigma=None, index=None):
        """Log evidence at prior precision ``delta`` and noise ``sigma`` (tensors).

        ``delta`` is 0-d, one value per Laplace weight, or — with ``index``, a
        (P,) integer tensor — one value per group of tied weights, weight i having
        ``delta[index[i]]``.  Gradients are exact either way; the grouped form
        lets the full and low-rank structures differentiate per group (O(L r²))
        instead of per weight (O(P r²)).
        """
        delta, sigma, index = self._on_theta_device(delta, sigma, index)
        loglik = self.log_likelihood(sigma)
        posterior = self.posterior_for(sigma)
        sums = None if index is None or delta.dim() == 0 else self._group_sums(index, delta.numel())
        return (
            loglik
            + log_prior_term(self.theta, delta, index, sums)
            - 0.5 * posterior.log_det(delta, self.scale(sigma), index=index)
        )


def _grouping(expand, n_delta, dtype):
    """The (P,) index with ``expand(v) == v[index]``, or None (0-d or another map).

    Read off ``expand`` at distinct values and checked at random ones, so that the
    evidence can be differentiated per group (see :meth:`Evidence.__call__`).
    """
    with torch.no_grad():
        probe = expand(torch.arange(n_delta, dtype=dtype))
        if probe.dim() != 1:
            return None
        index = probe.round().long()
        if (index < 0).any() or (index >= n_delta).any():
            return None
        values = 0.5 + torch.rand(n_delta, dtype=dtype, generator=torch.Generator().manual_seed(0))
        if not torch.equal(expand(values), values[index]):
            return None
    return index


def _message(result):
    message = result.message
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    return str(message).strip()


def _stationary(result, bounds, rtol=1e-5):
    """Whether L-BFGS-B's end point is stationary up to rounding (projected gradient ≈ 0).

    With ftol = 1e-14 the line search often ends "ABNORMAL" at the optimum itself,
    where rounding hides any further decrease; that is not a failure.
    """
    if result.nit == 0 or getattr(result, "jac", None) is None:
        return False
    g = np.array(result.jac, dtype=float)
    lower = np.array([b[0] if b[0] is not None else -np.inf for b in bounds])
    upper = np.array([b[1] if b[1] is not None else np.inf for b in bounds])
    g[(np.isclose(result.x, lower, atol=1e-8) & (g > 0))
      | (np.isclose(result.x, upper, atol=1e-8) & (g < 0))] = 0.0
    return bool(np.max(np.abs(g), initial=0.0) <= rtol * max(1.0, abs(float(result.fun))))


def hessian_of(objective_tensor):
    """The Hessian of ``objective_tensor`` (a torch function of a 1-d tensor) as numpy."""
    def hessian(x):
        x = torch.tensor(x, dtype=torch.float64)
        return torch.autograd.functional.hessian(objective_tensor, x).cpu().numpy()
    return hessian


# Newton-polish at most this many hyperparameters: the Hessian costs one backward pass per
# hyperparameter, which prior_structure="diag" (one δ per weight) would make P passes.
MAX_POLISHED = 64


def newton_polish(objective, hessian, x, bounds, max_steps=3):
    """Newton steps on the free coordinates from L-BFGS-B's end point ``x``.

    L-BFGS-B stops within its gradient tolerance of the optimum, at a point that depends on
    its path: on rounding that differs between BLAS kernels, and between a weighted
    objective and the same objective over duplicated rows. Newton's method converges
    quadratically from there to the stationary point itself, so equal objectives give
    equal hyperparameters up to rounding whatever the path. The Hessian is evaluated once
    at ``x`` (from within the tolerance, a fixed Hessian converges as fast as a new one per
    step). Coordinates on a bound stay there; a step is taken only while it lowers the
    gradient's norm, does not raise the objective and keeps every coordinate within its
    bounds. More than ``MAX_POLISHED`` hyperparameters (a prior per weight) keep L-BFGS-B's
    end point.
    """
    if len(x) > MAX_POLISHED:
        return np.array(x, dtype=float)
    lower = np.array([-np.inf if b[0] is None else b[0] for b in bounds])
    upper = np.array([np.inf if b[1] is None else b[1] for b in bounds])
    x = np.array(x, dtype=float)
    value, grad = objective(x)
    free = ~(np.isclose(x, lower, atol=1e-8) | np.isclose(x, upper, atol=1e-8))
    if not free.any() or not np.all(np.isfinite(grad)):
        return x
    h = hessian(x)[np.ix_(free, free)]
    if not np.all(np.isfinite(h)) or np.linalg.eigvalsh(h).min() <= 0:
        return x  # not a minimum's neighbourhood
    rounding = 1e-14 * max(1.0, abs(value))
    for _ in range(max_steps):
        g = grad[free]
        if np.max(np.abs(g)) <= rounding:
            break
        candidate = x.copy()
        candidate[free] -= np.linalg.solve(h, g)
        if np.any(candidate < lower) or np.any(candidate > upper):
            break
        new_value, new_grad = objective(candidate)
        if not (np.isfinite(new_value) and np.all(np.isfinite(new_grad))
                and np.linalg.norm(new_grad[free]) < np.linalg.norm(g)
                and new_value <= value + rounding):
            break
        x, value, grad = candidate, new_value, new_grad
    return x


def maximize_evidence(evidence, log_delta0, expand, log_sigma0=None, sigma_floor=None,
                      tune_sigma=True, warn=True, sigma_ceiling=None, log_offset=None):
    """Bounded L-BFGS-B over log δ (and log σ), log10 δ ∈ [−4, 4] (each free δ's bounds
    shifted by its ``log_offset``, natural log: a group whose weights' scale differs),
    ``sigma_floor`` ≤ σ ≤ ``sigma_ceiling`` (None: no upper bound).

    ``expand(v)`` maps the vector of free δ values to the ``delta`` argument of
    ``evidence`` (0-d tensor, or one value per Laplace weight).  Returns the
    optimal (log δ, log σ or None) as numpy arrays; warns (ConvergenceWarning)
    when the optimum lies on a bound, and when L-BFGS-B reports a failure (the
    returned values may then be the starting point). An end point whose evidence
    is not finite or below the start's (finite-difference gradients of a badly
    scaled per-output σ) is not returned: the start is, with a warning. A scalar δ and σ
    over a spectrum take the objective, gradient and Hessian in closed form
    (:meth:`Evidence.closed_form`), others autograd's.
    """
    n_delta = len(log_delta0)
    shift = np.zeros(n_delta) if log_offset is None else np.broadcast_to(log_offset, n_delta)
    lower, upper = LOG_PRIOR_BOUNDS[0] + shift, LOG_PRIOR_BOUNDS[1] + shift
    x0 = list(np.clip(log_delta0, lower, upper))
    bounds = list(zip(lower, upper))
    with_sigma = evidence.gaussian and tune_sigma
    if with_sigma:
        floor = np.broadcast_to(np.log(sigma_floor), np.shape(log_sigma0)).ravel()
        ceiling = (np.full(floor.shape, np.inf) if sigma_ceiling is None else
                   np.broadcast_to(np.log(sigma_ceiling), floor.shape))
        x0 += list(np.clip(np.ravel(log_sigma0), floor, ceiling))
        bounds += [(f, None if np.isinf(c) else c) for f, c in zip(floor, ceiling)]
    sigma_shape = np.shape(log_sigma0) if with_sigma else None
    analytic = not (with_sigma and len(sigma_shape) > 0)
    dtype = evidence.theta.dtype
    index = _grouping(expand, n_delta, dtype)

    def objective_tensor(x):
        values = torch.exp(x[:n_delta])
        if with_sigma:
            sigma = torch.exp(x[n_delta:]).reshape(sigma_shape)
        else:
            sigma = None if log_sigma0 is None else torch.tensor(np.exp(log_sigma0), dtype=dtype)
        if index is None:
            return -evidence(expand(values), sigma)
        return -evidence(values, sigma, index=index)

    def objective(x):
        x = torch.tensor(x, dtype=dtype, requires_grad=analytic)
        value = objective_tensor(x)
        if not analytic:
            return value.item()
        (grad,) = torch.autograd.grad(value, x)
        return value.item(), grad.cpu().numpy()

    hessian = hessian_of(objective_tensor)
    scalar = n_delta == 1 and index is None and expand(
        torch.ones(1, dtype=dtype)).dim() == 0
    closed_form = getattr(evidence, "closed_form", None)  # (a plain function of (δ, σ): none)
    closed = closed_form(tune_sigma, log_sigma0) if closed_form and scalar and analytic else None
    if closed is not None:
        objective, hessian = closed

    def value_at(x):
        out = objective(x)
        return out[0] if analytic else out

    with single_threaded_blas():
        result = minimize(objective, np.asarray(x0, dtype=float), jac=analytic,
                          method="L-BFGS-B", bounds=bounds,
                          options={"maxiter": 500, "ftol": 1e-14, "gtol": 1e-9})
        x = result.x
        if analytic:
            x = newton_polish(objective, hessian, x, bounds)
        start = value_at(np.asarray(x0, dtype=float))
        end = value_at(x)
    if not np.isfinite(end) or end > start:
        if warn:
            warnings.warn(
                f"The evidence maximization ended at a worse point than it started (log "
                f"evidence {-end:.6g} against {-start:.6g}); the starting prior_precision "
                "(and sigma_noise) are kept. Standardize the targets (normalize_y=True) or "
                "rescale the data.", ConvergenceWarning)
        x = np.asarray(x0, dtype=float)
        return x[:n_delta], (x[n_delta:].reshape(sigma_shape) if with_sigma else log_sigma0)
    if not warn:
        return x[:n_delta], (x[n_delta:].reshape(sigma_shape) if with_sigma else log_sigma0)
    if not result.success and not _stationary(result, bounds):
        warnings.warn(
            "The evidence maximization did not converge: L-BFGS-B stopped after "
            f"{result.nit} iteration(s) and {result.nfev} evaluation(s) with status "
            f"{result.status} ({_message(result)!r}). The returned prior_precision (and "
            "sigma_noise) may be the starting values or short of the optimum.",
            ConvergenceWarning,
        )
    at_bound = (np.isclose(x[:n_delta], lower, atol=1e-6)
                | np.isclose(x[:n_delta], upper, atol=1e-6))
    if with_sigma:
        at_sigma = np.isclose(x[n_delta:], floor, atol=1e-6)
        at_ceiling = np.isclose(x[n_delta:], ceiling, atol=1e-6)
    else:
        at_sigma = at_ceiling = np.zeros(0, bool)
    if at_bound.any() or at_sigma.any() or at_ceiling.any():
        what = []
        if at_bound.any():
            what.append("prior_precision at its bound (log10 δ ∈ [−4, 4])")
        if at_sigma.any():
            what.append("sigma_noise at its lower bound (1e-3·s)")
        if at_ceiling.any():
            what.append("sigma_noise at its upper bound (10·s)")
        if at_sigma.any() or at_ceiling.any():
            what[-1] += ", s = max(std(y), RMS of the MAP's residuals)"
        warnings.warn(
            "The evidence maximum lies on a bound: " + " and ".join(what) + ". The model may be "
            "over- or under-regularized; consider rescaling the data or a different network.",
            ConvergenceWarning,
        )
    log_sigma = x[n_delta:].reshape(sigma_shape) if with_sigma else log_sigma0
    return x[:n_delta], log_sigma
