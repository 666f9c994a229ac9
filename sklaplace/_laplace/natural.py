"""The predictive of a heteroscedastic Gaussian from a Gaussian over its natural parameters.

The network's outputs per target are η₁ = μ/σ² and the log precision g = −log σ²
(:class:`~.likelihoods.HeteroscedasticGaussian`); the GLM predictive gives them jointly
Gaussian, (η₁, g) ~ N(f, V). The mean and variance functions μ = η₁e^(−g) and
σ² = e^(−g) are linearized at f as the network is at θ* (the delta method): the
predictive of y is N(μ(f), ∇μᵀ V ∇μ + σ²(f)) with ∇μ = (e^(−g), −μ) — the GLM
predictive of the mean function μ(x; θ) plus the noise of the MAP's σ²(x). It is the
exact moment matching of the mixture to first order in V. The exact moments (lognormal:
E[σ²] = e^(−g + v_g/2), E[μ] = e^(−g + v_g/2)(η₁ − Cov(η₁, g)), ...) grow like e^(2v_g)
where V is large, beyond the training range: on y = sin 3x + ε with σ(x) = 0.05 + 0.4|x|
(2,000 rows on [−1, 1]) the test NLL on [1, 1.5] was 2.15 with them against 1.29
linearized, the same 0.09 in range (``examples/plot_heteroscedastic.py``'s data).
The joint moments over rows (``return_cov``, ``sample_y``) linearize the same way.
With ``pred_type="nn"`` the moments are those of the net's draws.

The two heads' weights live on different scales: η₁'s are those of the mean times
e^g = 1/σ², hundreds where the noise is a tenth of std(y), g's near those of the
hidden layers. One prior precision for all of them has to let η₁'s weights be (the
evidence took δ ≈ 2e−4 on energy), and then leaves the hidden layers and g nearly
unregularized: trained on energy's rows up to the 80th percentile of the first
principal component, the variance of η₁ on the rows above was 2,300 times its value
on the training rows, and the predictive variance 180 times the mean's squared error
there (1,400–5,400 times on energy's other direction and yacht's). So the prior
is tuned per head (:func:`head_index`): the weights of η₁'s rows of the output layer,
those of g's rows, and the rest, each group of ``prior_structure`` split by them.
"""

import math

import numpy as np
import torch
from torch import nn

from .subsets.base import named_params


def _split(f):
    T = f.shape[-1] // 2
    return f[..., :T], f[..., T:], T


def moments(f, cov):
    """Per row: (mean, epistemic variance, aleatoric variance), each (n, T), of the
    outputs' means ``f`` (n, 2T) and covariances ``cov`` (n, 2T, 2T), model units."""
    eta1, g, T = _split(f)
    aleatoric = torch.exp(-g)
    mean = eta1 * aleatoric
    v1 = torch.diagonal(cov[:, :T, :T], dim1=1, dim2=2)
    vg = torch.diagonal(cov[:, T:, T:], dim1=1, dim2=2)
    c = torch.diagonal(cov[:, :T, T:], dim1=1, dim2=2)
    epistemic = aleatoric**2 * v1 - 2 * aleatoric * mean * c + mean**2 * vg
    return mean, epistemic.clamp_min(0), aleatoric


def sample_moments(samples):
    """(mean, epistemic, aleatoric) of output draws (S, n, 2T): the draws' moments."""
    eta1, g, _ = _split(samples)
    var = torch.exp(-g)
    mu = eta1 * var
    return mu.mean(0), mu.var(0, correction=int(len(samples) > 1)), var.mean(0)


def joint(f, cov):
    """Joint moments over rows: mean (n, T), covariance of μ (n, T, n, T) and the
    aleatoric variance (n, T) of ``f`` (n, 2T) and the joint ``cov`` (n, 2T, n, 2T)."""
    eta1, g, T = _split(f)
    n = f.shape[0]
    aleatoric = torch.exp(-g)
    mean = eta1 * aleatoric
    # ∇μ per output of the flattened (row, target) index: d/dη₁ = e^(−g), d/dg = −μ
    d1, dg = aleatoric.reshape(-1), -mean.reshape(-1)
    V = cov.reshape(n, 2 * T, n, 2 * T)
    V11 = V[:, :T, :, :T].reshape(n * T, n * T)
    Vgg = V[:, T:, :, T:].reshape(n * T, n * T)
    V1g = V[:, :T, :, T:].reshape(n * T, n * T)  # Cov(η₁_a, g_b)
    cov_mu = (d1[:, None] * d1[None, :] * V11 + d1[:, None] * dg[None, :] * V1g
              + dg[:, None] * d1[None, :] * V1g.T + dg[:, None] * dg[None, :] * Vgg)
    cov_mu = 0.5 * (cov_mu + cov_mu.T)
    return mean, cov_mu.reshape(n, T, n, T), aleatoric


def gaussian_nll(mean, var, y):
    """Per-row Gaussian NLL summed over targets (numpy or torch arrays (n, T))."""
    y = y.reshape(mean.shape)
    return 0.5 * (torch.log(2 * math.pi * var) + (y - mean) ** 2 / var).sum(-1)


def head_index(module, n_outputs):
    """Per whole-net parameter: 1 for the weights of η₁'s rows of the output layer,
    2 for those of g's rows, 0 for the rest (shared by both heads); the output layer is
    the last ``nn.Linear`` with ``n_outputs`` (2T) outputs. None if there is none, or
    if its weights are not trainable."""
    layers = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not layers or layers[-1].out_features != n_outputs:
        return None
    out, T = layers[-1], n_outputs // 2
    labels, found = [], 0
    for _, p in named_params(module):
        part = np.zeros(p.shape, dtype=int)
        if p is out.weight or p is out.bias:
            part[:T], part[T:] = 1, 2
            found += 1
        labels.append(part.reshape(-1))
    return np.concatenate(labels) if found == 1 + (out.bias is not None) else None


def evidence_heads(likelihood, subset, structure, n_out, f, weight):
    """(The Laplace weights' output head, {head: log of its δ's scale}) where the evidence
    tunes the prior per head (:func:`head_index`): the heteroscedastic likelihood, but for
    Kronecker factors (one δ per tensor) and a net without a 2T-output ``nn.Linear``
    last; else (None, None). η₁'s weights are the mean's times e^g: its δ is searched
    within e^(−2ḡ) times the bounds, ḡ the mean log precision ``f`` (n, 2T) on the
    training rows (row ``weight`` or None). Post-hoc and online tuning alike."""
    if likelihood.name != "heteroscedastic" or structure == "kron":
        return None, None
    heads = head_index(subset.module, n_out)
    if heads is None:
        return None, None
    g = f[:, n_out // 2:].mean(1)
    g_bar = float(g.mean() if weight is None else (weight * g).sum() / weight.sum())
    return heads[subset.whole_index], {1: -2.0 * g_bar}
