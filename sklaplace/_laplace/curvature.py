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

from .layer_factors import (chunks, kron_blocks_of_rows, linear_diag, linear_kernel,
                            row_factors, rows_of, total_weight)
from .posterior import DiagPosterior, EigenPosterior, KronPosterior

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


def _chunk_rows(n_out, n_params, budget=2**27, max_rows=4096):
    """Rows per chunk: at most ``max_rows``, and one chunk's Jacobian within ``budget`` bytes.

    The row cap makes working memory independent of N once N > max_rows.
    """
    return max(1, min(max_rows, int(budget // (8 * max(1, n_out) * max(1, n_params)))))


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
    for sl in chunks(n, size):
        f, J = subset.jacobians(X[sl])
        F = row_factors(likelihood, f, y[sl], out_scale, curvature, rows_of(weight, sl))
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
            kernel = linear_kernel(subset, likelihood, X, y, out_scale, curvature, weight)
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
    for sl in chunks(X.shape[0], size):
        phi = subset.features(X[sl])
        F = row_factors(likelihood, subset.forward(X[sl], features=phi), y[sl], out_scale,
                        curvature, rows_of(weight, sl))
        aug = torch.cat([phi, torch.ones_like(phi[:, :1])], 1)
        L = F @ F.transpose(1, 2)  # (n, C, C)
        T += (L[:, :, :, None] * aug[:, None, None, :]).reshape(len(aug), -1).T @ aug
    full = T.reshape(C, C, A, A).permute(0, 2, 1, 3).reshape(C * A, C * A)
    order = torch.arange(C * A, device=X.device).reshape(C, A)
    keep = order[:, :H].reshape(-1)
    if subset.has_bias:
        keep = torch.cat([keep, order[:, H]])
    return full[keep][:, keep]


def diag_curvature(subset, likelihood, X, y, out_scale, curvature="ggn", weight=None):
    """Exact diagonal: nn.Linear nets by our pass, other GGNs by BackPACK, else Jacobians."""
    if subset.kind == "all":
        h = linear_diag(subset, likelihood, X, y, out_scale, curvature, weight=weight)
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
    return KronPosterior(kron_blocks_of_rows(subset, layers, likelihood, X, y, out_scale,
                                             curvature, weight), subset.n_params)


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
    for sl in chunks(X.shape[0], chunk):
        phi = subset.features(X[sl])
        F = row_factors(likelihood, subset.forward(X[sl], features=phi), y[sl], out_scale,
                        curvature, rows_of(weight, sl))
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
