"""The linearized net as a generalized linear model, on the cached training Jacobians.

    f_lin(x; θ) = f(x; θ*) + J(x) (θ − θ*),
    L(θ) = s · Σ_n w_n ℓ(y_n, f_lin(x_n; θ)) + ½ θᵀ D θ,

with ℓ the per-row negative log-likelihood, s the curvature scale, w_n the row
weights and D = diag δ the prior precision.  :class:`GLM` holds the data term, its
gradient and its Hessian factors in f (Λ_n = F_n F_nᵀ) and the curvature
Σ_n w_n J_nᵀ Λ_n J_n as a posterior structure; the mode (:mod:`.glm_mode`) and
variational inference (:mod:`.vi`) both work on it.
"""

import torch

from ..posterior import DiagPosterior, EigenPosterior
from .jacobians import DenseJacobians, LayerJacobians


class GLM:
    """The linearized model's data term on the training Jacobians.

    ``s·Σ_n w_n ℓ_n(f)`` with ℓ the likelihood's NLL (for a Gaussian,
    ½‖out_scale ⊙ (y − f)‖²), its gradient and Hessian factors in f. ``J``: the
    Jacobians (n, C, P), or a :class:`DenseJacobians` / :class:`LayerJacobians`.
    """

    def __init__(self, likelihood, f0, J, y, theta_star, s, out_scale, weight=None):
        self.likelihood = likelihood
        self.gaussian = likelihood.has_noise
        self.jac = DenseJacobians(J) if isinstance(J, torch.Tensor) else J
        self.f0, self.y = f0, y
        self.theta_star = theta_star
        self.s = float(s)
        self.out_scale = out_scale
        self.n, self.C, self.P = self.jac.n, self.jac.C, self.jac.P
        self.dtype, self.device = f0.dtype, f0.device
        self.w = (torch.ones(self.n, dtype=self.dtype, device=self.device) if weight is None
                  else weight.to(self.dtype))

    def outputs(self, theta):
        return self.f0 + self.jac.matvec(theta - self.theta_star)

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
        return self.jac.rmatvec(g)

    def curvature_posterior(self, F, structure):
        """The posterior structure of Σ_n w_n J_nᵀ F_n F_nᵀ J_n (full: :func:`eigen_posterior`;
        diag: its diagonal)."""
        F = F * self.w.sqrt()[:, None, None]
        if structure == "diag":
            return DiagPosterior(self.jac.gram_diagonal(F @ F.transpose(1, 2)))
        if isinstance(self.jac, LayerJacobians):
            return EigenPosterior.from_matrix(self.jac.gram(F @ F.transpose(1, 2)))
        return eigen_posterior(self.jac.factor(F))


def eigen_posterior(U):
    """The full posterior structure of the curvature U Uᵀ, through the smaller of the
    P × P matrix and the kernel UᵀU."""
    if U.shape[1] < U.shape[0]:
        return EigenPosterior.from_factor(U)
    return EigenPosterior.from_matrix(U @ U.T)
