"""Kronecker-factored posterior, one block per weight or bias tensor.

A weight block has precision s·(G ⊗ A) + δ_l I (row-major weights), a bias
block s·G + δ_l I.  With G = Q_G diag(g) Q_Gᵀ and A = Q_A diag(a) Q_Aᵀ the
prior is added exactly in the eigenbasis (not damped), so
    log det = Σ_l Σ_ij log(s g_i a_j + δ_l),
O(P) per evaluation for scalar and layer-wise priors.
"""

import torch


def _block_eigvals(eigs):
    out = eigs[0]
    for e in eigs[1:]:
        out = torch.outer(out, e).reshape(-1)
    return out


class KronPosterior:
    structure = "kron"

    def __init__(self, blocks, n_params):
        """``blocks``: list of (slice into θ, list of symmetric factors [G] or [G, A])."""
        self.n_params = n_params
        self.blocks = []
        for sl, factors in blocks:
            decomposed = []
            for M in factors:
                e, Q = torch.linalg.eigh(M)
                decomposed.append((Q, e.clamp_min(0)))
            self.blocks.append((sl, decomposed, _block_eigvals([e for _, e in decomposed])))

    def _block_delta(self, delta, sl):
        if delta.dim() == 0:
            return delta
        block = delta[sl].detach()
        if (block != block[0]).any():
            raise ValueError(
                "hessian_structure='kron' needs one prior precision per weight or bias "
                "tensor (scalar or layer-wise); got different values within one tensor. "
                "Use hessian_structure='diag' or 'full' for a per-parameter prior."
            )
        return delta[sl.start]

    def log_det(self, delta, s):
        return sum(
            torch.log(s * lam + self._block_delta(delta, sl)).sum() for sl, _, lam in self.blocks
        )

    def set_prior(self, delta, s):
        delta = delta.detach()
        self._inv = [1 / (s * lam + self._block_delta(delta, sl)) for sl, _, lam in self.blocks]
        return self

    @staticmethod
    def _rotate(X, factors, transpose):
        """Apply (Q_G ⊗ Q_A)ᵀ (transpose=True) or (Q_G ⊗ Q_A) to the last axis of X.

        Row-major vec: (Q_G ⊗ Q_A)ᵀ vec(M) = vec(Q_Gᵀ M Q_A), two batched matmuls.
        """
        Qs = [Q if transpose else Q.T for Q, _ in factors]
        if len(Qs) == 1:
            return X @ Qs[0]
        if len(Qs) == 2:
            M = X.reshape(X.shape[:-1] + (Qs[0].shape[0], Qs[1].shape[0]))
            return (Qs[0].T @ M @ Qs[1]).reshape(X.shape[:-1] + (-1,))
        shape = X.shape[:-1] + tuple(Q.shape[0] for Q in Qs)
        X = X.reshape(shape)
        for axis, Q in enumerate(Qs):
            dim = len(shape) - len(Qs) + axis
            X = torch.movedim(torch.movedim(X, dim, -1) @ Q, -1, dim)
        return X.reshape(shape[: len(shape) - len(Qs)] + (-1,))

    def functional_variance(self, J):
        var = 0
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            Jr = self._rotate(J[..., sl], factors, transpose=True)
            var = var + (Jr * inv) @ Jr.transpose(1, 2)
        return var

    def last_layer_variance(self, phi, n_out, has_bias):
        """J Σ Jᵀ for f = W φ + b from the factors (blocks: W with [G, A], then b with [G]).

        With ψ = Q_Aᵀ φ, the weight block gives Q_G diag(Σ_i ψ_i² / (s g_o a_i + δ)) Q_Gᵀ.
        """
        (_, [(Q_G, _), (Q_A, _)], _), inv_w = self.blocks[0], self._inv[0]
        psi = phi @ Q_A
        w = (psi**2) @ inv_w.reshape(n_out, -1).T
        var = (w[:, None, :] * Q_G) @ Q_G.T  # Q_G diag(w_n) Q_Gᵀ per row
        if has_bias:
            (_, [(Q_b, _)], _), inv_b = self.blocks[1], self._inv[1]
            var = var + (Q_b * inv_b) @ Q_b.T
        return var

    def sample(self, n_samples, generator):
        dtype = self.blocks[0][2].dtype
        out = torch.zeros(n_samples, self.n_params, dtype=dtype)
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            z = torch.randn(n_samples, inv.numel(), generator=generator, dtype=dtype)
            out[:, sl] = self._rotate(z * inv.sqrt(), factors, transpose=False)
        return out

    def marginal_variance(self):
        out = torch.zeros(self.n_params, dtype=self.blocks[0][2].dtype)
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            squared = [(Q**2, e) for Q, e in factors]
            out[sl] = self._rotate(inv, squared, transpose=False)
        return out
