"""Full and low-rank posteriors from an eigendecomposition of the curvature.

H ≈ V diag(λ) Vᵀ with orthonormal V of shape (P, r): r = P for the full GGN
built as a matrix, r = rank ≤ N·C when it comes from the N·C × N·C kernel
(determinant lemma, exact), r = k for the low-rank structure.

With a scalar prior δ the log-determinant costs O(r) per evaluation:
    log det(sVΛVᵀ + δI) = Σ log(sλ_i + δ) + (P − r) log δ.
A per-parameter prior D refactorizes the r × r capacitance matrix instead:
    log det(D + sVΛVᵀ) = log det D + log det(I + sΛ^½ VᵀD⁻¹V Λ^½),
O(P r²) per evaluation, or O(L r² + r³) for a prior constant on L runs of
parameters (layer-wise), whose Gram matrices V_lᵀV_l are computed once.

For prediction, W = D^{-½} V (sΛ)^½ = Q diag(ω) Rᵀ (thin SVD) gives
    Σ = D^{-½} (I + W Wᵀ)⁻¹ D^{-½} = D^{-½} (I + Q diag(1/(1+ω²) − 1) Qᵀ) D^{-½}.
"""

import torch


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


class EigenPosterior:
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
    def from_factor(cls, U, rank=None, structure="full"):
        """From H = U Uᵀ with U of shape (P, m), through the m × m kernel UᵀU."""
        kappa, E = torch.linalg.eigh(U.T @ U)
        keep = kappa > kappa.max().clamp_min(0) * U.shape[0] * torch.finfo(U.dtype).eps
        kappa, E = kappa[keep], E[:, keep]
        if rank is not None:
            kappa, E = kappa[-rank:], E[:, -rank:]
        V = (U @ E) / kappa.sqrt()
        return cls(V, kappa, U.shape[0], structure)

    @property
    def rank(self):
        return self.lam.numel()

    def log_det(self, delta, s):
        if delta.dim() == 0:
            return torch.log(s * self.lam + delta).sum() + (self.n_params - self.rank) * torch.log(
                delta
            )
        root = s.sqrt() * self.lam.sqrt()  # not (s·λ)^½: its gradient is NaN at λ = 0
        capacitance = self._weighted_gram(delta) * root[:, None] * root[None, :]
        capacitance = capacitance + torch.eye(self.rank, dtype=capacitance.dtype)
        return torch.log(delta).sum() + _SPDLogDet.apply(capacitance)

    MAX_RUNS = 64

    def _weighted_gram(self, delta):
        """Vᵀ D⁻¹ V, from cached per-run Gram matrices when D is constant on few runs."""
        with torch.no_grad():
            cuts = (torch.nonzero(delta[1:] != delta[:-1]).flatten() + 1).tolist()
        if len(cuts) >= self.MAX_RUNS:
            return (self.V.T / delta) @ self.V
        if getattr(self, "_gram_cuts", None) != cuts:
            edges = [0, *cuts, self.n_params]
            self._grams = torch.stack([self.V[a:b].T @ self.V[a:b] for a, b in zip(edges, edges[1:])])
            self._gram_cuts, self._gram_starts = cuts, edges[:-1]
        return torch.einsum("g,gij->ij", 1 / delta[self._gram_starts], self._grams)

    def set_prior(self, delta, s):
        self._grams = self._gram_cuts = None  # tuning caches are not needed for prediction
        delta = delta.detach()
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
        z = torch.randn(n_samples, self.n_params, generator=generator, dtype=self.V.dtype)
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
