"""GLM posterior refinement (Immer et al. 2021, "GLM predictive", §3.2 and App. A.3.2).

Linearizing the net around the trained weights θ* gives the generalized linear model

    f_lin(x; θ) = f(x; θ*) + J(x) (θ − θ*),

whose negative log joint with the Gaussian prior N(0, D⁻¹) (D = diag δ),

    L(θ) = s · Σ_n w_n ℓ(y_n, f_lin(x_n; θ)) + ½ θᵀ D θ,

is convex in θ (ℓ the per-row negative log-likelihood, s = 1/T — times 1/σ²
for a scalar Gaussian noise — and w_n the row weights).  The Laplace-GGN
posterior of the estimators is the Laplace approximation of this GLM *at θ**,
which is its mode only when θ* is an exact MAP of the net.  Refinement does
inference in the GLM itself, on the Jacobians J(x_n) of the training rows,
computed once and cached (so small problems only: N·C·P floats, refused above
:data:`JACOBIAN_BUDGET`):

``"laplace"``
    θ_glm = argmin L by L-BFGS on the cached Jacobians (the objective is
    convex, so this is its global minimum), then the Laplace approximation
    there: the precision s·Σ_n J_nᵀ Λ_n(f_lin) J_n + D, which is the exact
    Hessian of L (the GGN of a GLM is its Hessian), full or diagonal.
``"vi"``
    Gaussian variational inference in the GLM, q(θ) = N(m, S) maximizing the
    ELBO E_q[−s Σ w ℓ] − KL(q ‖ prior), by natural-gradient steps (Khan et
    al. 2018, the "VON" update with exact output-space expectations): with
    the expectations over f_n ~ N(f_lin(x_n; m), J_n S J_nᵀ) (exact for a Gaussian
    likelihood, by Monte Carlo with fixed draws otherwise),

        S⁻¹ ← (1 − β) S⁻¹ + β (s Σ_n w_n J_nᵀ E[Λ_n] J_n + D),
        m   ← m − β S (s Σ_n w_n J_nᵀ E[∇_f ℓ_n] + D m),

    started from the Laplace-GGN posterior at θ*, full or diagonal S, β = 1
    (a Newton-like step; for a Gaussian likelihood the first step is exact).  A
    step that lowers the ELBO is retried with half the step size; VI stops after
    :data:`VI_STEPS` steps or when the ELBO stops rising.

Either way the predictive is the GLM predictive of the refined Gaussian N(m, S):
logits (or outputs) f(x; θ*) + J(x)(m − θ*) with covariance J(x) S J(x)ᵀ — the
refined mode moves the predictive mean as well as its covariance.
"""

import math
import warnings

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

from .curvature import check_budget
from .posterior import DiagPosterior, EigenPosterior

#: Bytes of the cached training Jacobians (N·C·P float64) above which refinement is refused.
JACOBIAN_BUDGET = 2 * 2**30
#: L-BFGS iterations of the GLM mode ("laplace"), and its tolerance on the gradient's max
#: norm relative to the prior precision times the largest |θ| (scale-free stopping rule).
MODE_MAX_ITER = 20_000
MODE_GTOL = 1e-10
#: Natural-gradient VI: steps, initial step size β, Monte Carlo draws per row for the
#: expectations of the categorical / Bernoulli likelihoods (common random numbers).
VI_STEPS = {"full": 20, "diag": 100}
VI_STEP_SIZE = 1.0
#: VI stops when an accepted step raises the ELBO by less than this, relative to |ELBO|.
VI_RTOL = 1e-12
VI_MC_SAMPLES = 64

STRUCTURES = ("full", "diag")


class RefinedSubset:
    """A weight subset whose mean is the refined GLM mean θ_glm instead of θ*.

    The outputs are those of the linearized net, f(x; θ*) + J(x)(θ_glm − θ*)
    (exactly the net at θ_glm for the last layer, which is linear in its
    weights); the Jacobians stay those at θ*.  Everything else (the module, the
    index maps, the size) is the wrapped subset's.
    """

    def __init__(self, base, theta):
        self.base = base
        self.theta = theta
        self.shift = theta - base.theta
        self.kind = base.kind
        self.module = base.module
        self.n_params = base.n_params
        self.whole_index = base.whole_index
        self.group_index = base.group_index

    def row_bytes(self, n_out, moments=False):
        return self.base.row_bytes(n_out, moments)

    def forward(self, X, theta=None):
        """The net at ``theta`` (weight samples of ``pred_type="nn"``), or the
        linearized net at θ_glm."""
        if theta is not None:
            return self.base.forward(X, theta)
        if self.kind == "last_layer":
            return self.base.forward(X, self.theta)
        return self.jacobians(X)[0]

    def jacobians(self, X):
        f, J = self.base.jacobians(X)
        return f + J @ self.shift, J

    def moments(self, X, posterior):
        if self.kind == "last_layer":  # closed form in the features; the mean is linear
            _, var = self.base.moments(X, posterior)
            return self.base.forward(X, self.theta), var
        f, J = self.jacobians(X)
        return f, posterior.functional_variance(J)


def cached_jacobians(subset, X, n_out):
    """(f(X; θ*) (N, C), J (N, C, P)) of the training rows, within :data:`JACOBIAN_BUDGET`."""
    check_budget(8 * len(X) * n_out * subset.n_params,
                 f"Caching the training Jacobians for refine ({len(X)} rows × {n_out} outputs "
                 f"× {subset.n_params} weights)", JACOBIAN_BUDGET,
                 "refine=None, subset_of_weights='last_layer' or 'subnetwork', or fewer rows "
                 "(the limit is sklaplace.refine.JACOBIAN_BUDGET)")
    rows = max(1, int(2**27 // (8 * max(1, n_out) * subset.n_params)))
    parts = [subset.jacobians(X[s:s + rows]) for s in range(0, len(X), rows)]
    return torch.cat([f for f, _ in parts]), torch.cat([J for _, J in parts])


class GLM:
    """The linearized model's data term on cached Jacobians.

    ``s·Σ_n w_n ℓ_n(f)`` with ℓ the likelihood's NLL (for a Gaussian,
    ½‖out_scale ⊙ (y − f)‖²), its gradient and Hessian factors in f.
    """

    def __init__(self, likelihood, f0, J, y, theta_star, s, out_scale, weight=None):
        self.likelihood = likelihood
        self.gaussian = likelihood.name == "gaussian"
        self.f0, self.J, self.y = f0, J, y
        self.theta_star = theta_star
        self.s = float(s)
        self.out_scale = out_scale
        self.n, self.C, self.P = J.shape
        self.w = torch.ones(self.n, dtype=J.dtype) if weight is None else weight.to(J.dtype)
        self.J2 = J.reshape(-1, self.P)

    def outputs(self, theta):
        return self.f0 + (self.J2 @ (theta - self.theta_star)).reshape(self.n, self.C)

    def row_nll(self, f):
        if self.gaussian:
            return 0.5 * (((self.y.reshape(f.shape) - f) * self.out_scale) ** 2).sum(-1)
        return self.likelihood.nll(f, self.y)

    def residual(self, f):
        """∂ℓ_n/∂f_n, shape (n, C)."""
        if self.gaussian:
            return (f - self.y.reshape(f.shape)) * self.out_scale**2
        return self.likelihood.residual(f, self.y)

    def factors(self, f):
        """F_n with Λ_n = F_n F_nᵀ, shape (n, C, K)."""
        return self.likelihood.sqrt_hessian(f) * self.out_scale[None, :, None]

    def data_term(self, f):
        return self.s * float(self.w @ self.row_nll(f))

    def pull_back(self, g):
        """Jᵀ-product of per-row output vectors g (n, C) → (P,)."""
        return self.J2.T @ g.reshape(-1)

    def curvature_factor(self, F):
        """U (P, n·K) with Σ_n w_n J_nᵀ F_n F_nᵀ J_n = U Uᵀ."""
        F = F * self.w.sqrt()[:, None, None]
        return torch.einsum("ncp,nck->pnk", self.J, F).reshape(self.P, -1)


def _prior_quadratic(delta, theta):
    return 0.5 * float((delta * theta**2).sum())


def log_joint(glm, theta, delta):
    """log p(y, θ) of the GLM up to θ-free constants: −L(θ)."""
    return -(glm.data_term(glm.outputs(theta)) + _prior_quadratic(delta, theta))


def glm_mode(glm, delta, start):
    """argmin_θ L(θ) by L-BFGS; returns (θ, iterations, converged)."""
    delta = delta.expand(glm.P) if delta.dim() == 0 else delta

    def fun(x):
        theta = torch.from_numpy(x)
        f = glm.outputs(theta)
        value = glm.data_term(f) + _prior_quadratic(delta, theta)
        grad = glm.s * glm.pull_back(glm.residual(f) * glm.w[:, None]) + delta * theta
        return value, grad.numpy()

    x0 = start.numpy().astype(np.float64)
    scale = float(delta.max()) * max(1.0, float(np.abs(x0).max()))
    result = minimize(fun, x0, jac=True, method="L-BFGS-B",
                      options={"maxiter": MODE_MAX_ITER, "maxfun": 2 * MODE_MAX_ITER,
                               "ftol": 0.0, "gtol": MODE_GTOL * scale, "maxcor": 20})
    theta = torch.from_numpy(result.x)
    grad = np.abs(fun(result.x)[1]).max()
    converged = grad <= 1e3 * MODE_GTOL * scale
    return theta, int(result.nit), bool(converged)


def posterior_from_factor(U, structure):
    """The posterior structure of the curvature U Uᵀ (full: through the smaller of the
    P × P matrix and the kernel UᵀU; diag: its diagonal)."""
    if structure == "diag":
        return DiagPosterior((U**2).sum(1))
    if U.shape[1] < U.shape[0]:
        return EigenPosterior.from_factor(U)
    return EigenPosterior.from_matrix(U @ U.T)


# ----------------------------------------------------------------------------- VI


def _chol_of_cov(V):
    """Cholesky factors of per-row covariances (n, C, C), jittered where needed."""
    eye = torch.eye(V.shape[-1], dtype=V.dtype)
    jitter = 1e-10 * (V.diagonal(dim1=1, dim2=2).mean(-1).clamp_min(1e-30))[:, None, None]
    L, info = torch.linalg.cholesky_ex(V + jitter * eye)
    if bool((info > 0).any()):
        evals, evecs = torch.linalg.eigh(V)
        L = evecs * evals.clamp_min(0).sqrt()[:, None, :]
    return L


class _Expectations:
    """E_q[ℓ_n], E_q[∂ℓ_n/∂f], E_q[Λ_n] factors under f_n ~ N(μ_n, V_n).

    Gaussian: closed form. Categorical / Bernoulli: Monte Carlo with fixed
    standard-normal draws (common random numbers, so the ELBO is a
    deterministic function of (m, S) and step acceptance is meaningful).
    """

    def __init__(self, glm, generator):
        self.glm = glm
        self.eps = None if glm.gaussian else torch.randn(
            VI_MC_SAMPLES, glm.n, glm.C, generator=generator, dtype=glm.J.dtype)

    def nll(self, mu, V):
        glm = self.glm
        if glm.gaussian:
            trace = (V.diagonal(dim1=1, dim2=2) * glm.out_scale**2).sum(-1)
            return glm.row_nll(mu) + 0.5 * trace
        f = self._samples(mu, V)
        return torch.stack([glm.row_nll(fs) for fs in f]).mean(0)

    def grad_and_factors(self, mu, V):
        """(E[∂ℓ/∂f] (n, C), F (n, C, K) with F Fᵀ = E[Λ])."""
        glm = self.glm
        if glm.gaussian:
            return glm.residual(mu), glm.factors(mu)
        f = self._samples(mu, V)
        grad = torch.stack([glm.residual(fs) for fs in f]).mean(0)
        F = torch.cat([glm.factors(fs) for fs in f], dim=2) / math.sqrt(len(f))
        if F.shape[2] > glm.C:  # E[Λ] as a C × C matrix: its own square root (C columns)
            lam = F @ F.transpose(1, 2)
            evals, evecs = torch.linalg.eigh(lam)
            F = evecs * evals.clamp_min(0).sqrt()[:, None, :]
        return grad, F

    def _samples(self, mu, V):
        L = _chol_of_cov(V)
        return mu[None] + torch.einsum("ncd,snd->snc", L, self.eps)


def _kl(m, prec_logdet, trace_ds, delta):
    """KL(N(m, S) ‖ N(0, D⁻¹)) from log det S⁻¹ and tr(D S)."""
    delta = delta.expand(m.numel()) if delta.dim() == 0 else delta
    return 0.5 * (trace_ds + float((delta * m**2).sum()) - m.numel() + prec_logdet
                  - float(torch.log(delta).sum()))


class _Gaussian:
    """q(θ) = N(m, S) with a full or diagonal precision matrix."""

    def __init__(self, structure, m, precision):
        self.structure, self.m, self.precision = structure, m, precision
        if structure == "diag":
            self.var = 1.0 / precision
        else:
            self.chol = torch.linalg.cholesky(precision)

    def output_cov(self, J):
        if self.structure == "diag":
            return (J * self.var) @ J.transpose(1, 2)
        n, C, P = J.shape
        A = torch.linalg.solve_triangular(self.chol, J.reshape(-1, P).T, upper=False)
        A = A.T.reshape(n, C, P)
        return A @ A.transpose(1, 2)

    def solve(self, g):
        if self.structure == "diag":
            return g * self.var
        return torch.cholesky_solve(g[:, None], self.chol)[:, 0]

    def logdet_precision(self):
        if self.structure == "diag":
            return float(torch.log(self.precision).sum())
        return 2 * float(self.chol.diagonal().log().sum())

    def trace_prior(self, delta):
        if self.structure == "diag":
            return float((delta * self.var).sum())
        inv = torch.cholesky_inverse(self.chol)
        return float((delta * inv.diagonal()).sum())


def _elbo(glm, q, delta, expect):
    V = q.output_cov(glm.J)
    mu = glm.outputs(q.m)
    data = glm.s * float(glm.w @ expect.nll(mu, V))
    return -(data + _kl(q.m, q.logdet_precision(), q.trace_prior(delta), delta)), mu, V


def _curvature_precision(glm, F, delta, structure):
    U = glm.curvature_factor(F)
    if structure == "diag":
        return glm.s * (U**2).sum(1) + delta
    H = glm.s * (U @ U.T)
    H.diagonal().add_(delta)
    return H


def natural_gradient_vi(glm, delta, structure, generator, steps=None):
    """Natural-gradient Gaussian VI in the GLM from the Laplace-GGN posterior at θ*.

    Returns (q, ELBO at the start, ELBO at the end, steps taken).
    """
    delta_p = delta.expand(glm.P) if delta.dim() == 0 else delta
    expect = _Expectations(glm, generator)
    m = glm.theta_star.clone()
    F0 = glm.factors(glm.f0)
    q = _Gaussian(structure, m, _curvature_precision(glm, F0, delta_p, structure))
    elbo, mu, V = _elbo(glm, q, delta_p, expect)
    start = elbo
    beta = VI_STEP_SIZE
    steps = VI_STEPS[structure] if steps is None else steps
    done = 0
    for done in range(1, steps + 1):
        grad_f, F = expect.grad_and_factors(mu, V)
        target = _curvature_precision(glm, F, delta_p, structure)
        grad = glm.s * glm.pull_back(grad_f * glm.w[:, None]) + delta_p * q.m
        while True:
            precision = (1 - beta) * q.precision + beta * target
            try:
                trial = _Gaussian(structure, q.m, precision)
            except torch.linalg.LinAlgError:
                trial = None
            if trial is not None:
                trial.m = q.m - beta * trial.solve(grad)
                value, mu_t, V_t = _elbo(glm, trial, delta_p, expect)
                if value >= elbo:
                    gain = value - elbo
                    q, elbo, mu, V = trial, value, mu_t, V_t
                    if gain <= VI_RTOL * abs(elbo):
                        return q, start, elbo, done
                    break
            beta /= 2
            if beta < 1e-4:
                return q, start, elbo, done
        beta = min(VI_STEP_SIZE, 2 * beta)
    return q, start, elbo, done


def _posterior_from_gaussian(q, structure):
    """A prediction posterior with covariance S of q (set_prior(0-prior) form)."""
    if structure == "diag":
        post = DiagPosterior(q.precision.clone())
        return post.set_prior(torch.zeros((), dtype=q.precision.dtype), torch.tensor(1.0))
    # S = (precision)⁻¹: eigendecompose the precision itself and use D = 0 ... the
    # EigenPosterior form needs a positive prior, so split off its smallest eigenvalue.
    lam, V = torch.linalg.eigh(q.precision)
    floor = lam.min().clamp_min(1e-300) / 2
    post = EigenPosterior(V, (lam - floor).clamp_min(0), q.precision.shape[0])
    return post.set_prior(floor.reshape(()), torch.tensor(1.0, dtype=lam.dtype))


# ----------------------------------------------------------------------------- entry


def refine_posterior(method, structure, subset, likelihood, X, y, weight, delta, s, out_scale,
                     n_out, random_state=0, log=None):
    """Refine the LA of ``subset`` in its GLM; returns (RefinedSubset, posterior, info).

    ``delta``: the prior precision of the Laplace weights (0-d or (P,)), ``s`` the
    curvature scale, ``out_scale`` (C,) the per-output noise scale of a Gaussian
    likelihood (ones otherwise), ``weight`` (N,) row weights or None. ``info`` holds
    the objective at the unrefined and the refined posterior (the GLM's log joint at
    θ* and at its mode for ``"laplace"``, the ELBO for ``"vi"``) and the iterations.
    """
    if structure not in STRUCTURES:
        raise ValueError(
            f"refine={method!r} supports hessian_structure 'full' or 'diag'; the structure "
            f"is {structure!r}. Set hessian_structure='full' or 'diag', or refine=None.")
    log = log or (lambda message: None)
    with torch.no_grad():
        f0, J = cached_jacobians(subset, X, n_out)
        glm = GLM(likelihood, f0, J, y, subset.theta, s, out_scale, weight)
        delta_p = delta.expand(glm.P) if delta.dim() == 0 else delta
        if method == "laplace":
            before = log_joint(glm, glm.theta_star, delta_p)
            theta, n_iter, converged = glm_mode(glm, delta_p, glm.theta_star)
            if not converged:
                warnings.warn(
                    f"refine='laplace': L-BFGS did not reach the GLM mode in {MODE_MAX_ITER} "
                    "iterations; the refined posterior is centred at the last iterate.",
                    ConvergenceWarning)
            after = log_joint(glm, theta, delta_p)
            U = glm.curvature_factor(glm.factors(glm.outputs(theta)))
            posterior = posterior_from_factor(U, structure).set_prior(delta, s)
        else:
            generator = torch.Generator().manual_seed(int(random_state))
            q, before, after, n_iter = natural_gradient_vi(glm, delta, structure, generator)
            theta = q.m
            posterior = _posterior_from_gaussian(q, structure)
    log(f"refine={method!r} ({structure}): objective {before:.6g} → {after:.6g} in "
        f"{n_iter} iterations")
    info = {"objective_init": float(before), "objective": float(after), "n_iter": int(n_iter)}
    return RefinedSubset(subset, theta), posterior, info
