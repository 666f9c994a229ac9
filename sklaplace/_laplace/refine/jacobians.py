"""The training Jacobians J(x_n) of the weight subset at θ*, on which refinement works.

The GLM f_lin(x; θ) = f(x; θ*) + J(x)(θ − θ*) needs every product with the
Jacobians of the training rows; they are computed once.  Dense
(:class:`DenseJacobians`): J as an (N, C, P) array, N·C·P floats, refused above a
byte budget.  On a net whose weights all sit in nn.Linear layers, factored
(:class:`LayerJacobians`): output c's Jacobian for a layer with input a and
pre-activation s is g_c ⊗ a (g_c = ∂f_c/∂s), so the products Jv, Jᵀg,
diag(Σ Jᵀ A J), Σ Jᵀ A J and J S Jᵀ need no such array.
"""

import functools

import torch

from ..curvature import check_budget
from ..posterior.diag import layer_diag_variance


def cached_jacobians(subset, X, n_out, budget):
    """(f(X; θ*) (N, C), J (N, C, P)) of the training rows, within ``budget`` bytes
    (:data:`sklaplace._laplace.refine.JACOBIAN_BUDGET`)."""
    check_budget(8 * len(X) * n_out * subset.n_params,
                 f"Caching the training Jacobians for refine ({len(X)} rows × {n_out} outputs "
                 f"× {subset.n_params} weights)", budget,
                 "refine=None, subset_of_weights='last_layer' or 'subnetwork', or fewer rows "
                 "(the limit is sklaplace._laplace.refine.JACOBIAN_BUDGET)")
    parts = [subset.jacobians(X[sl])
             for sl in _row_slices(len(X), 8 * max(1, n_out) * subset.n_params, 2**27)]
    return torch.cat([f for f, _ in parts]), torch.cat([J for _, J in parts])


def _row_slices(n, width, budget):
    """Slices of ``n`` rows, each within ``budget`` for rows of ``width`` (at least one row)."""
    rows = max(1, int(budget // max(1, width)))
    return [slice(s, s + rows) for s in range(0, n, rows)]


def training_jacobians(subset, X, n_out, structure, budget):
    """(f(X; θ*), the training Jacobians as :class:`LayerJacobians` where the structure
    allows it (all weights in nn.Linear layers; for the full structure only in weight
    space, n·C ≥ P, as the kernel path needs J itself), else :class:`DenseJacobians`)."""
    factored = structure == "diag" or len(X) * n_out >= subset.n_params
    if factored and hasattr(subset, "jacobian_factors"):
        factors = subset.jacobian_factors(X)
        if factors is not None:
            f, parts = factors
            return f, LayerJacobians(parts, subset.n_params)
    f, J = cached_jacobians(subset, X, n_out, budget)
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

