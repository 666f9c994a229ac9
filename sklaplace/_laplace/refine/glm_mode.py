"""``refine="laplace"``: the mode of the GLM and the log joint there.

θ_glm = argmin L(θ) (L the GLM's negative log joint, convex in θ): L-BFGS on the
cached Jacobians, then Newton-CG steps (Hessian-vector products
s·Jᵀ Λ J v + D v) until the Newton decrement — the squared distance to the mode in
posterior standard deviations — is negligible.  The Laplace approximation there has
the precision s·Σ_n J_nᵀ Λ_n(f_lin) J_n + D, the exact Hessian of L.
"""

import warnings

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

#: The GLM mode ("laplace"): L-BFGS iterations, then at most that many Newton-CG steps, to a
#: gradient max norm of MODE_GTOL times the one at θ* (or 1).
MODE_MAX_ITER = 20_000
MODE_GTOL = 1e-9
MODE_NEWTON_STEPS = 5
#: The mode is reached when a Newton step moves θ by at most this many posterior stds.
MODE_DECREMENT = 1e-8


def _prior_quadratic(delta, theta):
    return 0.5 * float((delta * theta**2).sum())


def log_joint(glm, theta, delta):
    """log p(y, θ) of the GLM up to θ-free constants: −L(θ)."""
    return -(glm.data_term(glm.outputs(theta)) + _prior_quadratic(delta, theta))


def glm_mode(glm, delta, start):
    """argmin_θ L(θ): L-BFGS, then Newton-CG steps (Hessian-vector products Jᵀ Λ J v + D v on
    the cached Jacobians) to the precision that L-BFGS's line search on L cannot reach.

    Returns (θ, iterations, converged): converged when the gradient's max norm is at most
    ``MODE_GTOL`` times that at the start (or 1).
    """
    delta = delta.expand(glm.P) if delta.dim() == 0 else delta

    def gradient(theta, f):
        return glm.s * glm.pull_back(glm.residual(f) * glm.w[:, None]) + delta * theta

    device = glm.device  # scipy's iterates live on the CPU, the GLM where the net is

    def fun(x):
        theta = torch.from_numpy(x).to(device)
        f = glm.outputs(theta)
        return (glm.data_term(f) + _prior_quadratic(delta, theta),
                gradient(theta, f).cpu().numpy())

    g0 = float(gradient(start, glm.outputs(start)).abs().max())
    tol = MODE_GTOL * max(1.0, g0)
    result = minimize(fun, start.cpu().numpy().astype(np.float64), jac=True, method="L-BFGS-B",
                      options={"maxiter": MODE_MAX_ITER, "maxfun": 2 * MODE_MAX_ITER,
                               "ftol": 0.0, "gtol": tol, "maxcor": 20})
    theta, n_iter = torch.from_numpy(result.x).to(device), int(result.nit)
    # Newton until the decrement gᵀH⁻¹g — the squared distance to the mode in posterior
    # standard deviations — is negligible: a small gradient alone is not, where the
    # curvature of some directions is tiny (outputs in very different units).
    for _ in range(MODE_NEWTON_STEPS):
        f = glm.outputs(theta)
        grad = gradient(theta, f)
        if float(grad.abs().max()) == 0:
            return theta, n_iter, True
        F = glm.factors(f) * (glm.s * glm.w).sqrt()[:, None, None]

        def hvp(v, F=F):
            u = glm.jac.matvec(v)[:, :, None]
            return glm.pull_back((F @ (F.transpose(1, 2) @ u))[..., 0]) + delta * v

        step = _conjugate_gradient(hvp, grad, 1e-3 * min(tol, float(grad.abs().max())))
        theta = theta - step
        n_iter += 1
        if float(grad @ step) <= MODE_DECREMENT**2:
            return theta, n_iter, True
    grad = gradient(theta, glm.outputs(theta))
    return theta, n_iter, float(grad.abs().max()) <= tol


def _mode(method, glm, delta, start):
    """:func:`glm_mode`, warning where it was not reached; (θ, iterations)."""
    theta, n_iter, converged = glm_mode(glm, delta, start)
    if not converged:
        warnings.warn(
            f"refine={method!r}: the GLM mode was not reached in {n_iter} iterations "
            "(L-BFGS and Newton-CG); the refined posterior is centred at the last iterate.",
            ConvergenceWarning)
    return theta, n_iter


def _conjugate_gradient(matvec, b, atol, max_iter=1000):
    """x ≈ A⁻¹ b for an SPD operator A by conjugate gradients (‖A x − b‖∞ ≤ atol)."""
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = float(r @ r)
    for _ in range(max_iter):
        if float(r.abs().max()) <= atol:
            break
        Ap = matvec(p)
        alpha = rr / float(p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rr, rr_old = float(r @ r), rr
        p = r + (rr / rr_old) * p
    return x

