"""Jacobians and predictive moments of nets whose weights all sit in nn.Linear layers,
from per-layer factors.

For a layer with input a and pre-activation s = W a + b, the Jacobian of output c
with respect to its weights is g_c ⊗ a (and g_c for the bias), g_c = ∂f_c/∂s: one
forward and C + 1 backward passes give every layer's a and G = (g_1 … g_C), and a
Kronecker or diagonal posterior contracts them per layer without the (n, C, P)
Jacobians.  The factors are exact only where every layer runs once, on one input row
per data row, its weight used nowhere else; autograd's gradient of a mixed output
checks that (:func:`factors_account_for`).  The same checks serve the curvature's
own KFLR pass.
"""

import contextlib

import torch

from .base import _FUNCTIONAL_CALL_LOCK


@contextlib.contextmanager
def preactivation_hooks(layers):
    """While active, record for every layer of ``layers`` ((module, ...) tuples) its
    input, a zero tensor added to its output s (whose gradient is ∂·/∂s) and its
    number of calls: ``(inputs, eps, calls)``, filled by each forward pass."""
    inputs, eps, calls = {}, {}, [0] * len(layers)

    def hook(module, inp, out, i):
        calls[i] += 1
        inputs[i] = inp[0].detach()
        eps[i] = torch.zeros_like(out, requires_grad=True)
        return out + eps[i]

    handles = [layer.register_forward_hook(lambda m, inp, out, i=i: hook(m, inp, out, i))
               for i, (layer, *_) in enumerate(layers)]
    try:
        yield inputs, eps, calls
    finally:
        for handle in handles:
            handle.remove()


def single_pass(inputs, calls, n_rows):
    """Whether every layer ran once, on one input row per data row (of ``n_rows``)."""
    return all(c == 1 for c in calls) and all(
        inputs[i].dim() == 2 and inputs[i].shape[0] == n_rows for i in range(len(calls)))


def layer_parameters(layers):
    """The trainable tensors of ``layers`` ((module, weight slice, bias slice or None) tuples),
    weight then bias per layer: what :func:`factors_account_for` compares."""
    return [p for layer, _, b in layers for p in (layer.weight, *((layer.bias,) if b else ()))]


def mixing_weights(k, like):
    """k fixed generic weights in [0.5, 1.5): one backward pass of the mix Σ_k r_k·(output
    k) checks the factors of all k outputs at once (no cancellation but by accident)."""
    r = torch.rand(k, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    return r.to(device=like.device, dtype=like.dtype)


def factors_account_for(layers, inputs, calls, layer_grads, param_grads):
    """Whether the per-layer factors of one backward pass carry the whole gradient.

    The Jacobian factors g ⊗ a (and g for the bias) describe a weight only through the
    one call of its nn.Linear that the hooks saw.  A weight used anywhere else — a
    layer run twice, a weight tied to another module, ``F.linear(h, layer.weight.T)``
    — has more to its gradient, and the factors would silently miss it.  Autograd's
    gradient of the same scalar with respect to the weights themselves
    (``param_grads``, in :func:`layer_parameters` order) sees every use, so the
    factors are exact only if Σ_rows g aᵀ (and Σ_rows g) equals it.  ``layer_grads``:
    g per layer (the gradient of that scalar with respect to its pre-activations).
    """
    if any(c != 1 for c in calls):
        return False
    grads = iter(param_grads)
    for (_, _, b), i in zip(layers, range(len(layers))):
        a, g = inputs[i], layer_grads[i]
        a, g = a.reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
        checks = [(next(grads), g.T @ a, g.abs().T @ a.abs())]
        if b is not None:
            checks.append((next(grads), g.sum(0), g.abs().sum(0)))
        for actual, factored, scale in checks:
            tol = 1e3 * torch.finfo(factored.dtype).eps * float(scale.max()) + 1e-300
            if float((actual - factored).abs().max()) > tol:
                return False
    return True


def _output_gradients(module, layers, X):
    """(f (n, C), layer inputs a_i (n, in), G_i = ∂f/∂s_i (n, C, out)) of nn.Linear
    ``layers`` with pre-activations s_i, by one forward and C + 1 backward passes; None
    when a layer runs more than once, sees other than one row per data row, or a weight
    is used outside its layer (:func:`factors_account_for`)."""
    n = X.shape[0]
    params = layer_parameters(layers)
    with _FUNCTIONAL_CALL_LOCK, preactivation_hooks(layers) as (inputs, eps, calls):
        with torch.enable_grad():
            f = module(X).reshape(n, -1)
            if not single_pass(inputs, calls, n):
                return None
            targets = [eps[i] for i in range(len(layers))]
            C = f.shape[1]
            grads = [torch.autograd.grad(f[:, c].sum(), targets, retain_graph=True,
                                         allow_unused=True, materialize_grads=True)
                     for c in range(C)]
            r = mixing_weights(C, f)
            whole = torch.autograd.grad((f @ r).sum(), params, allow_unused=True,
                                        materialize_grads=True)
    G = [torch.stack([g[i] for g in grads], 1) for i in range(len(layers))]
    mixed = [(g * r[:, None]).sum(1) for g in G]
    if not factors_account_for(layers, inputs, calls, mixed, whole):
        return None
    return f.detach(), [inputs[i] for i in range(len(layers))], G


def _layer_moments(module, layers, X, posterior):
    """MAP outputs and J Σ Jᵀ of a Kronecker or diagonal posterior over nn.Linear layers
    without the (n, C, P) Jacobians: the Jacobian of output c for a layer with input a
    and pre-activation s is g_c ⊗ a, g_c = ∂f_c/∂s, and the posterior contracts those
    per layer (``layer_variance``), O(n·P + n·C²·Σ out). None as :func:`_output_gradients`.
    """
    out = _output_gradients(module, layers, X)
    if out is None:
        return None
    f, inputs, G = out
    var = 0
    for (_, w, b), a, g in zip(layers, inputs, G):
        part = posterior.layer_variance(a, g, w, b)
        if part is None:
            return None
        var = var + part
    return f, var


def _layer_jacobians(module, layers, X, n_params):
    """(f, J (n, C, P)) of a net whose weights all sit in ``layers`` (nn.Linear, row-major
    W then b), from g_c ⊗ a per layer: no torch.func transforms, whose fixed cost
    dominates small calls. None as :func:`_output_gradients`."""
    out = _output_gradients(module, layers, X)
    if out is None:
        return None
    f, inputs, G = out
    n, C = f.shape
    J = torch.zeros(n, C, n_params, dtype=f.dtype, device=f.device)
    for (_, w, b), a, g in zip(layers, inputs, G):
        J[:, :, w] = (g[:, :, :, None] * a[:, None, None, :]).reshape(n, C, -1)
        if b is not None:
            J[:, :, b] = g
    return f, J
