"""The predictive of a heteroscedastic Gaussian from a Gaussian over its natural parameters.

The network's outputs per target are η₁ = μ/σ² and the log precision g = −log σ²
(:class:`~.likelihoods.HeteroscedasticGaussian`); the GLM predictive gives them jointly
Gaussian, (η₁, g) ~ N(f, V). The predictive of y is then a scale mixture of Gaussians,
N(μ, σ²) with μ = η₁e^(−g) and σ² = e^(−g) random; it is summarised by the Gaussian with
its exact first two moments (moment matching), in closed form because g is Gaussian
(lognormal moments, and E[X e^(aY)] = e^(a m_Y + a² v_Y/2)(m_X + a·Cov(X, Y)) for jointly
Gaussian X, Y):

- aleatoric variance E[σ²] = exp(−g + v_g/2);
- mean E[μ] = exp(−g + v_g/2)(η₁ − c), c = Cov(η₁, g);
- epistemic variance Var[μ] = E[μ²] − E[μ]², E[μ²] = exp(−2g + 2v_g)((η₁ − 2c)² + v₁);

so mean and total variance E[σ²] + Var[μ] are those of y exactly (the law of total
variance). For V → 0 the epistemic variance is the delta method's ∇μᵀ V ∇μ. The joint
moments over rows (``return_cov``, ``sample_y``) use the same identity for every pair.
With ``pred_type="nn"`` the moments are those of the draws.
"""

import math

import torch


def _split(f):
    T = f.shape[-1] // 2
    return f[..., :T], f[..., T:], T


def moments(f, cov):
    """Per row: (mean, epistemic variance, aleatoric variance), each (n, T), of the
    outputs' means ``f`` (n, 2T) and covariances ``cov`` (n, 2T, 2T), model units."""
    eta1, g, T = _split(f)
    d = torch.diagonal(cov, dim1=1, dim2=2)
    v1, vg = d[:, :T].clamp_min(0), d[:, T:].clamp_min(0)
    c = torch.diagonal(cov[:, :T, T:], dim1=1, dim2=2)
    aleatoric = torch.exp(-g + 0.5 * vg)
    mean = aleatoric * (eta1 - c)
    # E[μ²] − E[μ]² = e^(−2g + v_g)·(expm1(v_g)·((η₁ − 2c)² + v₁) + v₁ + 3c² − 2cη₁),
    # written without the cancellation of the two large terms
    a = (eta1 - 2 * c) ** 2 + v1
    inner = torch.expm1(vg) * a + v1 + 3 * c**2 - 2 * c * eta1
    epistemic = (torch.exp(-2 * g + vg) * inner).clamp_min(0)
    return mean, epistemic, aleatoric


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
    eta1, g = eta1.reshape(-1), g.reshape(-1)  # index a = row·T + target
    V = cov.reshape(n, 2 * T, n, 2 * T)
    V11 = V[:, :T, :, :T].reshape(n * T, n * T)
    Vgg = V[:, T:, :, T:].reshape(n * T, n * T)
    V1g = V[:, :T, :, T:].reshape(n * T, n * T)  # Cov(η₁_a, g_b)
    dgg, d1g = Vgg.diagonal(), V1g.diagonal()
    # E[μ_a μ_b] with a = −1 on g_a and g_b: tilt exp(−g_a − g_b + ½ Var(g_a + g_b)),
    # tilted means η₁_a − Cov(η₁_a, g_a + g_b)
    tilt = torch.exp(-g[:, None] - g[None, :] + 0.5 * (dgg[:, None] + dgg[None, :]) + Vgg)
    m_a = eta1[:, None] - d1g[:, None] - V1g
    m_b = eta1[None, :] - d1g[None, :] - V1g.T
    second = tilt * (m_a * m_b + V11)
    aleatoric = torch.exp(-g + 0.5 * dgg)
    mean = aleatoric * (eta1 - d1g)
    cov_mu = second - torch.outer(mean, mean)
    cov_mu = 0.5 * (cov_mu + cov_mu.T)
    return mean.reshape(n, T), cov_mu.reshape(n, T, n, T), aleatoric.reshape(n, T)


def gaussian_nll(mean, var, y):
    """Per-row Gaussian NLL summed over targets (numpy or torch arrays (n, T))."""
    y = y.reshape(mean.shape)
    return 0.5 * (torch.log(2 * math.pi * var) + (y - mean) ** 2 / var).sum(-1)
