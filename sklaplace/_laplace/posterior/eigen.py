"""Full and low-rank posteriors from an eigendecomposition of the curvature.

H ≈ V diag(λ) Vᵀ with orthonormal V of shape (P, r): r = P for the full GGN
built as a matrix, r = rank ≤ N·C when it comes from the N·C × N·C kernel
(determinant lemma, exact), r = k for the low-rank structure.

With a scalar prior δ the log-determinant costs O(r) per evaluation:
    log det(sVΛVᵀ + δI) = Σ log(sλ_i + δ) + (P − r) log δ.
A per-parameter prior D refactorizes the r × r capacitance matrix instead:
    log det(D + sVΛVᵀ) = log det D + log det(I + sΛ^½ VᵀD⁻¹V Λ^½).
Its value costs O(L r² + r³) when D is constant on L runs of parameters (the
Gram matrices V_lᵀV_l of the runs are computed once), else O(P r²).  Its
gradient depends on which values are *tied*, not on which happen to be equal:

- per-parameter δ (``index=None``): ∂/∂δ_i = −δ_i⁻² v_iᵀ Ḡ v_i with Ḡ the
  gradient of VᵀD⁻¹V, exact for every parameter, O(P r²);
- grouped δ (``index`` given, parameter i has the value δ[index[i]]): the runs
  of equal *labels* are fixed by the grouping, so the gradient with respect to
  each group's value costs O(L r²) and stays exact when two groups take the same
  value (e.g. the uniform prior that tuning starts from).

For prediction, W = D^{-½} V (sΛ)^½ = Q diag(ω) Rᵀ (thin SVD) gives
    Σ = D^{-½} (I + W Wᵀ)⁻¹ D^{-½} = D^{-½} (I + Q diag(1/(1+ω²) − 1) Qᵀ) D^{-½}.
"""

import contextlib

import numpy as np
import scipy.linalg
import torch

from ..threads import single_threaded_blas
from .base import Posterior


def _eigenvalues(M):
    """Eigenvalues of the symmetric ``M``, ascending. On the CPU by scipy's LAPACK, whose
    values-only reduction is about twice as fast as torch's (a 1,200-row kernel: 60 against
    120 ms), on one BLAS thread where torch's thread policy chose one."""
    if M.device.type == "cpu" and M.dtype in (torch.float32, torch.float64):
        blas = single_threaded_blas() if torch.get_num_threads() == 1 else contextlib.nullcontext()
        try:
            with blas:
                values = scipy.linalg.eigh(M.detach().numpy(), eigvals_only=True,
                                          check_finite=False)
            if np.isfinite(values).all():  # else torch's, which raises as it did before
                return torch.from_numpy(np.ascontiguousarray(values))
        except (np.linalg.LinAlgError, ValueError):
            pass
    try:
        return torch.linalg.eigvalsh(M)
    except torch.linalg.LinAlgError:  # eigh's divide-and-conquer converges more often
        return torch.linalg.eigh(M)[0]


class _SPDLogDet(torch.autograd.Function):
    """log det of an SPD matrix by Cholesky; backward C⁻¹ from the same factor
    (three times cheaper than differentiating through the Cholesky)."""

    @staticmethod
    def forward(ctx, C):
        L = torch.linalg.cholesky(C)
        ctx.save_for_backward(L)
        return 2 * L.diagonal().log().sum()

    @staticmethod
    def backward(ctx, grad):
        (L,) = ctx.saved_tensors
        return grad * torch.cholesky_inverse(L)


class _WeightedGram(torch.autograd.Function):
    """Vᵀ D⁻¹ V for a per-parameter δ with the exact per-parameter gradient.

    The value comes from the Gram matrices of the runs on which δ is constant
    (cached by the posterior), but those runs are only a property of the current
    values: two parameters with equal δ are not tied, so the backward gives every
    parameter its own derivative ∂/∂δ_i = −δ_i⁻² Σ_jk Ḡ_jk V_ij V_ik.
    """

    @staticmethod
    def forward(ctx, delta, posterior):
        ctx.save_for_backward(delta)
        ctx.V = posterior.V
        return posterior._gram_from_runs(delta, _value_cuts(delta))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (delta,) = ctx.saved_tensors
        V = ctx.V
        return -((V @ grad) * V).sum(1) / delta**2, None


def _value_cuts(values):
    """Start indices (after the first) of the runs of equal entries of a 1-d tensor."""
    with torch.no_grad():
        return tuple((torch.nonzero(values[1:] != values[:-1]).flatten() + 1).tolist())


class EigenPosterior(Posterior):
    def __init__(self, eigvecs, eigvals, n_params, structure="full"):
        self.V = eigvecs
        self.lam = eigvals.clamp_min(0)
        self.n_params = n_params
        self.structure = structure

    @classmethod
    def from_matrix(cls, H, rank=None, structure="full"):
        lam, V = torch.linalg.eigh(H)
        if rank is not None:
            lam, V = lam[-rank:], V[:, -rank:]
        return cls(V, lam, H.shape[0], structure)

    @classmethod
    def spectrum(cls, M, n_params, structure="full"):
        """Eigenvalues only of the curvature (``M`` = H, or the kernel UᵀU with the same
        nonzero spectrum): log det at a scalar prior, no prediction or sampling."""
        kappa = _eigenvalues(M)
        if M.shape[0] < n_params:  # the kernel: drop its numerical zeros as from_factor does
            kappa = kappa[kappa > kappa.max().clamp_min(0) * n_params * torch.finfo(M.dtype).eps]
        return cls(None, kappa, n_params, structure)

    @classmethod
    def from_factor(cls, U, rank=None, structure="full"):
        """From H = U Uᵀ with U of shape (P, m), through the m × m kernel UᵀU."""
        kappa, E = torch.linalg.eigh(U.T @ U)
        keep = kappa > kappa.max().clamp_min(0) * U.shape[0] * torch.finfo(U.dtype).eps
        kappa, E = kappa[keep], E[:, keep]
        if rank is not None:
            kappa, E = kappa[-rank:], E[:, -rank:]
        V = U @ (E / kappa.sqrt())  # scale the m × m eigenvectors, not the P × m product
        return cls(V, kappa, U.shape[0], structure)

    @property
    def rank(self):
        return self.lam.numel()

    def scalar_spectrum(self):
        return self.lam, self.n_params

    def log_det(self, delta, s, index=None):
        """log det(s·H + D); D from a 0-d δ, one δ per parameter, or — with ``index``
        (P,) — one δ per group, parameter i having δ[index[i]] (gradients with
        respect to the group values; see the module docstring)."""
        if delta.dim() == 0:
            return torch.log(s * self.lam + delta).sum() + (self.n_params - self.rank) * torch.log(
                delta
            )
        root = s.sqrt() * self.lam.sqrt()  # not (s·λ)^½: its gradient is NaN at λ = 0
        if index is None:
            log_det_prior, gram = torch.log(delta).sum(), _WeightedGram.apply(delta, self)
        else:
            counts, cuts = self._index_runs(index, delta.numel())
            log_det_prior = (counts.to(delta.dtype) * torch.log(delta)).sum()
            if len(cuts) >= self.MAX_RUNS:
                gram = _WeightedGram.apply(delta[index], self)
            else:
                # The runs of equal labels are the grouping itself, whatever the values.
                grams, starts = self._run_grams(cuts)
                gram = torch.einsum("g,gij->ij", 1 / delta[index[starts]], grams)
        capacitance = gram * root[:, None] * root[None, :]
        capacitance = capacitance + torch.eye(self.rank, dtype=capacitance.dtype,
                                              device=capacitance.device)
        return log_det_prior + _SPDLogDet.apply(capacitance)

    MAX_RUNS = 64
    _CACHED_PARTITIONS = 4

    def _gram_from_runs(self, delta, cuts):
        """Vᵀ diag(δ)⁻¹ V for δ constant on the runs starting at ``cuts`` (the value only:
        differentiable in δ[run start] alone); densely when the runs are many."""
        if len(cuts) >= self.MAX_RUNS:
            return (self.V.T / delta) @ self.V
        grams, starts = self._run_grams(cuts)
        return torch.einsum("g,gij->ij", 1 / delta[starts], grams)

    def _index_runs(self, index, n_groups):
        """(group sizes, run starts) of ``index``, kept for the last one."""
        cached = self.__dict__.get("_index_cache")
        if cached is None or cached[0] is not index or cached[1] != n_groups:
            counts = torch.bincount(index, minlength=n_groups)
            cached = self._index_cache = (index, n_groups, counts, _value_cuts(index))
        return cached[2], cached[3]

    def _run_grams(self, cuts):
        """(V_runᵀ V_run stacked, run starts) for the runs starting at ``cuts`` (cached)."""
        cache = getattr(self, "_gram_cache", None)
        if cache is None:
            cache = self._gram_cache = {}
        if cuts not in cache:
            if len(cache) >= self._CACHED_PARTITIONS:
                cache.pop(next(iter(cache)))
            edges = [0, *cuts, self.n_params]
            with torch.no_grad():
                grams = torch.stack([self.V[a:b].T @ self.V[a:b] for a, b in zip(edges, edges[1:])])
            cache[cuts] = (grams, torch.as_tensor(edges[:-1], device=self.V.device))
        return cache[cuts]

    def _apply_prior(self, delta, s):
        self._gram_cache = self._index_cache = None  # tuning caches, not needed for prediction
        delta = delta.detach().to(self.V.device)
        if delta.dim() == 0:
            self._d_inv_sqrt = delta.rsqrt().expand(self.n_params)
            self._Q, omega2 = self.V, s * self.lam / delta
        else:
            self._d_inv_sqrt = delta.rsqrt()
            W = self._d_inv_sqrt[:, None] * self.V * (s * self.lam).sqrt()
            self._Q, omega, _ = torch.linalg.svd(W, full_matrices=False)
            omega2 = omega**2
        self._omega2 = omega2
        return self

    @property
    def _complete(self):
        return self._Q.shape[1] == self.n_params

    def functional_variance(self, J):
        A = J * self._d_inv_sqrt
        AQ = A @ self._Q
        if self._complete:
            return (AQ / (1 + self._omega2)) @ AQ.transpose(1, 2)
        shrink = 1 / (1 + self._omega2) - 1
        return A @ A.transpose(1, 2) + (AQ * shrink) @ AQ.transpose(1, 2)

    def last_layer_variance(self, phi, n_out, has_bias, scratch=False):
        """J Σ Jᵀ for f = W φ + b without forming J (θ = [vec W, b]): O(n C H r).

        ``phi`` is only read, ``scratch`` or not.
        """
        n_w = n_out * phi.shape[1]
        M = self._d_inv_sqrt[:, None] * self._Q
        n, H, r = phi.shape[0], phi.shape[1], M.shape[1]
        # (n, H) @ (H, C·r): JM[n, c, r] = Σ_h φ_nh M[(c, h), r]
        JM = (phi @ M[:n_w].reshape(n_out, H, r).transpose(0, 1).reshape(H, n_out * r)).reshape(
            n, n_out, r)
        if has_bias:
            JM = JM + M[n_w:]
        if self._complete:
            return (JM / (1 + self._omega2)) @ JM.transpose(1, 2)
        d_inv = self._d_inv_sqrt**2
        AAt = (phi**2) @ d_inv[:n_w].reshape(n_out, -1).T
        if has_bias:
            AAt = AAt + d_inv[n_w:]
        shrink = 1 / (1 + self._omega2) - 1
        return torch.diag_embed(AAt) + (JM * shrink) @ JM.transpose(1, 2)

    def sample(self, n_samples, generator):
        # drawn on the CPU (the generator's device): the same draws on every device
        z = torch.randn(n_samples, self.n_params, generator=generator,
                        dtype=self.V.dtype).to(self.V.device)
        zq = z @ self._Q
        if self._complete:
            return ((zq / (1 + self._omega2).sqrt()) @ self._Q.T) * self._d_inv_sqrt
        shrink = (1 + self._omega2).rsqrt() - 1
        return (z + (zq * shrink) @ self._Q.T) * self._d_inv_sqrt

    def marginal_variance(self):
        q = (self._Q**2) @ (1 / (1 + self._omega2))
        if not self._complete:
            q = 1 + (self._Q**2) @ (1 / (1 + self._omega2) - 1)
        return self._d_inv_sqrt**2 * q

    def cov_matmat(self, X):
        """Σ X = D^{-½} (I + Q diag(1/(1+ω²) − 1) Qᵀ) D^{-½} X for X of shape (P, k)."""
        U = self._d_inv_sqrt[:, None] * X
        shrink = 1 / (1 + self._omega2) - 1
        return self._d_inv_sqrt[:, None] * (U + self._Q @ (shrink[:, None] * (self._Q.T @ U)))

    def precision_matmat(self, X):
        """Σ⁻¹ X = D^{½} (I + Q diag(ω²) Qᵀ) D^{½} X for X of shape (P, k)."""
        U = X / self._d_inv_sqrt[:, None]
        return (U + self._Q @ (self._omega2[:, None] * (self._Q.T @ U))) / self._d_inv_sqrt[:, None]

    def log_det_cov(self):
        """log det Σ = −log det D − Σ log(1 + ω²)."""
        return 2 * torch.log(self._d_inv_sqrt).sum() - torch.log1p(self._omega2).sum()
