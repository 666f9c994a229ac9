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
    :data:`.vi.VI_STEPS` steps or when the ELBO stops rising.  Diagonal S with a
    Gaussian likelihood takes the mean-field optimum in closed form instead: the
    GLM's mode (its posterior mean) and precision D + diag(s Σ_n w_n J_nᵀ Λ_n J_n).

Either way the predictive is the GLM predictive of the refined Gaussian N(m, S):
logits (or outputs) f(x; θ*) + J(x)(m − θ*) with covariance J(x) S J(x)ᵀ — the
refined mode moves the predictive mean as well as its covariance.

The package: :mod:`.jacobians` (the cached training Jacobians, dense or per layer),
:mod:`.glm` (the GLM's data term on them), :mod:`.glm_mode` (``"laplace"``: the mode
and the log joint), :mod:`.vi` (``"vi"``: the ELBO, its expectations, the
natural-gradient steps); here the entry, :func:`refine_posterior`, and the
:class:`RefinedSubset` it returns.
"""

import torch

from .glm import GLM
from .glm_mode import _mode, log_joint
from .jacobians import training_jacobians
from .vi import natural_gradient_vi

#: Bytes of the cached training Jacobians (N·C·P float64) above which refinement is refused.
#: The documented limit (the estimators' ``refine``); :func:`refine_posterior` reads it at each
#: call and passes it to :func:`.jacobians.training_jacobians`.
JACOBIAN_BUDGET = 2 * 2**30

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
        f0, J = training_jacobians(subset, X, n_out, structure, JACOBIAN_BUDGET)
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
