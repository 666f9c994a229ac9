"""Gradients of the GLM predictive's moments with respect to the inputs.

The GLM predictive of a row x is N(f(x) + J(x)(θ̂ − θ*), J(x) Σ J(x)ᵀ + k(x, x)·I), with J(x)
the Jacobian of the net's outputs with respect to the Laplace weights at the MAP θ*, θ̂ the
predictive mean of the weights (θ* but after GLM refinement), Σ the posterior covariance and
k(x, x) the variance outside the training range (:mod:`.outside`, 0 without it). Both moments
are differentiable functions of x: J(x) is built by ``torch.func`` (``vmap`` of ``jacrev``
over the weights) on an input that carries autograd, so one backward pass per output gives
∂mean/∂x and ∂var/∂x for every row at once (rows do not interact). The Jacobian is taken with
respect to every trainable tensor of the module and its Laplace columns selected
(``subset.whole_index``): the same code for all weights, a subnetwork and the last layer, at the
cost of the whole net's Jacobian per row, which is what acquisition optimizers ask for (one row
at a time).
"""

import torch
from torch.func import functional_call, jacrev, vmap

from .subsets.base import _FUNCTIONAL_CALL_LOCK, named_params

#: Largest Jacobian block (bytes) of one chunk of rows.
CHUNK_BYTES = 2**26


def _module_dtype(module):
    for p in module.parameters():
        return p.dtype, p.device
    return torch.float64, torch.device("cpu")


def moment_gradients(subset, posterior, outside, X):
    """GLM predictive moments of the rows ``X`` (n, ...) and their input gradients.

    Returns ``(mean, var, mean_grad, var_grad)`` in model units: ``mean`` and ``var``
    (n, C), the gradients (n, C, *X.shape[1:]) — ∂mean_c/∂x and ∂var_c/∂x of each row
    with respect to its own input. ``var`` is the epistemic variance (the noise is
    constant in x and adds nothing to its gradient).
    """
    base = getattr(subset, "base", subset)  # a refined subset wraps the one at θ*
    shift = None if base is subset else (subset.theta - base.theta)
    module = subset.module
    names = [k for k, _ in named_params(module)]
    params = {k: p.detach() for k, p in named_params(module)}
    index = torch.as_tensor(subset.whole_index, dtype=torch.long)
    dtype, device = _module_dtype(module)
    n_all = sum(p.numel() for p in params.values())

    def single(p, x):
        return functional_call(module, p, (x.unsqueeze(0),)).reshape(-1)

    outs, n = [], len(X)
    size = max(1, CHUNK_BYTES // (8 * max(1, n_all) * 4))
    for start in range(0, n, size):
        x = X[start:start + size].detach().to(device=device, dtype=dtype).requires_grad_(True)
        with torch.enable_grad(), _FUNCTIONAL_CALL_LOCK:
            f = vmap(single, in_dims=(None, 0))(params, x)
            jac = vmap(jacrev(single), in_dims=(None, 0))(params, x)
            rows, C = f.shape
            J = torch.cat([jac[k].reshape(rows, C, -1) for k in names], dim=2)[:, :, index]
            J = J.to(posterior_dtype(subset))
            mean = f.to(J) if shift is None else f.to(J) + J @ shift
            cov = posterior.functional_variance(J)
            if outside is not None:
                cov = outside.add_to(x.to(J), cov)
            var = torch.diagonal(cov, dim1=1, dim2=2)
            mean_grad = torch.stack([_grad(mean[:, c], x) for c in range(C)], dim=1)
            var_grad = torch.stack([_grad(var[:, c], x) for c in range(C)], dim=1)
        # a variance rounded below 0 is reported as 0 (as the predictive does), flat there
        negative = var.detach() < 0
        var_grad = torch.where(negative.reshape(*negative.shape, *[1] * (x.dim() - 1)),
                               torch.zeros_like(var_grad), var_grad)
        outs.append((mean.detach(), var.detach().clamp_min(0), mean_grad, var_grad))
    return tuple(torch.cat(parts) for parts in zip(*outs))


def posterior_dtype(subset):
    """The dtype of the Laplace weights (float64)."""
    return subset.theta.dtype


def _grad(value, x):
    """∂value_i/∂x_i of each row (the rows are independent: the gradient of the sum)."""
    (g,) = torch.autograd.grad(value.sum(), x, retain_graph=True, allow_unused=True)
    return torch.zeros_like(x) if g is None else g.detach()
