"""The LA's sums over rows, for data held in parts (the partitions of a dask collection).

Every piece of the fit that reads the training rows is a sum over rows: the curvature
(the diagonal, the P × P matrix of the full and low-rank structures, the Kronecker sums
G and A before A's division by the rows' total weight) and the evidence's data term
(summed NLL, or per-output sums of squares, and the rows' total weight).
:func:`part_sums` computes them on one part with the same row-chunked routines as
:func:`.curvature.compute_posterior`, :func:`add_sums` adds two parts' (any order:
a tree reduction), and :func:`posterior_from_sums` decomposes the total once — the
fit of the concatenated parts, up to the order of floating-point additions.
"""

import torch

from .curvature import (check_budget, diag_curvature, full_matrix, last_layer_kron,
                        last_layer_kron_sums, memory_budget)
from .evidence import Evidence
from .layer_factors import linear_kron_blocks, linear_kron_sums
from .posterior import DiagPosterior, EigenPosterior, KronPosterior


def part_sums(structure, subset, likelihood, X, y, out_scale, curvature="ggn", weight=None):
    """The additive pieces of one part's rows: ``"n"`` (Σ w, or the rows), ``"nll"`` or
    ``"sse"`` at the MAP, and the curvature's sums of ``structure`` (None: none)."""
    with torch.no_grad():
        f = subset.forward(X)
    data = Evidence.at_fit(None, None, likelihood, f, y, weight, 1.0)
    sums = {"n": float(data.n_rows), "nll": float(data.nll),
            "sse": None if data.sse is None else data.sse.cpu()}
    if structure is None:
        return sums
    with torch.no_grad():
        if structure == "diag":
            sums["h"] = diag_curvature(subset, likelihood, X, y, out_scale, curvature, weight).h
        elif structure in ("full", "lowrank"):
            P = subset.n_params
            check_budget(8 * P * P * 2, f"The {structure} curvature matrix",
                         memory_budget(X.device),
                         "hessian_structure='kron' or 'diag', or subset_of_weights='last_layer'")
            sums["H"] = full_matrix(subset, likelihood, X, y, out_scale, curvature, weight)
    if structure == "kron":
        if subset.kind == "last_layer":
            sums["G"], sums["A"] = last_layer_kron_sums(subset, likelihood, X, y, out_scale,
                                                        curvature, weight=weight)
        else:
            sums["G"], sums["A"] = linear_kron_sums(subset, _linear_layers(subset), likelihood,
                                                    X, y, out_scale, curvature, weight)
    return {k: v.cpu() if torch.is_tensor(v) else v for k, v in sums.items()}


def _linear_layers(subset):
    try:
        return subset.linear_layers()
    except ValueError as error:
        raise ValueError(
            f"{error} On data in partitions, hessian_structure='kron' needs a net whose "
            "weights all sit in nn.Linear layers; use hessian_structure='diag' or 'full'."
        ) from None


def add_sums(a, b):
    """The pieces of two parts' rows together."""
    out = {}
    for key, value in a.items():
        other = b[key]
        if value is None:
            out[key] = None
        elif isinstance(value, list):
            out[key] = [u + v for u, v in zip(value, other)]
        else:
            out[key] = value + other
    return out


def posterior_from_sums(structure, subset, sums, rank=None, device="cpu"):
    """The posterior structure of the total curvature ``sums`` (decomposed once)."""
    def on(t):
        return t.to(device)

    if structure == "diag":
        return DiagPosterior(on(sums["h"]))
    if structure in ("full", "lowrank"):
        return EigenPosterior.from_matrix(on(sums["H"]), rank=rank, structure=structure)
    if subset.kind == "last_layer":
        return last_layer_kron(subset, on(sums["G"]), on(sums["A"]), sums["n"])
    G, A = [on(g) for g in sums["G"]], [on(a) for a in sums["A"]]
    blocks = linear_kron_blocks(subset.linear_layers(), G, A, sums["n"])
    return KronPosterior(blocks, subset.n_params)


def evidence_from_sums(posterior, theta, likelihood, sums, temperature, curvature="ggn"):
    """The :class:`Evidence` of the fit from the parts' summed data term."""
    if likelihood.has_noise:
        return Evidence(posterior, theta, temperature, sums["n"], sse=sums["sse"].to(theta),
                        curvature=curvature)
    return Evidence(posterior, theta, temperature, sums["n"], nll=sums["nll"],
                    curvature=curvature)


# ------------------------------------------------ the training range (outside.RangeKernel)
def range_sums(X, weight=None):
    """First pass over a part for :meth:`.outside.RangeKernel.of`: Σ w, Σ w x, min, max."""
    X = X.reshape(len(X), -1)
    w = _weights(X, weight)
    inf = torch.full((X.shape[1],), torch.inf, dtype=X.dtype)
    return {"n": w.sum(), "wx": w @ X,
            "low": X.min(0).values if len(X) else inf, "high": X.max(0).values if len(X) else -inf}


def add_range_sums(a, b):
    return {"n": a["n"] + b["n"], "wx": a["wx"] + b["wx"],
            "low": torch.minimum(a["low"], b["low"]), "high": torch.maximum(a["high"], b["high"])}


def range_extremes(X, y, weight, mean, low, high):
    """Second pass over a part, given the first pass's mean and range: Σ w (x − mean)²
    and, for the leave-one-out distances (:meth:`.outside.RangeKernel.loo_diag`), per
    coordinate and side the weight of the part's rows at the range's edge, the part's
    largest value short of it, and the rows at an edge (unless their weight there is 2
    or more, when none of them is alone at it)."""
    X = X.reshape(len(X), -1)
    w = _weights(X, weight)
    out = {"ss": w @ (X - mean) ** 2}
    keep = torch.zeros(len(X), dtype=torch.bool)
    for side, sign, top in (("max", 1.0, high), ("min", -1.0, -low)):
        Z = sign * X
        at_top = Z == top
        at = (w[:, None] * at_top).sum(0)
        nxt = torch.where(at_top, torch.full_like(Z, -torch.inf), Z)
        out[f"{side}_at"] = at
        out[f"{side}_next"] = (nxt.max(0).values if len(X)
                               else torch.full_like(top, -torch.inf))
        keep |= (at_top & (at < 2)).any(1)
    out.update(X=X[keep], y=y[keep], w=w[keep])
    return out


def add_range_extremes(a, b):
    out = {"ss": a["ss"] + b["ss"]}
    for side in ("max", "min"):
        out[f"{side}_at"] = a[f"{side}_at"] + b[f"{side}_at"]
        out[f"{side}_next"] = torch.maximum(a[f"{side}_next"], b[f"{side}_next"])
    for key in ("X", "y", "w"):
        out[key] = torch.cat([a[key], b[key]])
    return out


def loo_units(kernel, extremes):
    """(k(x, x)/σ² at the leave-one-out distance, X, y, w) of the rows that extend the
    range of the others: :meth:`.outside.RangeKernel.loo_diag` from the parts' edges."""
    X = extremes["X"].to(kernel.low)
    excess = torch.zeros_like(X)
    for side, sign in (("max", 1.0), ("min", -1.0)):
        Z = sign * X
        top = sign * (kernel.high if side == "max" else kernel.low)
        alone = extremes[f"{side}_at"] < 2
        nxt = extremes[f"{side}_next"]
        excess += torch.where((Z == top) & alone & torch.isfinite(nxt), Z - nxt,
                              torch.zeros_like(Z))
    unit = (excess / kernel.scale).pow(3).mean(1) / 3
    rows = unit > 0
    return unit[rows], X[rows], extremes["y"][rows], extremes["w"][rows]


def _weights(X, weight):
    return (torch.ones(len(X), dtype=X.dtype, device=X.device) if weight is None
            else weight.to(X))
