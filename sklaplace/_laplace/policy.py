"""The policy: what the ``"auto"`` settings mean, and the time and memory guards.

Pure functions of sizes (rows N, outputs C, weights P), of the parameters and of
one probe of the net (``all_linear``: every trainable tensor is an ``nn.Linear``'s
that Kronecker factors can read), so every choice is testable without training:

- ``hyperparameter_tuning="auto"``: :func:`classifier_tuning`, :func:`regressor_tuning`;
- ``subset_of_weights`` / ``hessian_structure`` ``"auto"``: :func:`choose_subset`
  (over which weights, and the structure when it follows from the sizes alone), then
  :func:`finish_structure` (once the subset's size is known);
- ``batch_size="auto"``: :func:`batch_rows`;
- the time guard of the full and low-rank curvature: :func:`full_structure_seconds`,
  :func:`check_time`; the memory guard is ``curvature.memory_budget``.
"""

import math
import warnings

import numpy as np

from .prior import constant_per_tensor

AUTO_FULL_MAX_PARAMS = 5000
AUTO_LAST_LAYER_FULL_MAX = 2000
# Time guard of the full / low-rank structures: flop counts at an assumed float64 rate
# (a conservative figure for a 2-core laptop; BLAS peaks are higher on bigger machines).
ASSUMED_FLOPS = 2e10
# The same for the warning on a CUDA device (a data-centre GPU's float64 rate, discounted);
# the "auto" policy keeps the CPU figure, so the same data give the same structure anywhere.
ASSUMED_CUDA_FLOPS = 2e12
TIME_BUDGET_SECONDS = 120.0
# "auto" takes the full structure over all weights up to this estimated time.
AUTO_FULL_SECONDS = 2.0
#: Fewest held-out rows for which a classifier's "auto" tuning holds rows out.
MIN_HELD_OUT_ROWS = 10
#: ``batch_size="auto"``: the smallest minibatch, and the most Adam steps an epoch.
AUTO_BATCH_ROWS = 128
AUTO_STEPS_PER_EPOCH = 16


# ---------------------------------------------------------------- minibatches
def batch_rows(batch_size, n_rows):
    """Rows per minibatch of the default MLP's Adam for a training set of ``n_rows``.

    An integer is kept. ``"auto"``: 128 rows, or ⌈N/16⌉ where that is larger, so an
    epoch takes at most 16 steps. Minibatch noise at a constant learning rate η keeps
    the weights at a distance from the MAP that grows with η·N/B (the scale of the
    stationary spread of SGD against the posterior's, Mandt, Hoffman & Blei 2017):
    a fixed batch leaves a network trained on many rows ever farther from its MAP,
    which the Laplace approximation is centred on, and spends most of an epoch on
    per-step costs. With at most 16 steps an epoch the noise stays at that of a
    2,048-row set at 128 rows a batch; below 2,049 rows the batch is 128 rows.
    """
    if batch_size != "auto":
        return int(batch_size)
    return max(AUTO_BATCH_ROWS, math.ceil(n_rows / AUTO_STEPS_PER_EPOCH))


# ---------------------------------------------------------------- tuning
def classifier_tuning(n_rows, validation_fraction, prior_structure, frozen, refine):
    """``hyperparameter_tuning="auto"`` of ``LaplaceClassifier``: ``"cv"`` or ``"evidence"``.

    The post-hoc LA of a net trained at another δ is often broader than the data
    support (probit NLL above the MAP's); held-out NLL picks its width. ``"cv"``
    tunes one scalar δ: a layer-wise or diagonal prior asks for the evidence, and so
    do data too small to hold out a useful validation set. A frozen net was trained
    elsewhere, most likely on the rows "cv" would hold out: their NLL is then
    in-sample and favours the largest δ. Refinement does inference under the prior
    δ: the evidence's δ is one, while "cv" picks the width of the unrefined predictive.
    """
    held_out = int(np.ceil(validation_fraction * n_rows))
    if (prior_structure != "scalar" or held_out < MIN_HELD_OUT_ROWS or frozen
            or refine is not None):
        return "evidence"
    return "cv"


def regressor_tuning(frozen, sigma_size, max_epochs, online_burn_in, online_frequency,
                     subset_of_weights):
    """``hyperparameter_tuning="auto"`` of ``LaplaceRegressor``: ``"online"`` or ``"evidence"``.

    Online: the net is trained at the σ and δ its evidence chooses (Immer et al.
    2021), not at the initial σ, which underfits or overfits the MAP itself; it needs
    updates to make (enough epochs), all weights and one σ, and a net to train.
    """
    if frozen or sigma_size > 1:
        return "evidence"
    updates = (online_frequency == "converged"
               or max_epochs >= online_burn_in + online_frequency)
    return "online" if updates and subset_of_weights in ("auto", "all") else "evidence"


def continual_tuning(hyperparameter_tuning):
    """``"auto"`` means the evidence in continual learning (no held-out data)."""
    return "evidence" if hyperparameter_tuning == "auto" else hyperparameter_tuning


# ---------------------------------------------------------------- subset and structure
def full_structure_seconds(n_rows, n_out, n_params, flops_per_second=ASSUMED_FLOPS,
                           kernel=True):
    """Estimated seconds to build and eigendecompose a full curvature of P weights.

    N·C ≥ P: Σ_n J_nᵀ Λ_n J_n costs N·C·P² and the P × P eigendecomposition about
    10·P³ (tridiagonalization plus eigenvectors); N·C < P: the N·C × N·C kernel
    costs (N·C)²·P to build, 10·(N·C)³ to decompose and (N·C)²·P for the vectors.
    ``kernel=False``: rows in parts (dask partitions), whose P × P sum is decomposed
    whatever N·C (the kernel would need all rows' Jacobians in one place).
    """
    m = n_rows * n_out
    if m >= n_params or not kernel:
        flops = m * n_params**2 + 10 * n_params**3
    else:
        flops = 2 * m**2 * n_params + 10 * m**3
    return flops / flops_per_second


def all_weights_structure(all_linear, n_rows, n_out, n_params, fits=True, kernel=True):
    """``hessian_structure="auto"`` over all weights: the full GGN when it is estimated
    within AUTO_FULL_SECONDS (``kernel``: :func:`full_structure_seconds`) and its
    Jacobians fit the memory budget; else Kronecker factors when every trainable tensor
    sits in an ``nn.Linear``; else the diagonal."""
    if fits and full_structure_seconds(n_rows, n_out, n_params,
                                       kernel=kernel) <= AUTO_FULL_SECONDS:
        return "full"
    return "kron" if all_linear else "diag"


def kron_holds_prior(prior_structure, prior_precision, sizes):
    """Whether the prior is one value per weight tensor, as Kronecker factors need
    (``sizes``: the net's tensor sizes, or the module)."""
    return prior_structure != "diag" and constant_per_tensor(prior_precision, sizes)


def kron_or_diag(structure, refine, holds_prior):
    """An "auto" structure the settings support: the diagonal instead of kron under
    ``refine`` or a prior that varies within a weight tensor (``holds_prior`` False)."""
    if structure == "kron" and (refine is not None or not holds_prior):
        return "diag"
    return structure


def choose_subset(subset_of_weights, hessian_structure, n_rows, n_out, n_params, all_linear,
                  fits, kernel=True):
    """(kind, structure) of the requested settings for a net of ``n_params`` weights;
    the structure may stay ``"auto"`` until the subset's size is known
    (:func:`finish_structure`).

    ``fits``: the Jacobians of all weights fit the memory budget; ``all_linear``: the
    probe's answer, or a callable that probes (run only when the choice needs it);
    ``kernel``: as :func:`full_structure_seconds`.
    ``"auto"`` over which
    weights: all of them with the full structure within its time and memory, or with
    the structure asked for; a net the diagonal would be left with takes the last layer.
    """
    kind, structure = subset_of_weights, hessian_structure
    if structure == "auto" and kind in ("all", "auto") and callable(all_linear):
        all_linear = all_linear()
    if kind == "all" and structure == "auto":
        structure = all_weights_structure(all_linear, n_rows, n_out, n_params, fits, kernel)
    if kind == "auto":
        if structure == "full":
            kind = "all" if n_params <= AUTO_FULL_MAX_PARAMS and fits else "last_layer"
        elif structure == "auto":
            structure = all_weights_structure(all_linear, n_rows, n_out, n_params, fits, kernel)
            kind, structure = ("all", structure) if structure != "diag" else ("last_layer", "auto")
        else:
            kind = "all"
    return kind, structure


def finish_structure(kind, structure, n_params, hessian_structure, refine, holds_prior):
    """The structure once the subset's ``n_params`` are known: a still-``"auto"`` one is
    full up to AUTO_LAST_LAYER_FULL_MAX last-layer weights, else Kronecker factors; an
    ``"auto"`` request never lands on a structure the settings cannot hold
    (:func:`kron_or_diag`)."""
    if structure == "auto":
        small = kind != "last_layer" or n_params <= AUTO_LAST_LAYER_FULL_MAX
        structure = "full" if small else "kron"
    if hessian_structure == "auto":
        structure = kron_or_diag(structure, refine, holds_prior)
    return structure


# ---------------------------------------------------------------- guards
def check_time(structure, n_rows, n_out, n_params, device_type, log=None, kernel=True):
    """Warn before a full / low-rank curvature estimated beyond the time budget."""
    rate = ASSUMED_FLOPS if device_type == "cpu" else ASSUMED_CUDA_FLOPS
    seconds = full_structure_seconds(n_rows, n_out, n_params, rate, kernel)
    if log is not None:
        log(f"{structure} curvature of {n_params} weights on {n_rows} rows × {n_out} "
            f"outputs: estimated {seconds:.3g} s")
    if seconds > TIME_BUDGET_SECONDS:
        warnings.warn(
            f"The {structure} curvature of {n_params} weights on {n_rows} rows × {n_out} "
            f"outputs is estimated at {seconds:.0f} s (beyond the {TIME_BUDGET_SECONDS:.0f} s "
            f"budget at an assumed {rate:.0e} float64 flop/s). Cheaper options: "
            "hessian_structure='kron' or 'diag', or subset_of_weights='last_layer'.",
            UserWarning,
        )
