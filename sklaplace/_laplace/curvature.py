"""Likelihood curvature of a weight subset: GGN or empirical Fisher, per structure.

All structures accumulate over row chunks, so memory does not grow with N for
the diagonal and Kronecker structures (the full structure stores its P × P
matrix, or the P × N·C factor when N·C < P, where the determinant lemma makes
the kernel the cheaper object).

The curvature is computed with unit temperature and, for a Gaussian
likelihood, at the per-output noise given by ``out_scale`` = 1/σ_c (ones for a
scalar σ, which is applied later).  Λ = diag(1/σ²) gives the GGN factor
diag(1/σ) and the EF gradient J_nᵀ diag(1/σ²) r_n, so a scalar σ enters the
posterior structures as the factor s = 1/σ² (GGN) or 1/σ⁴ (EF), times 1/T.

Notation: for row n, S_n is a square root of Λ_n (C × K) and J_n the C × P
Jacobian; the GGN is Σ_n J_nᵀ S_n S_nᵀ J_n, the empirical Fisher Σ_n g_n g_nᵀ
with g_n = J_nᵀ r_n the per-row gradient of the negative log-likelihood.

Row weights (``sample_weight``, ``weight`` here: a (N,) tensor or None) multiply
row n's log-likelihood, hence its curvature: every routine scales the row
factors F_n by √w_n where they are formed (and weights the Kronecker input
factors A, which are then divided by Σ_n w_n instead of N), so integer weights
give exactly the curvature of duplicated rows.  ``weight=None`` is the
unweighted computation, unchanged.
"""

import contextlib
import contextvars
import time

import torch

from .posterior import DiagPosterior, EigenPosterior, KronPosterior
from .subsets import (factors_account_for, layer_parameters, mixing_weights,
                      preactivation_hooks, single_pass)

DEFAULT_MEMORY_BUDGET = 4 * 2**30
#: Share of a CUDA device's free memory the LA may take at once.
CUDA_MEMORY_SHARE = 0.4


def memory_budget(device):
    """Bytes one allocation of the LA may take on ``device``: DEFAULT_MEMORY_BUDGET (4 GiB)
    on the CPU, ``CUDA_MEMORY_SHARE`` of the free memory of a CUDA device."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(CUDA_MEMORY_SHARE * free)
    return DEFAULT_MEMORY_BUDGET


def _chunks(n, size):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _chunk_rows(n_out, n_params, budget=2**27, max_rows=4096):
    """Rows per chunk: at most ``max_rows``, and one chunk's Jacobian within ``budget`` bytes.

    The row cap makes working memory independent of N once N > max_rows.
    """
    return max(1, min(max_rows, int(budget // (8 * max(1, n_out) * max(1, n_params)))))


def _row_factors(likelihood, f, y, out_scale, curvature, weight=None):
    """Per-row factors F_n (n, C, K) with H = Σ_n J_nᵀ F_n F_nᵀ J_n (times √w_n if weighted)."""
    if curvature == "ggn":
        F = likelihood.sqrt_hessian(f) * out_scale[None, :, None]
    else:
        F = (likelihood.residual(f, y) * out_scale**2).unsqueeze(-1)
    if weight is not None:
        F = F * weight.to(F.dtype).sqrt()[:, None, None]
    return F


def _rows(weight, sl):
    return None if weight is None else weight[sl]


def total_weight(X, weight):
    """N, or Σ_n w_n for row weights: the row count the Kronecker input factors divide by."""
    return X.shape[0] if weight is None else float(weight.sum())


def noise_power(curvature):
    """The power p of the curvature's dependence 1/σᵖ on a scalar Gaussian noise."""
    return 2 if curvature == "ggn" else 4


def jacobian_bytes(n_rows, n_out, n_params):
    return 8 * n_rows * n_out * n_params


def check_budget(n_bytes, what, budget, alternatives):
    """Refuse an allocation above ``budget`` bytes, naming cheaper options."""
    if n_bytes > budget:
        raise MemoryError(
            f"{what} would need about {n_bytes / 2**30:.2f} GiB, more than the "
            f"{budget / 2**30:.2f} GiB memory budget. Cheaper options: {alternatives}."
        )


_PROGRESS = contextvars.ContextVar("sklaplace_curvature_progress", default=None)


@contextlib.contextmanager
def progress_to(report):
    """Send progress messages of the curvature passes in this context to ``report`` (or None)."""
    token = _PROGRESS.set(report)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _report(message):
    report = _PROGRESS.get()
    if report is not None:
        report(message)


def _gram_rows(subset, likelihood, X, y, out_scale, curvature, weight=None):
    """Yield (n_rows, P, K) blocks J_nᵀ F_n over row chunks (progress at most every 2 s)."""
    size = _chunk_rows(out_scale.numel(), subset.n_params)
    start = last = time.perf_counter()
    n = X.shape[0]
    for sl in _chunks(n, size):
        f, J = subset.jacobians(X[sl])
        F = _row_factors(likelihood, f, y[sl], out_scale, curvature, _rows(weight, sl))
        yield torch.einsum("ncp,nck->npk", J, F)
        now = time.perf_counter()
        if sl.stop == n or now - last > 2.0:
            last = now
            _report(f"curvature: {sl.stop}/{n} rows ({100 * sl.stop / n:.0f} %, "
                    f"{now - start:.1f} s)")


def full_curvature(
    subset, likelihood, X, y, out_scale, curvature="ggn", rank=None, budget=None,
    weight=None, eigenvalues_only=False,
):
    """Full (``rank=None``) or low-rank posterior structure.

    ``eigenvalues_only``: the spectrum without eigenvectors (several times cheaper), enough
    for the evidence at a scalar prior (online updates); such a posterior cannot predict.
    """
    P, n = subset.n_params, X.shape[0]
    K = out_scale.numel() if curvature == "ggn" else 1
    structure = "full" if rank is None else "lowrank"
    budget = memory_budget(X.device) if budget is None else budget
    if n * K < P:
        # Determinant lemma: work with the P × N·K factor and its kernel.
        if eigenvalues_only and subset.kind == "all":
            kernel = _linear_kernel(subset, likelihood, X, y, out_scale, curvature, weight)
            if kernel is not None:
                return EigenPosterior.spectrum(kernel, P, structure)
        check_budget(8 * P * n * K * 2, f"The {structure} curvature factor", budget,
                     "hessian_structure='kron' or 'diag', or subset_of_weights='last_layer'")
        U = torch.cat([JF.reshape(JF.shape[0], P, -1).permute(1, 0, 2).reshape(P, -1)
                       for JF in _gram_rows(subset, likelihood, X, y, out_scale, curvature, weight)], 1)
        _report(f"eigendecomposition of the {U.shape[1]} × {U.shape[1]} kernel ...")
        if eigenvalues_only:
            return EigenPosterior.spectrum(U.T @ U, P, structure)
        return EigenPosterior.from_factor(U, rank=rank, structure=structure)
    check_budget(8 * P * P * 2, f"The {structure} curvature matrix", budget,
                 "hessian_structure='kron' or 'diag', or subset_of_weights='last_layer'")
    H = full_matrix(subset, likelihood, X, y, out_scale, curvature, weight)
    _report(f"eigendecomposition of the {P} × {P} curvature ...")
    if eigenvalues_only:
        return EigenPosterior.spectrum(H, P, structure)
    return EigenPosterior.from_matrix(H, rank=rank, structure=structure)


def full_matrix(subset, likelihood, X, y, out_scale, curvature="ggn", weight=None):
    """The P × P curvature Σ_n J_nᵀ F_n F_nᵀ J_n of the rows of ``X``, by row chunks."""
    if subset.kind == "last_layer":
        return _last_layer_matrix(subset, likelihood, X, y, out_scale, curvature, weight)
    P = subset.n_params
    H = torch.zeros(P, P, dtype=X.dtype, device=X.device)
    for JF in _gram_rows(subset, likelihood, X, y, out_scale, curvature, weight):
        H += torch.einsum("npk,nqk->pq", JF, JF)
    return H


def _last_layer_matrix(subset, likelihood, X, y, out_scale, curvature, weight=None):
    """The P × P curvature of the last layer f = W φ + b straight from the features.

    With φ̃ = [φ, 1] and Λ_n = F_n F_nᵀ (C × C), the block of outputs (c, d) is
    Σ_n Λ_n[c, d] φ̃_n φ̃_nᵀ: N·C²·(H+1)² flops instead of the Jacobians' N·C³·(H+1)²,
    then reordered to θ = [vec W (row-major), b].
    """
    C, H = subset.n_out, subset.n_features
    A = H + 1
    T = torch.zeros(C * C * A, A, dtype=X.dtype, device=X.device)
    size = _chunk_rows(C * C, A)
    for sl in _chunks(X.shape[0], size):
        phi = subset.features(X[sl])
        F = _row_factors(likelihood, subset.forward(X[sl], features=phi), y[sl], out_scale,
                         curvature, _rows(weight, sl))
        aug = torch.cat([phi, torch.ones_like(phi[:, :1])], 1)
        L = F @ F.transpose(1, 2)  # (n, C, C)
        T += (L[:, :, :, None] * aug[:, None, None, :]).reshape(len(aug), -1).T @ aug
    full = T.reshape(C, C, A, A).permute(0, 2, 1, 3).reshape(C * A, C * A)
    order = torch.arange(C * A, device=X.device).reshape(C, A)
    keep = order[:, :H].reshape(-1)
    if subset.has_bias:
        keep = torch.cat([keep, order[:, H]])
    return full[keep][:, keep]


def _preactivation_factors(subset, layers, likelihood, X, y, out_scale, curvature,
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
    for sl in _chunks(X.shape[0], chunk):
        with preactivation_hooks(layers) as (inputs, eps, calls), torch.enable_grad():
            f = subset.module(X[sl]).reshape(sl.stop - sl.start, -1)
            F = _row_factors(likelihood, f.detach(), y[sl], out_scale, curvature,
                             _rows(weight, sl))
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


def _linear_diag(subset, likelihood, X, y, out_scale, curvature, chunk=4096, weight=None):
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
    for a, factors, exact, rows, _ in _preactivation_factors(subset, layers, likelihood, X, y,
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


def _linear_kernel(subset, likelihood, X, y, out_scale, curvature, weight=None):
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
    for a, factors, exact, rows, _ in _preactivation_factors(subset, layers, likelihood, X, y,
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


def diag_curvature(subset, likelihood, X, y, out_scale, curvature="ggn", weight=None):
    """Exact diagonal: nn.Linear nets by our pass, other GGNs by BackPACK, else Jacobians."""
    if subset.kind == "all":
        h = _linear_diag(subset, likelihood, X, y, out_scale, curvature, weight=weight)
        if h is None and curvature == "ggn":
            from ._backpack import backpack_diag

            h = backpack_diag(subset, likelihood, X, y, out_scale, weight=weight)
        if h is not None:
            return DiagPosterior(h)
    h = torch.zeros(subset.n_params, dtype=X.dtype, device=X.device)
    for JF in _gram_rows(subset, likelihood, X, y, out_scale, curvature, weight):
        h += (JF**2).sum((0, 2))
    return DiagPosterior(h)


def kron_curvature(subset, likelihood, X, y, out_scale, curvature="ggn", weight=None):
    """Kronecker factors per nn.Linear layer: KFLR-style exact GGN factors or EF.

    Nets with other parameterized layers take BackPACK's KFLR (GGN only).

    For layer l with inputs a_n and B_n = ∂f_n/∂s_lᵀ F_n (s_l the pre-activation),
    the weight block Σ_n (B_n B_nᵀ) ⊗ (a_n a_nᵀ) is approximated by
    (Σ_n B_n B_nᵀ) ⊗ (Σ_n a_n a_nᵀ) / N; the bias block Σ_n B_n B_nᵀ is exact.
    With row weights: (Σ_n w_n B_n B_nᵀ) ⊗ (Σ_n w_n a_n a_nᵀ) / Σ_n w_n.
    """
    if subset.kind == "last_layer":
        return _last_layer_kron(subset, likelihood, X, y, out_scale, curvature, weight=weight)
    try:
        layers = subset.linear_layers()
    except ValueError as error:
        blocks = None
        if curvature == "ggn":
            from ._backpack import backpack_kron

            blocks = backpack_kron(subset, likelihood, X, y, out_scale, weight=weight)
        if blocks is None:
            raise ValueError(
                f"{error} Other nets go through BackPACK's KFLR, which needs "
                "curvature='ggn', weights in nn.Linear or nn.Conv1d/2d/3d layers of a net "
                "BackPACK supports (its activations, pooling, padding, flatten, dropout) "
                "whose output has shape (n_rows, n_outputs), each nn.Linear seeing one input "
                "row per data row, and a classifier or a regressor with one sigma_noise for "
                "all outputs; this net or setting is not covered. Use "
                "hessian_structure='diag' or 'full'."
            ) from None
        return KronPosterior(blocks, subset.n_params)
    return KronPosterior(_linear_kron_blocks(subset, layers, likelihood, X, y, out_scale,
                                             curvature, weight), subset.n_params)


def _linear_kron_blocks(subset, layers, likelihood, X, y, out_scale, curvature, weight=None):
    """The Kronecker blocks [(weight index, [G, A]), (bias index, [G])] of nn.Linear layers
    (see :func:`kron_curvature`)."""
    G, A = linear_kron_sums(subset, layers, likelihood, X, y, out_scale, curvature, weight)
    return linear_kron_blocks(layers, G, A, total_weight(X, weight))


def linear_kron_sums(subset, layers, likelihood, X, y, out_scale, curvature, weight=None):
    """The sums over rows (G, A) per nn.Linear layer of :func:`kron_curvature`, before A's
    division by the rows' total weight (additive over rows)."""
    G = [0.0] * len(layers)
    A = [0.0] * len(layers)
    for a, factors, exact, _, sl in _preactivation_factors(subset, layers, likelihood, X, y,
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


def _last_layer_kron(subset, likelihood, X, y, out_scale, curvature, chunk=4096, weight=None):
    """Last layer f = Wφ + b: B_n = F_n exactly, so G = Σ F_n F_nᵀ and A = Σ φφᵀ / N
    (weighted: A = Σ w_n φφᵀ / Σ w_n)."""
    G, A = last_layer_kron_sums(subset, likelihood, X, y, out_scale, curvature, chunk, weight)
    return last_layer_kron(subset, G, A, total_weight(X, weight))


def last_layer_kron_sums(subset, likelihood, X, y, out_scale, curvature, chunk=4096,
                         weight=None):
    """(G, Σ w_n φφᵀ) of :func:`_last_layer_kron` (additive over rows)."""
    C, H = subset.n_out, subset.n_features
    G = torch.zeros(C, C, dtype=X.dtype, device=X.device)
    A = torch.zeros(H, H, dtype=X.dtype, device=X.device)
    for sl in _chunks(X.shape[0], chunk):
        phi = subset.features(X[sl])
        F = _row_factors(likelihood, subset.forward(X[sl], features=phi), y[sl], out_scale,
                         curvature, _rows(weight, sl))
        G += torch.einsum("nck,ndk->cd", F, F)
        if weight is None:
            A += phi.T @ phi
        else:
            A += (phi * weight[sl].to(phi.dtype)[:, None]).T @ phi
    return G, A


def last_layer_kron(subset, G, A, n_total):
    """The last layer's KronPosterior from its sums over ``n_total`` rows."""
    C, H = subset.n_out, subset.n_features
    blocks = [(slice(0, C * H), [G, A / n_total])]
    if subset.has_bias:
        blocks.append((slice(C * H, C * H + C), [G]))
    return KronPosterior(blocks, subset.n_params)


def compute_posterior(structure, subset, likelihood, X, y, out_scale, curvature="ggn",
                      rank=None, budget=None, weight=None,
                      eigenvalues_only=False):
    """Dispatch to the structure's curvature routine; ``weight``: (N,) row weights or None.

    ``eigenvalues_only`` (full structure): the spectrum alone, for the evidence at a
    scalar prior (see :func:`full_curvature`).
    """
    with torch.no_grad():
        if structure == "diag":
            return diag_curvature(subset, likelihood, X, y, out_scale, curvature, weight)
        if structure == "full":
            return full_curvature(subset, likelihood, X, y, out_scale, curvature, None, budget,
                                  weight, eigenvalues_only)
        if structure == "lowrank":
            return full_curvature(subset, likelihood, X, y, out_scale, curvature, rank, budget,
                                  weight)
    if structure == "kron":
        return kron_curvature(subset, likelihood, X, y, out_scale, curvature, weight)
    raise ValueError(f"Unknown hessian_structure {structure!r}.")


def default_lowrank_rank(n_params):
    """Default k for the low-rank structure: min(P, 100)."""
    return int(min(n_params, 100))


__all__ = [
    "compute_posterior",
    "check_budget",
    "jacobian_bytes",
    "default_lowrank_rank",
    "DEFAULT_MEMORY_BUDGET",
    "memory_budget",
    "full_curvature",
]
