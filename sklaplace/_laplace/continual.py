"""Continual learning: the posterior of one task is the prior of the next.

``partial_fit(X_t, y_t)`` implements the recursive Laplace approximation of
Laplace Redux, Appendix C.4 (Eqs. 14–16; Kirkpatrick et al. 2017, Huszár 2018,
Ritter et al. 2018).  After tasks 1 … t the posterior is

    N(θ*_t, Σ_t),   Σ_t = (s·Σ_{t'≤t} H_{t'} + D)⁻¹,

with H_{t'} the likelihood curvature of task t' at its own MAP θ*_{t'} (GGN or
empirical Fisher, at unit noise and temperature), s the curvature scale (1/T,
times 1/σ² for a Gaussian likelihood) and D = diag(δ) the prior precision.

Task t is Bayesian inference with the previous posterior as its prior,
N(θ*_{t−1}, Λ_{t−1}⁻¹) with Λ_{t−1} = s·H_{<t} + D:

- **MAP**: the net starts at θ*_{t−1} and minimises, per batch,
  mean_i(−log p(y_i | f(x_i)))/T + ½(θ − θ*_{t−1})ᵀ Λ_{t−1} (θ − θ*_{t−1}) / N_t
  (:class:`TaskPrior` is the quadratic; ``nets.MAPLoss`` divides it by N_t).
- **Curvature**: H_t at θ*_t on the task's rows, added to the running sum:
  exactly for the diagonal and the full matrix; for Kronecker factors the sums
  of the factors, G = Σ_t G_t and A = Σ_t N_t·Ā_t / Σ_t N_t — the factors
  that one Kronecker fit computes on the union of the tasks' rows, so at a
  fixed θ the sequence equals that fit exactly (Ritter et al. add factors too).
- **Evidence** of the task given the earlier ones, p(D_t | D_<t) (Eq. 15's
  normalizer), with the prior mean in its quadratic term:
  log p(D_t | θ*_t) − ½ Δᵀ Λ_{t−1} Δ + ½ log det Λ_{t−1} − ½ log det Λ_t,
  Δ = θ*_t − θ*_{t−1}; δ (and σ) are re-tuned on it per task.  For a linear
  model with a Gaussian likelihood and the full structure every step is
  exact, so the per-task evidences sum to the evidence of the union (the
  diagonal and Kronecker priors approximate Λ_{t−1}: the next MAP moves).

The calls themselves (training from θ*_{t−1}, storing the fit) are orchestrated by
``sklaplace.estimators._continual``; this module is their maths.

Supported: all weights with the full, diagonal or Kronecker structure (not the
last layer, a subnetwork or the low-rank structure: the curvature of weights
outside the LA would be missing from the prior), scalar ``sigma_noise``,
evidence tuning or none.
"""

from dataclasses import dataclass

import numpy as np
import torch

from .evidence import Evidence
from .posterior import DiagPosterior, EigenPosterior, KronPosterior

STRUCTURES = ("full", "diag", "kron")


# ---------------------------------------------------------------- the task in progress
@dataclass(frozen=True)
class Task:
    """One ``partial_fit`` call's task, as the fit of its Laplace approximation reads it.

    ``previous`` (the posterior after the earlier tasks), ``prior_mean`` (their MAP
    θ*_{t−1}), ``n_previous`` (their rows, or total weight) and ``n_tasks`` (how many)
    are None / 0 on the first task; ``classes`` is the first classifier call's ``classes``;
    ``outside`` the earlier tasks' kernel of the variance outside their range (or None).
    """

    previous: object = None
    prior_mean: torch.Tensor = None
    n_previous: float = 0.0
    n_tasks: int = 0
    classes: np.ndarray = None
    outside: object = None


# ---------------------------------------------------------------- curvature sums
def _dense(Q, e):
    return (Q * e) @ Q.T


def curvature_matrix(posterior):
    """The likelihood curvature H (P × P) a full posterior holds: V diag(λ) Vᵀ."""
    return _dense(posterior.V, posterior.lam)


def kron_factors(posterior):
    """The blocks (slice, factors) of a Kronecker posterior, factors rebuilt from
    their eigendecompositions: [G, Ā] for a weight, [G] for a bias."""
    return [(sl, [_dense(Q, e) for Q, e in factors]) for sl, factors, _ in posterior.blocks]


def add_curvature(previous, current, n_previous, n_current):
    """The posterior structure of the summed curvature of two sets of tasks.

    Diagonal and full: H_prev + H_cur exactly.  Kronecker: per weight block
    [G_prev + G_cur, (n_prev·Ā_prev + n_cur·Ā_cur) / (n_prev + n_cur)] (G is a sum
    over rows, Ā a mean), per bias block G_prev + G_cur: the factors of the union.
    """
    if previous.structure != current.structure:
        raise ValueError(f"Cannot add a {current.structure!r} curvature to a "
                         f"{previous.structure!r} one.")
    if previous.structure == "diag":
        return DiagPosterior(previous.h + current.h)
    if previous.structure == "full":
        from .curvature import check_budget, memory_budget

        P = previous.n_params
        check_budget(8 * P * P * 3, "The summed full curvature",
                     memory_budget(previous.V.device),
                     "hessian_structure='kron' or 'diag'")
        H = curvature_matrix(previous) + curvature_matrix(current)
        return EigenPosterior.from_matrix(0.5 * (H + H.T))
    if previous.structure == "kron":
        total = n_previous + n_current
        blocks = []
        for (sl, old), (sl_new, new) in zip(kron_factors(previous), kron_factors(current)):
            if (sl.start, sl.stop) != (sl_new.start, sl_new.stop) or len(old) != len(new):
                raise ValueError("The Kronecker blocks of the two tasks differ.")
            factors = [old[0] + new[0]]
            if len(old) == 2:
                factors.append((n_previous * old[1] + n_current * new[1]) / total)
            blocks.append((sl, factors))
        return KronPosterior(blocks, previous.n_params)
    raise ValueError(f"partial_fit does not support hessian_structure={previous.structure!r}.")


# ---------------------------------------------------------------- the quadratic of the prior
class _Quadratic:
    """dᵀ H d for the curvature H of a posterior structure, differentiable in d.

    Holds the curvature in the eigenbasis (diag: h; full: V, λ; Kronecker: per
    block the factors' eigenvectors and the products of their eigenvalues), in
    any dtype and device (cast on first use for each).
    """

    def __init__(self, posterior):
        self.structure = posterior.structure
        if self.structure == "diag":
            self.tensors = [posterior.h]
        elif self.structure == "full":
            self.tensors = [posterior.V, posterior.lam]
        elif self.structure == "kron":
            self.slices = [sl for sl, _, _ in posterior.blocks]
            self.tensors = [t for _, factors, lam in posterior.blocks
                            for t in [*(Q for Q, _ in factors), lam]]
            self.n_factors = [len(factors) for _, factors, _ in posterior.blocks]
        else:
            raise ValueError(f"partial_fit does not support hessian_structure={self.structure!r}.")
        self._cast = {}

    def _on(self, like):
        key = (like.device, like.dtype)
        if key not in self._cast:
            self._cast = {key: [t.to(device=like.device, dtype=like.dtype) for t in self.tensors]}
        return self._cast[key]

    def __call__(self, d):
        tensors = self._on(d)
        if self.structure == "diag":
            return (tensors[0] * d**2).sum()
        if self.structure == "full":
            V, lam = tensors
            return (lam * (d @ V) ** 2).sum()
        total, i = 0.0, 0
        for sl, k in zip(self.slices, self.n_factors):
            Qs, lam = tensors[i:i + k], tensors[i + k]
            i += k + 1
            block = d[sl]
            if k == 1:
                rotated = block @ Qs[0]
            else:  # row-major vec: (Q_G ⊗ Q_A)ᵀ vec(M) = vec(Q_Gᵀ M Q_A)
                rotated = (Qs[0].T @ block.reshape(Qs[0].shape[0], Qs[1].shape[0]) @ Qs[1])
            total = total + (lam * rotated.reshape(-1) ** 2).sum()
        return total

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cast"] = {}
        return state


class TaskPrior:
    """The Gaussian prior of a task in MAP training: N(μ, (s·H + D)⁻¹).

    ``penalty(θ, δ)`` is −log prior up to a constant,
    ½ (θ − μ)ᵀ (s·H + diag(δ)) (θ − μ), for a 0-d or per-parameter δ (the
    ``prior_precision`` of ``nets.MAPLoss``), differentiable in θ, on θ's
    device and dtype.  ``μ`` is θ*_{t−1}, ``H`` the curvature of the earlier
    tasks (a posterior structure), ``s`` its scale at the training σ and T.
    """

    def __init__(self, mean, posterior, scale):
        self.mean = mean.detach()
        self.quadratic = _Quadratic(posterior)
        self.scale = float(scale)

    def penalty(self, theta, delta):
        d = theta - self.mean.to(device=theta.device, dtype=theta.dtype)
        delta = torch.as_tensor(delta).to(theta)
        return 0.5 * (self.scale * self.quadratic(d) + (delta * d**2).sum())


# ---------------------------------------------------------------- the evidence of a task
def task_evidence(evidence, task, n_rows):
    """The evidence of the current task given the earlier ones (or ``evidence`` itself
    on the first task), with the posterior of the summed curvature."""
    if task is None or task.previous is None:
        return evidence
    accumulated = add_curvature(task.previous, evidence.posterior, task.n_previous, n_rows)
    return TaskEvidence(evidence, accumulated, task.previous, task.prior_mean)


class TaskEvidence(Evidence):
    """log p(D_t | D_<t) of the Laplace approximation, a function of (δ, σ).

    ``log p(D_t | θ*_t) − ½ Δᵀ (s·H_<t + D) Δ + ½ log det(s·H_<t + D)
    − ½ log det(s·H_≤t + D)`` with Δ = θ*_t − θ*_{t−1}: the evidence of
    :class:`~sklaplace._laplace.evidence.Evidence` with the previous posterior as the
    prior (a non-zero mean, a structured precision).  ``posterior`` holds the
    summed curvature H_≤t, ``prior_posterior`` H_<t.
    """

    def __init__(self, evidence, posterior, prior_posterior, prior_mean):
        super().__init__(
            posterior, evidence.theta, evidence.temperature, evidence.n_rows,
            sse=evidence.sse, nll=evidence.nll, curvature=evidence.curvature)
        self.prior_posterior = prior_posterior
        self.prior_mean = prior_mean.detach()
        d = (self.theta - self.prior_mean).detach()
        with torch.no_grad():
            self._curvature_quadratic = _Quadratic(prior_posterior)(d)
        self._d2 = d**2

    def __call__(self, delta, sigma=None, index=None):
        delta, sigma, index = self._on_theta_device(delta, sigma, index)
        loglik = self.log_likelihood(sigma)
        s = self.scale(sigma)
        per_weight = delta[index] if index is not None and delta.dim() > 0 else delta
        quadratic = s * self._curvature_quadratic + (per_weight * self._d2).sum()
        return (
            loglik
            - 0.5 * quadratic
            + 0.5 * self.prior_posterior.log_det(delta, s, index=index)
            - 0.5 * self.posterior.log_det(delta, s, index=index)
        )
