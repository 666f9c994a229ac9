"""Likelihoods: negative log-likelihood, output Hessian Λ and its square root.

Every likelihood works on the network outputs ``f`` of shape (n, C) in float64
and exposes what the MAP objective, the curvature and the evidence need:

- ``nll(f, y)``: per-row negative log-likelihood, shape (n,);
- ``sqrt_hessian(f)``: a factor ``S`` of shape (n, C, K) with ``S Sᵀ = Λ(f)``,
  Λ = −∇²_f log p(y | f) (independent of ``y`` for all three likelihoods);
- ``residual(f, y)``: ∇_f nll, shape (n, C), for the empirical Fisher.

The temperature ``T`` and the Gaussian noise ``σ`` are applied outside, as a
scalar factor on the log-likelihood and on Λ (see ``curvature_scale``).
"""

import math

import torch
import torch.nn.functional as F


class Categorical:
    """Softmax likelihood over ``C`` logits."""

    name = "categorical"

    def nll(self, f, y):
        return F.cross_entropy(f, y.long(), reduction="none")

    def residual(self, f, y):
        return torch.softmax(f, -1) - F.one_hot(y.long(), f.shape[-1]).to(f.dtype)

    def sqrt_hessian(self, f):
        # Λ = diag(p) − p pᵀ = (diag(√p) − p √pᵀ)(diag(√p) − p √pᵀ)ᵀ since Σ p = 1.
        p = torch.softmax(f, -1)
        sp = p.sqrt()
        return torch.diag_embed(sp) - p.unsqueeze(-1) * sp.unsqueeze(-2)


class Bernoulli:
    """Sigmoid likelihood of a single logit (binary classification)."""

    name = "bernoulli"

    def nll(self, f, y):
        return F.binary_cross_entropy_with_logits(
            f[:, 0], y.to(f.dtype), reduction="none"
        )

    def residual(self, f, y):
        return torch.sigmoid(f) - y.to(f.dtype).reshape(-1, 1)

    def sqrt_hessian(self, f):
        p = torch.sigmoid(f)
        return (p * (1 - p)).sqrt().unsqueeze(-1)


class Gaussian:
    """Gaussian likelihood with unit noise; σ enters through ``curvature_scale``.

    ``nll`` here is ½‖y − f‖² (the σ-free part); ``gaussian_log_likelihood``
    gives the full log-likelihood for any σ.
    """

    name = "gaussian"

    def nll(self, f, y):
        return 0.5 * ((y.reshape(f.shape) - f) ** 2).sum(-1)

    def residual(self, f, y):
        return f - y.reshape(f.shape)

    def sqrt_hessian(self, f):
        eye = torch.eye(f.shape[-1], dtype=f.dtype, device=f.device)
        return eye.expand(f.shape[0], -1, -1)


def gaussian_log_likelihood(sse, n, sigma):
    """Total Gaussian log-likelihood from per-output sums of squared errors.

    Parameters
    ----------
    sse : tensor of shape (C,)
        Σ_n (y_nc − f_nc)² per output.
    n : int
        Number of rows.
    sigma : tensor of shape () or (C,)
        Observation noise per output (broadcast).
    """
    sigma = sigma.expand_as(sse)
    return (
        -0.5 * n * sse.numel() * math.log(2 * math.pi)
        - n * torch.log(sigma).sum()
        - 0.5 * (sse / sigma**2).sum()
    )


LIKELIHOODS = {"categorical": Categorical, "bernoulli": Bernoulli, "gaussian": Gaussian}
