"""Diagonal posterior: precision s·h + δ, elementwise."""

import torch

from .base import Posterior


def layer_diag_variance(a, G, var, weight, bias):
    """J diag(var) Jᵀ of one nn.Linear layer from its input ``a`` (n, in) and the output
    gradients ``G`` (n, C, out) of its pre-activation (θ slices ``weight``, ``bias``):
    output c's Jacobian is g_c ⊗ a, so the block is G diag(a² V_Wᵀ) Gᵀ."""
    t = a.square() @ var[weight].reshape(G.shape[2], a.shape[1]).T
    out = (G * t[:, None, :]) @ G.transpose(1, 2)
    if bias is not None:
        out = out + (G * var[bias]) @ G.transpose(1, 2)
    return out


class DiagPosterior(Posterior):
    structure = "diag"

    def __init__(self, h):
        self.h = h.clamp_min(0)
        self.n_params = h.numel()

    def scalar_spectrum(self):
        return self.h, self.n_params

    def log_det(self, delta, s, index=None):
        """Σ log(s·h + δ); with ``index``, δ holds one value per group (δ[index] per weight)."""
        if index is not None:
            delta = delta[index]
        return torch.log(s * self.h + delta).sum()

    def _apply_prior(self, delta, s):
        self._var = 1.0 / (s * self.h + delta.detach().to(self.h.device))
        return self

    def functional_variance(self, J):
        return (J * self._var) @ J.transpose(1, 2)

    def layer_variance(self, a, G, weight, bias):
        """J Σ Jᵀ of one nn.Linear layer (see :func:`layer_diag_variance`)."""
        return layer_diag_variance(a, G, self._var, weight, bias)

    def last_layer_variance(self, phi, n_out, has_bias, scratch=False):
        """J Σ Jᵀ for f = W φ + b without forming J (θ = [vec W, b]); ``phi`` is only read."""
        n_w = n_out * phi.shape[1]
        var = (phi**2) @ self._var[:n_w].reshape(n_out, -1).T
        if has_bias:
            var = var + self._var[n_w:]
        return torch.diag_embed(var)

    def sample(self, n_samples, generator):
        z = torch.randn(n_samples, self.n_params, generator=generator,
                        dtype=self.h.dtype).to(self.h.device)  # CPU draws: device-independent
        return z * self._var.sqrt()

    def marginal_variance(self):
        return self._var

    def cov_matmat(self, V):
        """Σ V for V of shape (P, k)."""
        return self._var[:, None] * V

    def precision_matmat(self, V):
        """Σ⁻¹ V for V of shape (P, k)."""
        return V / self._var[:, None]

    def log_det_cov(self):
        """log det Σ."""
        return torch.log(self._var).sum()
