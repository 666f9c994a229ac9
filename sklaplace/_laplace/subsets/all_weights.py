"""The all-weights subset: every trainable parameter of the module.

θ is the concatenation of the trainable tensors in the net's order; the net at other
weights is a ``torch.func.functional_call``.  Jacobians and the predictive moments go
per layer (:mod:`.layerwise`) where every weight sits in an nn.Linear used once,
else by torch.func (vmap of jacrev) for any architecture.
"""

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from .base import (_FUNCTIONAL_CALL_LOCK, _jacobian_moments, named_params, param_offsets,
                   posterior_row_bytes, shared_parameters)
from .layerwise import _layer_jacobians, _layer_moments, _output_gradients


def _as_2d(f, n):
    return f.reshape(n, -1)


class AllWeights:
    """All trainable parameters of the module."""

    kind = "all"

    def __init__(self, module):
        self.module = module
        self.names = [k for k, _ in named_params(module)]
        self.shapes = [tuple(p.shape) for _, p in named_params(module)]
        self.theta = torch.cat([p.detach().reshape(-1) for _, p in named_params(module)])
        self.n_params = self.theta.numel()
        offsets = param_offsets(module)
        self.whole_index = np.arange(self.n_params)
        self.group_index = np.repeat(np.arange(len(self.names)), np.diff(offsets))

    def row_bytes(self, n_out, moments=False, posterior=None):
        """Bytes per row of the largest prediction buffer: the Jacobians (n, C, P), or
        for the layer-wise moments the inputs and output gradients of the layers."""
        layers = self._layers() if moments and hasattr(posterior, "layer_variance") else None
        if layers:  # per layer: input, its square, the output gradients G and G Q (n, C, out)
            return 8 * sum(2 * layer.in_features + 3 * n_out * layer.out_features
                           for layer, *_ in layers) + posterior_row_bytes(n_out, posterior)
        if moments:  # J and J scaled by the prior, then the posterior's contraction
            return 16 * n_out * self.n_params + posterior_row_bytes(n_out, posterior)
        return 8 * n_out * self.n_params

    def factored_on(self, X):
        """Whether per-layer factors g ⊗ a describe the net on rows ``X``: every weight in
        an nn.Linear that runs once, on one input row per data row, its weight used
        nowhere else (what Kronecker factors need)."""
        layers = self._layers()
        return bool(layers) and _output_gradients(self.module, layers, X) is not None

    def _layers(self):
        """``linear_layers()``, or None when some parameter lies outside nn.Linear (cached)."""
        if "_linear_cache" not in self.__dict__:
            try:
                self._linear_cache = self.linear_layers()
            except ValueError:
                self._linear_cache = None
        return self._linear_cache

    def _unflatten(self, theta):
        params, start = {}, 0
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            params[name] = theta[start : start + size].reshape(shape)
            start += size
        return params

    def forward(self, X, theta=None):
        if theta is None:
            return _as_2d(self.module(X), X.shape[0])
        with _FUNCTIONAL_CALL_LOCK:
            f = functional_call(self.module, self._unflatten(theta), (X,))
        return _as_2d(f, X.shape[0])

    def jacobians(self, X):
        layers = self._layers()
        if layers:
            out = _layer_jacobians(self.module, layers, X, self.n_params)
            if out is not None:
                return out
        return self._functional_jacobians(X)

    def _functional_jacobians(self, X):
        """(f, J) by torch.func (vmap of jacrev): any architecture."""
        params = self._unflatten(self.theta)

        def single(p, x):
            return functional_call(self.module, p, (x.unsqueeze(0),)).reshape(-1)

        with _FUNCTIONAL_CALL_LOCK:
            jac = vmap(jacrev(single), in_dims=(None, 0))(params, X)
        n = X.shape[0]
        J = torch.cat([jac[k].reshape(n, jac[k].shape[1], -1) for k in self.names], dim=2)
        return self.forward(X), J

    def jacobian_factors(self, X):
        """(f, [(weight slice, bias slice or None, a, G) per nn.Linear layer]) with the
        Jacobian of output c in a layer g_c ⊗ a (see :func:`_output_gradients`), or None
        when some weight lies outside nn.Linear or a layer is not run once per row."""
        layers = self._layers()
        out = _output_gradients(self.module, layers, X) if layers else None
        if out is None:
            return None
        f, inputs, G = out
        return f, [(w, b, a, g) for (_, w, b), a, g in zip(layers, inputs, G)]

    def moments(self, X, posterior):
        """MAP outputs and J Σ Jᵀ: layer-wise for Kronecker and diagonal posteriors of
        nets whose weights all sit in nn.Linear layers, else from the Jacobians."""
        layers = self._layers() if hasattr(posterior, "layer_variance") else None
        if layers:
            out = _layer_moments(self.module, layers, X, posterior)
            if out is not None:
                return out
        return _jacobian_moments(self, X, posterior)

    def linear_layers(self):
        """(module name, weight slice, bias slice or None) for every nn.Linear.

        Raises if some parameter lies outside nn.Linear layers (Kronecker
        factors are defined for those only).
        """
        shared = shared_parameters(self.module)
        if shared:
            raise ValueError(
                f"parameters {shared} are held by more than one module (tied weights); "
                "the per-layer Kronecker factors cover one use of a weight only.")
        index = {k: i for i, k in enumerate(self.names)}
        offsets = np.concatenate([[0], np.cumsum([np.prod(s) for s in self.shapes])]).astype(int)
        layers, covered = [], set()
        for name, sub in self.module.named_modules():
            if not isinstance(sub, nn.Linear):
                continue
            prefix = f"{name}." if name else ""
            w, b = index.get(prefix + "weight"), index.get(prefix + "bias")
            if w is None:
                continue
            layers.append(
                (
                    sub,
                    slice(offsets[w], offsets[w + 1]),
                    None if b is None else slice(offsets[b], offsets[b + 1]),
                )
            )
            covered.update(i for i in (w, b) if i is not None)
        missing = [self.names[i] for i in range(len(self.names)) if i not in covered]
        if missing:
            raise ValueError(
                "hessian_structure='kron' computes its own Kronecker factors for "
                f"nn.Linear layers with a trainable weight only; parameters {missing} are "
                "not in one (outside nn.Linear, or the bias of a layer whose weight is frozen)."
            )
        return layers
