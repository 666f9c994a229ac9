"""The curvature of nets of nn.Linear layers from each layer's inputs and row factors.

For row n, the likelihood's row factors F_n (n, C, K) give the curvature
Σ_n J_nᵀ F_n F_nᵀ J_n (:func:`row_factors`). For a weight of an nn.Linear layer, row n's
gradient for factor column k is B_nk ⊗ a_n (and B_nk for the bias), with a_n the layer's
input and B_nk = ∂(f_n·F_nk)/∂s the factor backpropagated to its pre-activation s
(:func:`preactivation_factors`, the backward pass of BackPACK's KFLR). From those, without
the N × C × P Jacobians: the exact diagonal (:func:`linear_diag`), the kernel UᵀU of the
determinant lemma (:func:`linear_kernel`) and the Kronecker factors' sums
(:func:`linear_kron_sums`). Each returns None (or raises, for Kronecker factors) where a
layer runs more than once, a weight is used outside its layer, or a layer sees other than
one input row per data row.
"""

import torch

from .subsets import (factors_account_for, layer_parameters, mixing_weights,
                      preactivation_hooks, single_pass)


def chunks(n, size):
    """Slices of ``size`` rows (the last one shorter) over ``n`` rows."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def row_factors(likelihood, f, y, out_scale, curvature, weight=None):
    """Per-row factors F_n (n, C, K) with H = Σ_n J_nᵀ F_n F_nᵀ J_n (times √w_n if weighted)."""
    if curvature == "ggn":
        F = likelihood.sqrt_hessian(f) * out_scale[None, :, None]
    else:
        F = (likelihood.residual(f, y) * out_scale**2).unsqueeze(-1)
    if weight is not None:
        F = F * weight.to(F.dtype).sqrt()[:, None, None]
    return F


def rows_of(weight, sl):
    """The row weights of the slice ``sl`` (None: unweighted)."""
    return None if weight is None else weight[sl]


def total_weight(X, weight):
    """N, or Σ_n w_n for row weights: the row count the Kronecker input factors divide by."""
    return X.shape[0] if weight is None else float(weight.sum())


def preactivation_factors(subset, layers, likelihood, X, y, out_scale, curvature,
                           chunk=4096, weight=None):
    """Backpropagate the row factors F_n to the pre-activations of ``layers``.

    Per row chunk yields (inputs, factors, exact, rows, sl): the input a of every layer
    and, for every column k of F_n, B_k = ∂(Σ_n f_n·F_nk)/∂s (rows are independent,
    so row n of B_k is row n's own factor) — the backward pass of BackPACK's KFLR.
    ``exact`` is False when the factors miss part of a weight's gradient (a layer ran
    more than once, or a weight is used outside its layer: :func:`factors_account_for`);
    ``rows`` is False when a layer saw other than one input row per data row.  With
    ``weight`` the factors carry √w_n (the inputs do not).
    """
    params = layer_parameters(layers)
    for sl in chunks(X.shape[0], chunk):
        with preactivation_hooks(layers) as (inputs, eps, calls), torch.enable_grad():
            f = subset.module(X[sl]).reshape(sl.stop - sl.start, -1)
            F = row_factors(likelihood, f.detach(), y[sl], out_scale, curvature,
                            rows_of(weight, sl))
            if any(c != 1 for c in calls):
                yield None, None, False, False, sl
                return
            targets = [eps[i] for i in range(len(layers))]
            factors = [torch.autograd.grad((f * F[:, :, k]).sum(), targets, retain_graph=True,
                                           allow_unused=True, materialize_grads=True)
                       for k in range(F.shape[2])]
            r = mixing_weights(F.shape[2], F)
            whole = torch.autograd.grad((f * (F @ r)).sum(), params, allow_unused=True,
                                        materialize_grads=True)
        mixed = [sum(r[k] * grads[i] for k, grads in enumerate(factors))
                 for i in range(len(layers))]
        exact = factors_account_for(layers, inputs, calls, mixed, whole)
        a = [inputs[i] for i in range(len(layers))]
        yield a, factors, exact, single_pass(inputs, calls, sl.stop - sl.start), sl
        if not exact:
            return


def linear_diag(subset, likelihood, X, y, out_scale, curvature, chunk=4096, weight=None):
    """Exact diagonal GGN / EF of a net whose weights all sit in nn.Linear layers.

    The gradient of a weight block for row n and factor column k is B_nk a_nᵀ, so
    the diagonal is Σ_nk B_nk² (a_n²)ᵀ: one matmul per layer, O(N·(in + out)·out),
    instead of the N × C × P Jacobians. Returns None (use the Jacobians) when a
    layer runs more than once or sees more than one input row per data row.
    """
    try:
        layers = subset.linear_layers()
    except ValueError:
        return None
    h = torch.zeros(subset.n_params, dtype=X.dtype, device=X.device)
    for a, factors, exact, rows, _ in preactivation_factors(subset, layers, likelihood, X, y,
                                                            out_scale, curvature, chunk, weight):
        if not (exact and rows):
            return None
        for grads in factors:
            for (_, w, b), B, a_i in zip(layers, grads, a):
                B2 = B**2
                h[w] += (B2.T @ a_i**2).reshape(-1)
                if b is not None:
                    h[b] += B2.sum(0)
    return h


def linear_kernel(subset, likelihood, X, y, out_scale, curvature, weight=None):
    """The N·K × N·K kernel UᵀU of a net whose weights all sit in nn.Linear layers.

    Row n's gradient of a weight block for factor column k is B_nk ⊗ a_n (and B_nk for
    the bias), so ⟨U_nk, U_mj⟩ = Σ_l (a_n·a_m + 1) (B_nk·B_mj): per layer
    O(N²·(in + K·out)) instead of the factor's O(N²·P), with the columns ordered n·K + k
    as :func:`full_curvature`'s factor. None (use the Jacobians) when a layer runs more
    than once or sees more than one input row per data row.
    """
    try:
        layers = subset.linear_layers()
    except ValueError:
        return None
    inputs, outputs = [[] for _ in layers], [[] for _ in layers]
    for a, factors, exact, rows, _ in preactivation_factors(subset, layers, likelihood, X, y,
                                                            out_scale, curvature, weight=weight):
        if not (exact and rows):
            return None
        for i in range(len(layers)):
            inputs[i].append(a[i])
            outputs[i].append(torch.stack([grads[i] for grads in factors], 1))  # (n, K, out)
    n, K = X.shape[0], outputs[0][0].shape[1]
    kernel = torch.zeros(n * K, n * K, dtype=X.dtype, device=X.device)
    for (_, _, b), a, B in zip(layers, inputs, outputs):
        a, B = torch.cat(a), torch.cat(B).reshape(n * K, -1)
        S = a @ a.T
        if b is not None:
            S += 1
        if K > 1:
            S = S.repeat_interleave(K, 0).repeat_interleave(K, 1)
        kernel += S.mul_(B @ B.T)
    return kernel


def kron_blocks_of_rows(subset, layers, likelihood, X, y, out_scale, curvature, weight=None):
    """The Kronecker blocks [(weight index, [G, A]), (bias index, [G])] of nn.Linear layers
    (see :func:`.curvature.kron_curvature`)."""
    G, A = linear_kron_sums(subset, layers, likelihood, X, y, out_scale, curvature, weight)
    return linear_kron_blocks(layers, G, A, total_weight(X, weight))


def linear_kron_sums(subset, layers, likelihood, X, y, out_scale, curvature, weight=None):
    """The sums over rows (G, A) per nn.Linear layer of :func:`.curvature.kron_curvature`, before A's
    division by the rows' total weight (additive over rows)."""
    G = [0.0] * len(layers)
    A = [0.0] * len(layers)
    for a, factors, exact, _, sl in preactivation_factors(subset, layers, likelihood, X, y,
                                                          out_scale, curvature, weight=weight):
        if not exact:
            raise ValueError(
                "hessian_structure='kron' needs every nn.Linear layer to run once per forward "
                "pass and its weights to be used by that layer only (no layer called twice, no "
                "tied weights, no F.linear on a layer's weight); this net is not covered. Use "
                "hessian_structure='full' or 'diag'.")
        n = sl.stop - sl.start
        if any(a_i.shape[0] != n for a_i in a):
            raise ValueError(
                "hessian_structure='kron' needs every nn.Linear layer to see its data rows in "
                "the first dimension of its input; use another hessian_structure.")
        # A layer applied at T positions per row (input (n, ..., in)): G sums its factors
        # over the positions before the outer product (the bias block is then exact) and
        # A averages u uᵀ over them (KFC's approximation, as for convolutions): exact for
        # identical and for uncorrelated positions.
        for grads in factors:
            for i, B in enumerate(grads):
                B = B.reshape(n, -1, B.shape[-1]).sum(1)
                G[i] = G[i] + B.T @ B
        for i, a_i in enumerate(a):
            positions = a_i[0].numel() // a_i.shape[-1]
            rows = a_i if weight is None else a_i * weight[sl].to(a_i.dtype).reshape(
                -1, *[1] * (a_i.dim() - 1))
            A[i] = A[i] + rows.reshape(-1, a_i.shape[-1]).T @ a_i.reshape(-1, a_i.shape[-1]) \
                / positions
    return G, A


def linear_kron_blocks(layers, G, A, n_total):
    """The Kronecker blocks of :func:`linear_kron_sums`' sums over ``n_total`` rows."""
    blocks = []
    for i, (_, w, b) in enumerate(layers):
        blocks.append((w, [G[i], A[i] / n_total]))
        if b is not None:
            blocks.append((b, [G[i]]))
    return blocks
