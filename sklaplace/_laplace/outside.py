"""Variance outside the training inputs' range: infinitely many ReLU features beyond the data.

A Gaussian posterior over a network's finitely many features lets its predictive
variance grow at most quadratically away from the data while the MAP's logits grow
linearly, so confidence far from the data stays high. Kristiadi, Hein & Hennig
(NeurIPS 2021) add the prior of infinitely many ReLU features that training never
touched: a Gaussian process whose kernel, in one input coordinate with features
``max(0, x − c)`` at every location ``c`` of a half-line (and mirrored), is the
cubic spline kernel

    k₁(e, e') = m³/3 + |e − e'|·m²/2,  m = min(|e|, |e'|)  (same sign; else 0),

so k₁(e, e) = |e|³/3, averaged over the coordinates. Here the features start at the
edges of the training rows' range in each coordinate instead of at the origin (those
inside the range are what the data and the net's own features account for), with
``e`` the distance beyond the range in units of the coordinate's training standard
deviation: the term is exactly 0 on the training range, so rows like the training
rows pay nothing for it, and it grows cubically beyond. Every output gets the same
independent GP: the logit (or regression output) covariance gains σ²·k(x, x)·I.

σ² (``extrapolation_variance``) is unidentifiable from rows inside the range: the
data speak to it only through rows that fall outside the range of the others.
:func:`choose_variance` takes the largest value of :data:`VARIANCE_GRID` whose cost
to such rows — each training row that extends the range, at its leave-one-out
distance, a jackknife estimate of how often and how far new rows fall outside —
stays within :data:`~.holdout.MAX_HELD_OUT_COST` nats per row of the best: the
broadest predictive the data cannot reject, the rule δ's held-out choice follows.
"""

from dataclasses import dataclass, replace

import numpy as np
import torch

from .curvature import check_budget, memory_budget
from .holdout import MAX_HELD_OUT_COST

#: Largest distance beyond the range counted (training standard deviations): far beyond
#: any data, and its cube (1e90, times the grid's σ² ≤ 1e3) far below float64's overflow.
MAX_EXCESS = 1e30

#: σ² searched, broadest first; 0 (no added variance) last.
VARIANCE_GRID = np.r_[10.0 ** np.linspace(3.0, -2.0, 21), 0.0]


#: Largest (rows, d) float64 temporary of the per-row passes over the training rows.
CHUNK_BYTES = 2**26


def _row_chunks(X):
    """Row slices of ``X`` (n, d) whose (rows, d) float64 temporaries fit :data:`CHUNK_BYTES`."""
    size = max(1, CHUNK_BYTES // (8 * max(1, X.shape[1])))
    return [slice(s, min(s + size, len(X))) for s in range(0, len(X), size)] or [slice(0, 0)]


@dataclass(frozen=True)
class RangeKernel:
    """The cubic spline kernel of ReLU features beyond the training range (module doc).

    ``low``/``high``: each input coordinate's training range; ``scale``: its training
    standard deviation (1 where constant, as ``StandardScaler``); ``variance``: σ².
    """

    low: torch.Tensor
    high: torch.Tensor
    scale: torch.Tensor
    variance: float = 0.0

    @classmethod
    def of(cls, X, weight=None, variance=0.0):
        """The kernel of the training inputs ``X`` (n, d) and their positive row weights
        (the estimators drop rows of zero weight before ``fit``)."""
        X = X.reshape(len(X), -1)
        w = torch.ones(len(X), dtype=X.dtype, device=X.device) if weight is None else weight
        mean = (w @ X) / w.sum()
        chunks = _row_chunks(X)  # the (rows, d) deviations of one chunk at a time
        std = (sum(w[r] @ (X[r] - mean) ** 2 for r in chunks) / w.sum()).sqrt()
        tiny = 10 * torch.finfo(X.dtype).eps * mean.abs().clamp_min(1.0)
        scale = torch.where(std > tiny, std, torch.ones_like(std))
        return cls(X.min(0).values, X.max(0).values, scale, float(variance))

    def with_variance(self, variance):
        return replace(self, variance=float(variance))

    def covering(self, other):
        """The kernel whose range covers both ranges (``partial_fit``: every task's rows)."""
        low = torch.minimum(self.low, other.low.to(self.low))
        high = torch.maximum(self.high, other.high.to(self.high))
        return replace(self, low=low, high=high)

    def excess(self, X):
        """Signed distance beyond the range in training-std units (n, d): > 0 above, < 0
        below, 0 inside."""
        X = X.reshape(len(X), -1).to(self.low)
        e = ((X - self.high).clamp_min(0) - (self.low - X).clamp_min(0)) / self.scale
        # at most MAX_EXCESS standard deviations: the variance (∝ e³) stays finite (float64)
        return e.clamp(-MAX_EXCESS, MAX_EXCESS)

    def diag(self, X, variance=None):
        """k(x, x) for each row of ``X``: σ²·mean over coordinates of |e|³/3 (n,)."""
        variance = self.variance if variance is None else variance
        return variance * self.excess(X).abs().pow(3).mean(1) / 3

    def loo_diag(self, X, weight=None):
        """k(x, x)/σ² of each training row at its leave-one-out distance: beyond the range
        of the other rows (n,). Only a row that alone holds a coordinate's minimum or
        maximum is outside (by its distance to the next value); with ``weight``, a total
        weight of 2 or more at an extreme is several rows (integer weights count as
        duplicated rows; ``class_weight`` ones below 2 stay one row)."""
        X = X.reshape(len(X), -1).to(self.low)
        w = (torch.ones(len(X), dtype=X.dtype, device=X.device) if weight is None
             else weight.to(X))[:, None]
        # by chunks of rows (the (rows, d) temporaries of one chunk at a time): per
        # coordinate, the maximum, the weight at it and the next value, then the rows
        chunks = _row_chunks(X)
        edges = []
        for sign in (1.0, -1.0):  # the maximum, then the minimum (of −X)
            top = torch.stack([(sign * X[r]).max(0).values for r in chunks]).max(0).values
            alone = sum((w[r] * (sign * X[r] == top)).sum(0) for r in chunks) < 2
            nxt = torch.stack([torch.where(sign * X[r] == top, -torch.inf, sign * X[r])
                               .max(0).values for r in chunks]).max(0).values
            edges.append((sign, top, alone & torch.isfinite(nxt), nxt))
        out = X.new_empty(len(X))
        for r in chunks:
            excess = torch.zeros_like(X[r])
            for sign, top, counted, nxt in edges:
                Z = sign * X[r]
                excess += torch.where((Z == top) & counted, Z - nxt, torch.zeros_like(Z))
            out[r] = (excess / self.scale).pow(3).mean(1) / 3
        return out

    def cross(self, X1, X2):
        """k(x, x') (n1, n2): σ² times the mean over coordinates of k₁(e, e') (one
        coordinate at a time: n1·n2 floats, not n1·n2·d)."""
        e1, e2 = self.excess(X1), self.excess(X2)
        K = e1.new_zeros((len(e1), len(e2)))
        for a, b in zip(e1.T, e2.T):
            a, b = a[:, None], b[None, :]
            m = torch.minimum(a.abs(), b.abs()) * (a * b > 0)
            K += m**3 / 3 + (a - b).abs() * m**2 / 2
        return self.variance * K / max(1, e1.shape[1])

    def add_to(self, X, cov):
        """``cov`` (n, C, C) plus k(x, x)·I per row (a new tensor)."""
        v = self.diag(X).to(cov)
        return cov + v[:, None, None] * torch.eye(cov.shape[-1], dtype=cov.dtype,
                                                   device=cov.device)

    def sample(self, X, n_samples, n_outputs, generator):
        """Draws (S, n, C) of the GP on the rows of ``X``, jointly over the rows outside
        the range (0 inside); independent outputs. Refused (``MemoryError``) where the
        kernel of the rows outside exceeds the memory budget."""
        out = torch.zeros((n_samples, len(X), n_outputs), dtype=self.low.dtype)
        rows = torch.nonzero(self.excess(X).abs().sum(1) > 0).flatten()
        if len(rows) == 0:
            return out
        check_budget(3 * 8 * len(rows) ** 2, f"The kernel of the {len(rows)} rows outside "
                     "the training range", memory_budget(X.device), "fewer rows per call")
        lam, Q = torch.linalg.eigh(self.cross(X[rows], X[rows]))
        root = (Q * lam.clamp_min(0).sqrt()).cpu()
        z = torch.randn((n_samples, len(rows), n_outputs), generator=generator,
                        dtype=root.dtype)
        out[:, rows.cpu()] = torch.einsum("nk,skc->snc", root, z)
        return out


def choose_variance(kernel, X, y, weight, moments, nll):
    """σ² of ``kernel`` (fitted on the training rows ``X``): the largest of
    :data:`VARIANCE_GRID` whose expected NLL cost per new row, estimated by the
    jackknife, is within ``MAX_HELD_OUT_COST`` of the grid's best.

    A new row from the training distribution lies outside the training range about as
    often, and as far, as a training row lies outside the range of the others: each row
    that extends the range is scored at its leave-one-out distance
    (:meth:`RangeKernel.loo_diag`); the cost is the mean over all training rows
    (weighted by ``weight``) of the NLL added at σ². ``moments(rows)`` gives the GLM
    moments (f, cov) of those rows, ``nll(f, cov, y)`` the per-row NLL of the
    predictive (the classifier's link). The training rows' own predictions are more
    confident than a new row's, so the cost is if anything overstated.
    """
    unit = kernel.loo_diag(X, weight)
    rows = torch.nonzero(unit > 0).flatten()
    w = np.ones(len(X)) if weight is None else weight.detach().cpu().numpy().astype(float)
    return variance_of_rows(unit[rows], X[rows], y[rows], w[rows.cpu().numpy()], w.sum(),
                            moments, nll)


def variance_of_rows(unit, X, y, w_rows, total, moments, nll):
    """:func:`choose_variance` from the rows that extend the range (``unit``: their
    positive leave-one-out k(x, x)/σ², ``w_rows`` their weights) and the training rows'
    ``total`` weight."""
    if len(unit) == 0:  # no row extends the range of the others: nothing rejects σ²
        return float(VARIANCE_GRID[0])
    f, cov = moments(X)
    unit = unit.to(cov)
    eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
    means = np.array([w_rows @ nll(f, cov + v * unit[:, None, None] * eye, y) / total
                      for v in VARIANCE_GRID])
    return float(VARIANCE_GRID[np.flatnonzero(means <= means.min() + MAX_HELD_OUT_COST)[0]])

