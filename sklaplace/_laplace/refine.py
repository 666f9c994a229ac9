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
:data:`JACOBIAN_BUDGET`).  On a net whose weights all sit in nn.Linear layers, J
stays factored per layer (:class:`LayerJacobians`, output c's Jacobian is
g_c ⊗ a), which needs no such array, for the diagonal structure and for the full
one in weight space (N·C ≥ P; the kernel path N·C < P needs J itself):

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
    likelihood, by Gauss–Hermite quadrature for one logit, by randomized
    quasi-Monte Carlo with fixed points for a softmax),

        S⁻¹ ← (1 − β) S⁻¹ + β (s Σ_n w_n J_nᵀ E[Λ_n] J_n + D),
        m   ← m − β S (s Σ_n w_n J_nᵀ E[∇_f ℓ_n] + D m),

    started from the Laplace-GGN posterior at θ*, full or diagonal S, β = 1
    (a Newton-like step; for a Gaussian likelihood the first step is exact).  A
    step that lowers the ELBO is retried with half the step size, and β doubles
    again (up to 1) only after a step accepted at its first size; VI stops after
    :data:`VI_STEPS` steps or when the ELBO stops rising.  Diagonal S with a
    Gaussian likelihood takes the mean-field optimum in closed form instead: the
    GLM's mode (its posterior mean) and precision D + diag(s Σ_n w_n J_nᵀ Λ_n J_n).

Either way the predictive is the GLM predictive of the refined Gaussian N(m, S):
logits (or outputs) f(x; θ*) + J(x)(m − θ*) with covariance J(x) S J(x)ᵀ — the
refined mode moves the predictive mean as well as its covariance.
"""

import functools
import warnings

import numpy as np
import torch
from scipy.special import ndtri
from scipy.stats import qmc
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

from .curvature import check_budget
from .posterior import DiagPosterior, EigenPosterior
from .posterior.diag import layer_diag_variance

#: Bytes of the cached training Jacobians (N·C·P float64) above which refinement is refused.
JACOBIAN_BUDGET = 2 * 2**30
#: The GLM mode ("laplace"): L-BFGS iterations, then at most that many Newton-CG steps, to a
#: gradient max norm of MODE_GTOL times the one at θ* (or 1).
MODE_MAX_ITER = 20_000
MODE_GTOL = 1e-9
MODE_NEWTON_STEPS = 5
#: The mode is reached when a Newton step moves θ by at most this many posterior stds.
MODE_DECREMENT = 1e-8
#: Natural-gradient VI: steps, initial step size β, points per row for the expectations
#: of the categorical (quasi-Monte Carlo, a power of 2) and Bernoulli (Gauss–Hermite)
#: likelihoods.
VI_STEPS = {"full": 20, "diag": 100}
VI_STEP_SIZE = 1.0
#: VI stops when an accepted step raises the ELBO by less than this, relative to |ELBO|.
VI_RTOL = 1e-12
VI_POINTS = 64

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

    def row_bytes(self, n_out, moments=False, posterior=None):
        # moments from the features (last layer) or from the Jacobians (the others)
        return self.base.row_bytes(n_out, moments,
                                   posterior if self.kind == "last_layer" else None)

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
                 "(the limit is sklaplace._laplace.refine.JACOBIAN_BUDGET)")
    parts = [subset.jacobians(X[sl])
             for sl in _row_slices(len(X), 8 * max(1, n_out) * subset.n_params, 2**27)]
    return torch.cat([f for f, _ in parts]), torch.cat([J for _, J in parts])


def _row_slices(n, width, budget):
    """Slices of ``n`` rows, each within ``budget`` for rows of ``width`` (at least one row)."""
    rows = max(1, int(budget // max(1, width)))
    return [slice(s, s + rows) for s in range(0, n, rows)]


def training_jacobians(subset, X, n_out, structure):
    """(f(X; θ*), the training Jacobians as :class:`LayerJacobians` where the structure
    allows it (all weights in nn.Linear layers; for the full structure only in weight
    space, n·C ≥ P, as the kernel path needs J itself), else :class:`DenseJacobians`)."""
    factored = structure == "diag" or len(X) * n_out >= subset.n_params
    if factored and hasattr(subset, "jacobian_factors"):
        factors = subset.jacobian_factors(X)
        if factors is not None:
            f, parts = factors
            return f, LayerJacobians(parts, subset.n_params)
    f, J = cached_jacobians(subset, X, n_out)
    return f, DenseJacobians(J)


class DenseJacobians:
    """The training Jacobians J (n, C, P), cached, and the products refinement needs."""

    def __init__(self, J):
        self.J = J
        self.n, self.C, self.P = J.shape
        self.flat = J.reshape(-1, self.P)

    def matvec(self, v):
        """J v, (n, C)."""
        return (self.flat @ v).reshape(self.n, self.C)

    def rmatvec(self, g):
        """Σ_n J_nᵀ g_n of per-row output vectors g (n, C), (P,)."""
        return self.flat.T @ g.reshape(-1)

    def output_cov(self, var):
        """J_n diag(var) J_nᵀ of every row, (n, C, C)."""
        return torch.cat([(self.J[sl] * var) @ self.J[sl].transpose(1, 2)
                          for sl in self._blocks()])

    def gram_diagonal(self, A):
        """diag(Σ_n J_nᵀ A_n J_n) of per-row C × C matrices A (n, C, C), (P,)."""
        h = torch.zeros(self.P, dtype=self.J.dtype, device=self.J.device)
        for sl in self._blocks():
            J = self.J[sl]
            h += (J * (A[sl] @ J)).sum((0, 1))
        return h

    def factor(self, B):
        """U (P, n·K) with Σ_n J_nᵀ B_n B_nᵀ J_n = U Uᵀ for B (n, C, K)."""
        return torch.einsum("ncp,nck->pnk", self.J, B).reshape(self.P, -1)

    def _blocks(self, budget=2**24):
        """Row slices whose Jacobian block stays within ``budget`` bytes (cache-friendly)."""
        return _row_slices(self.n, 8 * self.C * self.P, budget)


class LayerJacobians:
    """The training Jacobians of a net whose weights all sit in nn.Linear layers, kept as
    their factors: output c's Jacobian for a layer with input a and pre-activation s is
    g_c ⊗ a (g_c = ∂f_c/∂s), so every product below costs O(n·P + n·C²·Σ out) and no
    (n, C, P) array is formed. ``parts``: (weight slice, bias slice or None, a (n, in),
    G (n, C, out)) per layer, as :meth:`AllWeights.jacobian_factors` returns them.
    """

    def __init__(self, parts, n_params):
        self.parts = parts
        self.n, self.C = parts[0][3].shape[:2]
        self.P = n_params
        self.dtype, self.device = parts[0][3].dtype, parts[0][3].device

    def matvec(self, v):
        out = torch.zeros(self.n, self.C, dtype=self.dtype, device=self.device)
        for w, b, a, G in self.parts:
            s = a @ v[w].reshape(G.shape[2], a.shape[1]).T
            if b is not None:
                s = s + v[b]
            out += (G @ s[:, :, None])[..., 0]
        return out

    def rmatvec(self, g):
        result = torch.zeros(self.P, dtype=self.dtype, device=self.device)
        for w, b, a, G in self.parts:
            u = (g[:, None, :] @ G)[:, 0]  # (n, out)
            result[w] = (u.T @ a).reshape(-1)
            if b is not None:
                result[b] = u.sum(0)
        return result

    def output_cov(self, var):
        return sum(layer_diag_variance(a, G, var, w, b) for w, b, a, G in self.parts)

    def gram_diagonal(self, A):
        h = torch.zeros(self.P, dtype=self.dtype, device=self.device)
        for w, b, a, G in self.parts:
            M = ((A @ G) * G).sum(1)  # (n, out): g_oᵀ A_n g_o
            h[w] = (M.T @ a.square()).reshape(-1)
            if b is not None:
                h[b] = M.sum(0)
        return h

    @functools.cached_property
    def _layers(self):
        """Per layer: the weights' (and bias') indices as (out, in [+ 1]), the inputs a
        (with a column of ones for the bias) and G: the layer's Jacobian is g ⊗ a."""
        layers = []
        for w, b, a, G in self.parts:
            index = torch.arange(w.start, w.stop, device=self.device).reshape(G.shape[2], -1)
            if b is not None:
                bias = torch.arange(b.start, b.stop, device=self.device)[:, None]
                index = torch.cat([index, bias], 1)
                a = torch.cat([a, torch.ones(len(a), 1, dtype=a.dtype, device=a.device)], 1)
            layers.append((index, a, G))
        return layers

    def _row_chunks(self, width, budget=2**24):
        return _row_slices(self.n, width, budget)

    def gram(self, A):
        """Σ_n J_nᵀ A_n J_n (P, P): per pair of layers Σ_n (G_nᵀ A_n G'_n) ⊗ (a_n a'_nᵀ), one
        GEMM over the rows, O(n·P²) instead of O(n·C·P²)."""
        layers = self._layers
        H = torch.zeros(self.P, self.P, dtype=self.dtype, device=self.device)
        for k, (index, a, G) in enumerate(layers):
            AG = A @ G
            (o, i), rows = index.shape, index.reshape(-1)
            for index2, a2, G2 in layers[k:]:
                o2, i2 = index2.shape
                block = torch.zeros(o * o2, i * i2, dtype=self.dtype, device=self.device)
                for sl in self._row_chunks(max(o * o2, i * i2)):
                    M = (G2[sl].transpose(1, 2) @ AG[sl]).transpose(1, 2)  # (m, o, o2)
                    Z = a[sl][:, :, None] * a2[sl][:, None, :]  # (m, i, i2)
                    block += M.reshape(len(M), -1).T @ Z.reshape(len(Z), -1)
                block = block.reshape(o, o2, i, i2).permute(0, 2, 1, 3).reshape(o * i, -1)
                cols = index2.reshape(-1)
                H[rows[:, None], cols[None, :]] = block
                H[cols[:, None], rows[None, :]] = block.T
        return H

    def output_cov_dense(self, S):
        """J_n S J_nᵀ of every row for a dense S (P, P), (n, C, C), in O(n·P²)."""
        layers = self._layers
        # S's rows of each layer as (in, out·P): J_n S = Σ_layers G_n (a_nᵀ S_layer)
        rows_of = [S[index.reshape(-1)].reshape(*index.shape, -1).transpose(0, 1)
                   .reshape(index.shape[1], -1) for index, _, _ in layers]
        V = torch.zeros(self.n, self.C, self.C, dtype=self.dtype, device=self.device)
        width = max(index.shape[0] for index, _, _ in layers) * self.P
        for sl in self._row_chunks(width):
            JS = 0
            for (index, a, G), R in zip(layers, rows_of):
                Y = (a[sl] @ R).reshape(-1, index.shape[0], self.P)  # (m, out, P)
                JS = JS + G[sl] @ Y  # (m, C, P)
            for index, a, G in layers:
                Q = JS[:, :, index.reshape(-1)].reshape(*JS.shape[:2], *index.shape)
                V[sl] += (Q @ a[sl][:, None, :, None])[..., 0] @ G[sl].transpose(1, 2)
        return V


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


# ----------------------------------------------------------------------------- VI


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
    q = _Gaussian(structure, glm, glm.theta_star.clone(), A0, delta)
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


# ----------------------------------------------------------------------------- entry


def refine_posterior(method, structure, subset, likelihood, X, y, weight, delta, s, out_scale,
                     n_out, random_state=0, log=None):
    """Refine the LA of ``subset`` in its GLM; returns (RefinedSubset, posterior, info).

    ``delta``: the prior precision of the Laplace weights (0-d or (P,)), ``s`` the
    curvature scale, ``out_scale`` (C,) the per-output noise scale of a Gaussian
    likelihood (ones otherwise), ``weight`` (N,) row weights or None. ``info`` holds
    the objective at the unrefined and the refined posterior (the GLM's log joint at
    θ* and at its mode for ``"laplace"``, the ELBO for ``"vi"``), the iterations, and
    for the refined Laplace evidence the refined mean ``theta``, the GLM's ``outputs``
    there and its ``curvature`` (the GGN there, a structure without prior).
    """
    if structure not in STRUCTURES:
        raise ValueError(
            f"refine={method!r} supports hessian_structure 'full' or 'diag'; the structure "
            f"is {structure!r}. Set hessian_structure='full' or 'diag', or refine=None.")
    log = log or (lambda message: None)
    with torch.no_grad():
        f0, J = training_jacobians(subset, X, n_out, structure)
        glm = GLM(likelihood, f0, J, y, subset.theta, s, out_scale, weight)
        delta_p = delta.expand(glm.P) if delta.dim() == 0 else delta
        if method == "laplace":
            before = log_joint(glm, glm.theta_star, delta_p)
            theta, n_iter = _mode(method, glm, delta_p, glm.theta_star)
            after = log_joint(glm, theta, delta_p)
            outputs = glm.outputs(theta)
            curvature = glm.curvature_posterior(glm.factors(outputs), structure)
            posterior = curvature.with_prior(delta, s)
        else:
            generator = torch.Generator().manual_seed(int(random_state))
            q, before, after, n_iter = natural_gradient_vi(glm, delta, structure, generator)
            theta = q.m
            posterior = q.posterior()
            outputs = glm.outputs(theta)
            curvature = glm.curvature_posterior(glm.factors(outputs), structure)
    log(f"refine={method!r} ({structure}): objective {before:.6g} → {after:.6g} in "
        f"{n_iter} iterations")
    info = {"objective_init": float(before), "objective": float(after), "n_iter": int(n_iter),
            # the GLM's Laplace evidence at the refined mean (refined_evidence.py)
            "theta": theta, "outputs": outputs, "curvature": curvature}
    return RefinedSubset(subset, theta), posterior, info
