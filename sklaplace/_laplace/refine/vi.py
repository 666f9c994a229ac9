"""``refine="vi"``: Gaussian variational inference in the GLM by natural-gradient steps.

q(θ) = N(m, S) maximizes the ELBO E_q[−s Σ_n w_n ℓ_n] − KL(q ‖ N(0, D⁻¹)) (Khan et
al. 2018, the "VON" update with exact output-space expectations): with the
expectations over f_n ~ N(f_lin(x_n; m), J_n S J_nᵀ) (exact for a Gaussian
likelihood, Gauss–Hermite quadrature for one logit, randomized quasi-Monte Carlo
with fixed points for a softmax),

    S⁻¹ ← (1 − β) S⁻¹ + β (s Σ_n w_n J_nᵀ E[Λ_n] J_n + D),
    m   ← m − β S (s Σ_n w_n J_nᵀ E[∇_f ℓ_n] + D m),

from the Laplace-GGN posterior at θ*, full or diagonal S; a step that lowers the
ELBO is retried at half the step size.  Diagonal S with a Gaussian likelihood takes
the mean-field optimum in closed form: the GLM's mode (:mod:`.glm_mode`) and
precision D + diag(s Σ_n w_n J_nᵀ Λ_n J_n).
"""

import numpy as np
import torch
from scipy.special import ndtri
from scipy.stats import qmc

from ..posterior import DiagPosterior, EigenPosterior
from .glm import eigen_posterior
from .glm_mode import _mode
from .jacobians import LayerJacobians

#: Natural-gradient VI: steps, initial step size β, points per row for the expectations
#: of the categorical (quasi-Monte Carlo, a power of 2) and Bernoulli (Gauss–Hermite)
#: likelihoods.
VI_STEPS = {"full": 20, "diag": 100}
VI_STEP_SIZE = 1.0
#: VI stops when an accepted step raises the ELBO by less than this, relative to |ELBO|.
VI_RTOL = 1e-12
VI_POINTS = 64


def _sym_sqrt(A):
    """B with B Bᵀ = A for a batch of PSD C × C matrices (n, C, C)."""
    if A.shape[-1] == 1:
        return A.clamp_min(0).sqrt()
    evals, evecs = torch.linalg.eigh(A)
    return evecs * evals.clamp_min(0).sqrt()[:, None, :]


def _chol_of_cov(V):
    """Cholesky factors of per-row covariances (n, C, C), jittered where needed."""
    eye = torch.eye(V.shape[-1], dtype=V.dtype, device=V.device)
    jitter = 1e-10 * (V.diagonal(dim1=1, dim2=2).mean(-1).clamp_min(1e-30))[:, None, None]
    L, info = torch.linalg.cholesky_ex(V + jitter * eye)
    if bool((info > 0).any()):
        L = _sym_sqrt(V)
    return L


class _Expectations:
    """E_q[ℓ_n], E_q[∂ℓ_n/∂f] and E_q[Λ_n] under f_n ~ N(μ_n, V_n).

    Gaussian: closed form. One logit (Bernoulli): Gauss–Hermite quadrature on
    ``VI_POINTS`` nodes. Categorical: randomized quasi-Monte Carlo, that many
    points of a Sobol sequence per row, scrambled independently for each row and
    mapped to standard normals (on softmax regression the fixed point's error was
    a fifth of 1,024 Monte Carlo draws'). The points stay fixed, so the ELBO is a
    deterministic function of (m, S) and step acceptance is meaningful.
    """

    def __init__(self, glm, generator):
        self.glm = glm
        self.eps = self.weights = None
        if glm.gaussian:
            return
        if glm.C == 1:
            nodes, weights = np.polynomial.hermite_e.hermegauss(VI_POINTS)
            eps = torch.as_tensor(nodes, dtype=glm.dtype)[:, None, None].expand(-1, glm.n, 1)
            weights = weights / weights.sum()
        else:  # CPU points: the same on any device
            rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
            u = np.stack([qmc.Sobol(glm.C, scramble=True, seed=rng).random(VI_POINTS)
                          for _ in range(glm.n)], 1)
            eps = torch.as_tensor(ndtri(np.clip(u, 1e-16, 1 - 1e-16)), dtype=glm.dtype)
            weights = np.full(VI_POINTS, 1.0 / VI_POINTS)
        self.eps = eps.to(glm.device)
        self.weights = torch.as_tensor(weights, dtype=glm.dtype, device=glm.device)

    def nll(self, mu, V):
        glm = self.glm
        if glm.gaussian:
            trace = (V.diagonal(dim1=1, dim2=2) * glm.out_scale**2).sum(-1)
            return glm.row_nll(mu) + 0.5 * trace
        nll = torch.stack([glm.row_nll(fs) for fs in self._samples(mu, V)])
        return (self.weights[:, None] * nll).sum(0)

    def grad_and_hessian(self, mu, V):
        """(E[∂ℓ/∂f] (n, C), E[Λ] (n, C, C))."""
        glm = self.glm
        if glm.gaussian:
            F = glm.factors(mu)
            return glm.residual(mu), F @ F.transpose(1, 2)
        grad = torch.zeros_like(mu)
        hess = torch.zeros(glm.n, glm.C, glm.C, dtype=mu.dtype, device=mu.device)
        for w, fs in zip(self.weights, self._samples(mu, V)):
            grad += w * glm.residual(fs)
            F = glm.factors(fs)
            hess += w * (F @ F.transpose(1, 2))
        return grad, hess

    def _samples(self, mu, V):
        L = _chol_of_cov(V)
        return mu[None] + torch.einsum("ncd,snd->snc", L, self.eps)


class _Gaussian:
    """q(θ) = N(m, S) with S⁻¹ = D + Jᵀ A J (full) or D + diag(Jᵀ A J) (diag).

    A is block-diagonal with one C × C block per training row (``A`` (n, C, C)):
    natural-gradient steps only ever mix such precisions, and the optimal
    Gaussian of a GLM has this form (Opper & Archambeau, 2009).  U = Jᵀ A^½
    (P × n·C) gives Jᵀ A J = U Uᵀ; the full covariance is handled in weight
    space (P × P) or, when n·C < P, through the n·C × n·C capacitance
    I + Uᵀ D⁻¹ U (Woodbury and the determinant lemma).  With U = Jᵀ B (B = A^½
    block-diagonal), Uᵀ D⁻¹ U = Bᵀ K B and J D⁻¹ U = K B come from the prior kernel
    K = J D⁻¹ Jᵀ (``prior_kernel``, (n, C, n, C)), which no step changes: the steps
    cost O((n·C)³) instead of O((n·C)²·P).
    """

    def __init__(self, structure, glm, m, A, delta, prior_kernel=None):
        self.structure, self.glm, self.m, self.A, self.delta = structure, glm, m, A, delta
        self.kernel = False
        self.gram = self._covariance = None
        if structure == "diag":  # diag(Jᵀ A J): no P × n·C factor
            self.h = glm.jac.gram_diagonal(A)
            self.precision = delta + self.h
            return
        if isinstance(glm.jac, LayerJacobians):  # weight space from the layer factors
            self.gram = glm.jac.gram(A)
            precision = self.gram.clone()
            precision.diagonal().add_(delta)
            self.chol = torch.linalg.cholesky(precision)
            return
        B = _sym_sqrt(A)  # (n, C, K)
        self.U = glm.jac.factor(B)
        if self.U.shape[1] < glm.P:
            self.kernel = True
            self.UD = self.U / delta[:, None]
            K = _prior_kernel(glm, delta) if prior_kernel is None else prior_kernel
            self.K = K
            W = torch.einsum("ncmd,mdl->ncml", K, B)  # J D⁻¹ U, rows (n, c), columns (m, l)
            G = torch.einsum("nck,ncml->nkml", B, W)  # Uᵀ D⁻¹ U
            self.W = W.reshape(glm.n * glm.C, -1)
            self.G = G.reshape(self.W.shape[1], -1)
            self.chol = torch.linalg.cholesky(
                self.G + torch.eye(self.G.shape[0], dtype=G.dtype, device=G.device))
        else:
            self.kernel = False
            precision = self.U @ self.U.T
            precision.diagonal().add_(delta)
            self.chol = torch.linalg.cholesky(precision)

    def output_cov(self):
        """V_n = J_n S J_nᵀ for every training row, (n, C, C)."""
        jac = self.glm.jac
        if self.structure == "diag":
            return jac.output_cov(1.0 / self.precision)
        if self.kernel:
            rows = torch.arange(self.glm.n, device=self.K.device)
            base = self.K[rows, :, rows, :]  # J_n D⁻¹ J_nᵀ
            X = torch.linalg.solve_triangular(self.chol, self.W.T, upper=False)
            X = X.T.reshape(self.glm.n, self.glm.C, -1)
            return base - X @ X.transpose(1, 2)
        if self.gram is not None:
            return jac.output_cov_dense(self.covariance())
        n, C, P = jac.J.shape
        X = torch.linalg.solve_triangular(self.chol, jac.flat.T, upper=False)
        X = X.T.reshape(n, C, P)
        return X @ X.transpose(1, 2)

    def covariance(self):
        """S (P, P), weight-space full structure."""
        if self._covariance is None:
            self._covariance = torch.cholesky_inverse(self.chol)
        return self._covariance

    def solve(self, g):
        """S g."""
        if self.structure == "diag":
            return g / self.precision
        if self.kernel:
            gd = g / self.delta
            inner = torch.cholesky_solve((self.U.T @ gd)[:, None], self.chol)[:, 0]
            return gd - self.UD @ inner
        return torch.cholesky_solve(g[:, None], self.chol)[:, 0]

    def kl(self):
        """KL(N(m, S) ‖ N(0, D⁻¹))."""
        delta, m = self.delta, self.m
        log_d = float(torch.log(delta).sum())
        if self.structure == "diag":
            logdet_prec = float(torch.log(self.precision).sum())
            trace = float((delta / self.precision).sum())
        elif self.kernel:
            logdet_prec = log_d + 2 * float(self.chol.diagonal().log().sum())
            # tr(D S) = P − tr((I + G)⁻¹ G) = P − n·K + ‖L⁻¹‖²_F with L Lᵀ = I + G
            eye = torch.eye(self.G.shape[0], dtype=self.G.dtype, device=self.G.device)
            inverse = torch.linalg.solve_triangular(self.chol, eye, upper=False)
            trace = self.glm.P - self.G.shape[0] + float(inverse.square().sum())
        else:
            logdet_prec = 2 * float(self.chol.diagonal().log().sum())
            trace = float((delta * self.covariance().diagonal()).sum())
        return 0.5 * (trace + float((delta * m**2).sum()) - m.numel() + logdet_prec - log_d)

    def posterior(self):
        """The prediction structure of this q (its precision with prior δ and s = 1)."""
        one = torch.tensor(1.0, dtype=self.m.dtype, device=self.m.device)
        delta = self.delta if self.delta.unique().numel() > 1 else self.delta[0]
        if self.structure == "diag":
            return DiagPosterior(self.h).with_prior(delta, one)
        if self.gram is not None:
            return EigenPosterior.from_matrix(self.gram).with_prior(delta, one)
        return eigen_posterior(self.U).with_prior(delta, one)


def _prior_kernel(glm, delta):
    """J D⁻¹ Jᵀ of the training rows, (n, C, n, C)."""
    flat = glm.jac.flat
    return (flat @ (flat.T / delta[:, None])).reshape(glm.n, glm.C, glm.n, glm.C)


def _elbo(glm, q, expect):
    V = q.output_cov()
    mu = glm.outputs(q.m)
    data = glm.s * float(glm.w @ expect.nll(mu, V))
    return -(data + q.kl()), mu, V


def natural_gradient_vi(glm, delta, structure, generator, steps=None):
    """Natural-gradient Gaussian VI in the GLM from the Laplace-GGN posterior at θ*.

    Returns (q, ELBO at the start, ELBO at the end, steps taken).
    """
    delta = delta.expand(glm.P) if delta.dim() == 0 else delta
    expect = _Expectations(glm, generator)
    scale = (glm.s * glm.w)[:, None, None]
    F0 = glm.factors(glm.f0)
    A0 = scale * (F0 @ F0.transpose(1, 2))
    try:
        q = _Gaussian(structure, glm, glm.theta_star.clone(), A0, delta)
    except torch.linalg.LinAlgError as error:
        raise ValueError(
            "refine='vi' cannot start: the Laplace posterior's precision at the MAP is not "
            "numerically positive definite (the likelihood's curvature spans too many orders "
            "of magnitude, e.g. targets fitted without noise). Use refine='laplace' or "
            "refine=None, or check the data (constant or duplicated targets).") from error
    kernel = q.K if q.kernel else None
    elbo, mu, V = _elbo(glm, q, expect)
    start = elbo
    if glm.gaussian and structure == "diag":
        # The mean-field optimum in closed form (Λ_n is constant): the mean is the GLM's mode
        # (its posterior mean), the precision D + diag(s Σ Jᵀ Λ J), q's already. The
        # natural-gradient mean steps are Jacobi iterations on correlated Jacobians: hundreds
        # to thousands of steps to get there.
        q.m, n_iter = _mode("vi", glm, delta, glm.theta_star)
        return q, start, _elbo(glm, q, expect)[0], n_iter
    beta = VI_STEP_SIZE
    steps = VI_STEPS[structure] if steps is None else steps
    done = 0
    for done in range(1, steps + 1):
        grad_f, hess = expect.grad_and_hessian(mu, V)
        target = scale * hess
        grad = glm.s * glm.pull_back(grad_f * glm.w[:, None]) + delta * q.m
        first_try = True
        while True:
            try:
                trial = _Gaussian(structure, glm, q.m, (1 - beta) * q.A + beta * target, delta,
                                  kernel)
            except torch.linalg.LinAlgError:
                trial = None
            if trial is not None:
                trial.m = q.m - beta * trial.solve(grad)
                value, mu_t, V_t = _elbo(glm, trial, expect)
                if value >= elbo:
                    gain = value - elbo
                    q, elbo, mu, V = trial, value, mu_t, V_t
                    if gain <= VI_RTOL * abs(elbo):
                        return q, start, elbo, done
                    break
            beta /= 2
            first_try = False
            if beta < 1e-4:
                return q, start, elbo, done
        if first_try:  # grow β only after a step accepted as proposed: a rejected trial
            beta = min(VI_STEP_SIZE, 2 * beta)  # costs as much as an accepted one
    return q, start, elbo, done

