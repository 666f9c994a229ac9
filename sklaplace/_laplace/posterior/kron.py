"""Kronecker-factored posterior, one block per weight or bias tensor.

A weight block has precision s·(G ⊗ A) + δ_l I (row-major weights), a bias
block s·G + δ_l I.  With G = Q_G diag(g) Q_Gᵀ and A = Q_A diag(a) Q_Aᵀ the
prior is added exactly in the eigenbasis (not damped), so
    log det = Σ_l Σ_ij log(s g_i a_j + δ_l),
O(P) per evaluation for scalar and layer-wise priors.  The gradient with
respect to a per-parameter δ (constant within each block) is exact per
parameter: ∂/∂δ_i = [(s·G ⊗ A + δ_l I)⁻¹]_ii, the marginal variance.
"""

import numpy as np
import torch
from scipy.linalg.blas import dtrmm

from .base import Posterior


def _block_eigvals(eigs):
    out = eigs[0]
    for e in eigs[1:]:
        out = torch.outer(out, e).reshape(-1)
    return out


class _BlockLogDet(torch.autograd.Function):
    """Σ_j log(s λ_j + δ) of one block for a per-parameter δ constant on the block.

    The value needs only that constant, but the derivative with respect to each
    parameter's δ_i is its own, the diagonal of the block's inverse precision
    Q diag(1/(sλ + δ)) Qᵀ — not the block total on one entry.
    """

    @staticmethod
    def forward(ctx, delta, s, lam, factors):
        inv = 1 / (s * lam + delta[0])
        ctx.save_for_backward(inv, lam)
        ctx.factors = factors
        return -torch.log(inv).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        inv, lam = ctx.saved_tensors
        grad_delta = grad_s = None
        if ctx.needs_input_grad[0]:
            squared = [(Q**2, e) for Q, e in ctx.factors]
            grad_delta = grad * KronPosterior._rotate(inv, squared, transpose=False)
        if ctx.needs_input_grad[1]:
            grad_s = grad * (lam * inv).sum()
        return grad_delta, grad_s, None, None


class KronPosterior(Posterior):
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

    def log_det(self, delta, s, index=None):
        """Σ_l Σ_ij log(s g_i a_j + δ_l); δ is 0-d, per parameter (constant within each
        block) or, with ``index``, one value per group (δ[index] per parameter)."""
        if index is not None:
            delta = delta[index]
        if delta.dim() == 0:
            return sum(torch.log(s * lam + delta).sum() for _, _, lam in self.blocks)
        s = torch.as_tensor(s, dtype=delta.dtype)
        total = 0
        for sl, factors, lam in self.blocks:
            self._block_delta(delta, sl)  # checks that δ is constant on the block
            total = total + _BlockLogDet.apply(delta[sl], s, lam, factors)
        return total

    def _apply_prior(self, delta, s):
        delta = delta.detach().to(self.blocks[0][2].device)
        self._inv = [1 / (s * lam + self._block_delta(delta, sl)) for sl, _, lam in self.blocks]
        self._single_output_root = self._bias_cov_cache = None
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

    def layer_variance(self, a, G, weight, bias):
        """J Σ Jᵀ of one nn.Linear layer from its input ``a`` (n, in) and the gradients
        ``G`` (n, C, out) of the outputs with respect to its pre-activation; ``weight``
        and ``bias`` are the layer's slices of θ (bias None without one).

        Output c's Jacobian is g_c ⊗ a; rotated, (Q_Gᵀ g_c) ⊗ (Q_Aᵀ a), so with
        t_o = Σ_i (Q_Aᵀ a)_i² / (s g_o a_i + δ) the block gives G̃ diag(t) G̃ᵀ,
        G̃ = G Q_G: O(n·in·out + n·C²·out). None when the blocks do not match the layer.
        """
        starts = self._block_starts()
        block = starts.get(weight.start)
        if block is None or block[0] != weight or len(block[1]) != 2:
            return None
        _, [(Q_G, _), (Q_A, _)], inv = block
        if (Q_G.shape[0], Q_A.shape[0]) != (G.shape[2], a.shape[1]):
            return None
        Gr = G @ Q_G
        t = (a @ Q_A).square_() @ inv.reshape(Q_G.shape[0], Q_A.shape[0]).T
        var = (Gr * t[:, None, :]) @ Gr.transpose(1, 2)
        if bias is not None:
            block = starts.get(bias.start)
            if block is None or block[0] != bias or len(block[1]) != 1:
                return None
            _, [(Q_b, _)], inv_b = block
            Gb = G @ Q_b
            var = var + (Gb * inv_b) @ Gb.transpose(1, 2)
        return var

    def _block_starts(self):
        """{start of θ slice: (slice, factors, 1/(sλ + δ))} of the blocks at the current prior."""
        return {sl.start: (sl, factors, inv)
                for (sl, factors, _), inv in zip(self.blocks, self._inv)}

    def last_layer_variance(self, phi, n_out, has_bias, scratch=False):
        """J Σ Jᵀ for f = W φ + b from the factors (blocks: W with [G, A], then b with [G]).

        With ψ = Q_Aᵀ φ, the weight block gives Q_G diag(Σ_i ψ_i² / (s g_o a_i + δ)) Q_Gᵀ.
        One output: Σ_W = Rᵀ R with R triangular, so φᵀ Σ_W φ = ‖R φ‖², half the flops,
        computed in place in ``phi`` when it is ``scratch`` (a copy the caller gives up).
        """
        if n_out == 1 and phi.device.type == "cpu":
            rphi = dtrmm(1.0, self._weight_root(), phi.numpy().T, overwrite_b=scratch)
            rphi = torch.from_numpy(rphi.T)  # (n, H)
            var = torch.linalg.vector_norm(rphi, dim=1).square_().reshape(-1, 1, 1)
        else:
            (_, [(Q_G, _), (Q_A, _)], _), inv_w = self.blocks[0], self._inv[0]
            w = (phi @ Q_A).square_() @ inv_w.reshape(n_out, -1).T
            outer = (Q_G.T[:, :, None] * Q_G.T[:, None, :]).reshape(n_out, -1)  # row o: q_o q_oᵀ
            var = (w @ outer).reshape(-1, n_out, n_out)
        if has_bias:
            var += self._bias_cov()
        return var

    def _bias_cov(self):
        """Σ_b = Q_b diag(inv) Q_bᵀ of the bias block (cached)."""
        if self._bias_cov_cache is None:
            (_, [(Q_b, _)], _), inv_b = self.blocks[1], self._inv[1]
            self._bias_cov_cache = (Q_b * inv_b) @ Q_b.T
        return self._bias_cov_cache

    def _weight_root(self):
        """Upper-triangular R with Rᵀ R = Q_A diag(inv) Q_Aᵀ, the covariance of one output's W."""
        if self._single_output_root is None:
            (_, [_, (Q_A, _)], _), inv_w = self.blocks[0], self._inv[0]
            B = Q_A * inv_w.sqrt()  # B Bᵀ = Σ_W; Bᵀ = Q R gives Σ_W = Rᵀ R
            self._single_output_root = np.asfortranarray(torch.linalg.qr(B.T, mode="r").R.numpy())
        return self._single_output_root

    def sample(self, n_samples, generator):
        dtype, device = self.blocks[0][2].dtype, self.blocks[0][2].device
        out = torch.zeros(n_samples, self.n_params, dtype=dtype, device=device)
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            # drawn on the CPU (the generator's device), times the symmetric root
            # Q diag(inv)^½ Qᵀ, which does not depend on the eigenvectors' signs or basis:
            # the same samples on every device and LAPACK
            z = torch.randn(n_samples, inv.numel(), generator=generator, dtype=dtype).to(device)
            z = self._rotate(z, factors, transpose=True) * inv.sqrt()
            out[:, sl] = self._rotate(z, factors, transpose=False)
        return out

    def marginal_variance(self):
        out = torch.zeros(self.n_params, dtype=self.blocks[0][2].dtype,
                          device=self.blocks[0][2].device)
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            squared = [(Q**2, e) for Q, e in factors]
            out[sl] = self._rotate(inv, squared, transpose=False)
        return out

    def _blockwise(self, X, power):
        """(Q diag(inv^power) Qᵀ per block) X for X of shape (P, k)."""
        rows = X.T
        out = torch.empty_like(rows)
        for (sl, factors, _), inv in zip(self.blocks, self._inv):
            z = self._rotate(rows[:, sl], factors, transpose=True) * inv**power
            out[:, sl] = self._rotate(z, factors, transpose=False)
        return out.T

    def cov_matmat(self, X):
        """Σ X for X of shape (P, k), block by block in the factors' eigenbasis."""
        return self._blockwise(X, 1)

    def precision_matmat(self, X):
        """Σ⁻¹ X for X of shape (P, k)."""
        return self._blockwise(X, -1)

    def log_det_cov(self):
        """log det Σ = Σ log(1 / (s λ + δ)) over the blocks."""
        return sum(torch.log(inv).sum() for inv in self._inv)
