"""The fitted Laplace approximation: what ``fit`` produces and prediction reads.

:class:`FittedLaplace` is immutable: the subset of weights (with the net at the
MAP), the likelihood, the prediction posterior at the chosen hyperparameters, the
evidence (the curvature without prior, a function of δ and σ), the
:class:`~.hyperparameters.Hyperparameters`, the regressor's
:class:`~.hyperparameters.TargetScale` and the choices the fit made (subset kind,
structure, tuning).  Another prior gives another object (:meth:`with_prior`); the
fitted curvature is never changed.

Prediction runs the GLM moments f(x), J(x) Σ J(x)ᵀ (or the net at weight samples
θ* + ε) per row chunk within the prediction buffer, writing each chunk's result
into one output (:func:`fill_rows`): only the results exist for all rows.
"""

import threading
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .curvature import memory_budget

# Largest prediction buffer per row chunk: cache-sized on the CPU; on CUDA larger chunks
# keep the device busy (fewer kernel launches), within its memory budget.
PREDICT_CHUNK_BYTES = 2**26
CUDA_PREDICT_CHUNK_BYTES = 2**30

_EVIDENCE_LOCK = threading.Lock()


def fill_rows(out, part, rows, n_rows):
    """Write the result ``part`` of the row slice ``rows`` into ``out`` (arrays, or tuples
    of arrays; torch or numpy), allocated for all ``n_rows`` rows on the first chunk.

    Chunked predictions write into one output instead of concatenating a list of
    parts: no small allocations stay behind between the chunks' large temporaries, so
    the allocator reuses their memory instead of growing the heap chunk by chunk.
    """
    if isinstance(part, tuple):
        return tuple(fill_rows(o, p, rows, n_rows)
                     for o, p in zip((None,) * len(part) if out is None else out, part))
    if out is None:
        shape = (n_rows, *part.shape[1:])
        out = (torch.empty(shape, dtype=part.dtype, device=part.device)
               if isinstance(part, torch.Tensor) else np.empty(shape, dtype=part.dtype))
    out[rows] = part
    return out


def by_rows(fn, arrays, row_bytes):
    """``fn(*arrays)`` over blocks of rows of ``arrays`` whose ``row_bytes`` per row fit
    the CPU's prediction chunk (links run in numpy), concatenated by rows."""
    n, size = len(arrays[0]), max(1, PREDICT_CHUNK_BYTES // row_bytes)
    if n <= size:
        return fn(*arrays)
    out = None
    for start in range(0, n, size):
        rows = slice(start, min(start + size, n))
        out = fill_rows(out, fn(*(a[rows] for a in arrays)), rows, n)
    return out


def generator(seed):
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


@dataclass(frozen=True)
class FittedLaplace:
    """One fitted Laplace approximation (see the module docstring).

    ``subset`` predicts (the refined subset under ``refine``); ``evidence`` is that of
    the fit (of the task given the earlier ones after ``partial_fit``); ``n_rows`` its
    rows (Σ w with row weights); ``task_rows`` the rows of every ``partial_fit`` task
    so far (None outside continual learning); ``report`` the fit's diagnostics
    (``validation_nll``, ``evidence_history``, ``refine_*``).
    """

    likelihood: object
    subset: object
    posterior: object
    evidence: object
    hyper: object
    kind: str
    structure: str
    tuning: object
    n_outputs: int
    curvature: str
    temperature: float
    prediction_seed: int
    targets: object = None
    refined: bool = False
    task_rows: object = None
    n_tasks: int = 0
    report: dict = field(default_factory=dict)
    outside: object = None  # the variance outside the training range (outside.RangeKernel)

    # ------------------------------------------------------------ hyperparameters
    @property
    def device(self):
        return self.subset.theta.device

    def scale(self, sigma=None):
        return self.hyper.scale(self.likelihood.has_noise, self.curvature, self.temperature,
                                sigma)

    def with_prior(self, prior_precision):
        """The same fit predicting at another whole-net prior (σ the fitted one): the
        prediction posterior's curvature (the GP's with ``pred_type="gp"``) at it."""
        hyper = self.hyper.with_prior(prior_precision)
        posterior = self.posterior.with_prior(hyper.delta(self.subset), self.scale())
        return replace(self, hyper=hyper, posterior=posterior)

    def log_evidence(self, prior_precision=None, sigma=None):
        """The log evidence (model units) at a whole-net prior (default the fitted) and a
        model σ (None: the evidence's own reading of the fitted σ)."""
        prior = self.hyper.prior_precision if prior_precision is None else prior_precision
        delta = self.hyper.with_prior(prior).delta(self.subset)
        # A per-parameter prior fills caches of the posterior: one thread at a time.
        with _EVIDENCE_LOCK, torch.no_grad():
            return float(self.evidence(delta, sigma))

    # ------------------------------------------------------------ row chunks
    def chunk_bytes(self):
        """The prediction chunk: cache-sized on the CPU, larger on CUDA (within its budget)."""
        device = self.device
        return PREDICT_CHUNK_BYTES if device.type == "cpu" else min(
            CUDA_PREDICT_CHUNK_BYTES, memory_budget(device) // 4)

    def row_chunks(self, n_rows, moments=False, extra_row_bytes=0):
        """Row slices whose buffers (the subset's and posterior's per row, plus
        ``extra_row_bytes``, e.g. the link's) fit the prediction chunk of the device."""
        per_row = self.subset.row_bytes(self.n_outputs, moments, self.posterior)
        size = max(1, self.chunk_bytes() // (per_row + extra_row_bytes))
        return [slice(s, min(s + size, n_rows)) for s in range(0, n_rows, size)]

    # ------------------------------------------------------------ GLM predictive
    def glm_moments(self, X):
        """MAP outputs (n, C) and functional covariance J Σ Jᵀ (n, C, C)."""
        return self.per_chunk(X, lambda f, cov: (f, cov))

    def per_chunk(self, X, fn, extra_row_bytes=0):
        """``fn(f, cov)`` of the GLM moments of each row chunk, concatenated by rows
        (``cov`` with the variance outside the training range, :mod:`.outside`).

        Jacobians, functional covariance and ``fn`` (a link, the variances) run on one
        chunk at a time: only ``fn``'s results (arrays, or tuples of them) exist for all
        rows. ``extra_row_bytes``: what ``fn`` allocates per row, in the chunk's budget.
        """
        out = None
        with torch.no_grad():
            for sl in self.row_chunks(len(X), True, extra_row_bytes):
                f, cov = self.subset.moments(X[sl], self.posterior)
                if self.outside is not None:
                    cov = self.outside.add_to(X[sl], cov)
                part = fn(f, cov)
                out = fill_rows(out, part, sl, len(X))
        return out

    # ------------------------------------------------------------ sampled predictive
    def nn_per_chunk(self, X, fn, n_samples, extra_row_bytes=0):
        """``fn(samples)`` of the network outputs (S, rows, C) at ``n_samples`` weight
        samples, per row chunk, concatenated by rows; the weight samples are drawn once
        (the prediction seed), so the result does not depend on the chunks."""
        with torch.no_grad():
            eps = self.posterior.sample(n_samples, generator(self.prediction_seed))
        # per row: the outputs at every sample and what fn makes of them (the network's
        # activations exist for one sample at a time)
        per_row = 8 * n_samples * self.n_outputs + extra_row_bytes
        size, n, out = max(1, self.chunk_bytes() // per_row), len(X), None
        for start in range(0, n, size):
            rows = slice(start, min(start + size, n))
            out = fill_rows(out, fn(self.nn_samples(X[rows], n_samples, None, eps)),
                            rows, n)
        return out

    def nn_samples(self, X, n_samples, gen, eps=None):
        """Network outputs at weight samples θ* + ε, ε ~ N(0, Σ) (or the given ``eps``):
        (S, n, C)."""
        with torch.no_grad():
            if eps is None:
                eps = self.posterior.sample(n_samples, gen)
            return torch.stack([self.subset.forward(X, self.subset.theta + e) for e in eps])

    def function_samples(self, X, n_samples, seed, sampled_net=False):
        """Functions from the posterior: GLM f + J(θ − θ*) (plus draws of the variance
        outside the training range), or the net at θ with ``sampled_net``
        (``pred_type="nn"``): (S, n, C)."""
        gen = generator(seed)
        if sampled_net:
            return self.nn_samples(X, n_samples, gen)
        with torch.no_grad():
            eps = self.posterior.sample(n_samples, gen)
            out = []
            for sl in self.row_chunks(len(X)):
                f, J = self.subset.jacobians(X[sl])
                out.append(f[None] + torch.einsum("ncp,sp->snc", J, eps))
            out = torch.cat(out, dim=1)
            if self.outside is not None:  # its GP's draws, jointly over the rows
                out = out + self.outside.sample(X, n_samples, out.shape[-1], gen).to(out)
            return out
