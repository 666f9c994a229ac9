"""The last-layer subset: the weights and bias of the last executed nn.Linear, f = W φ(x) + b.

The penultimate features φ come from one forward pass of the trained net (the
Sequential before the layer where the architecture makes it plain, else a hook on
the layer); everything else is closed form in φ: Jacobians I ⊗ φᵀ, the predictive
variance per block of rows.  Fit checks that the output is the layer's one call and
that φ does not depend on W and b (a weight read outside the layer).
"""

import numpy as np
import torch
from torch import nn

from ..nets import MLP
from .base import (_FUNCTIONAL_CALL_LOCK, _to_module, named_params, param_offsets,
                   posterior_row_bytes, shared_parameters)

# Rows per float64 block of the last-layer predictive (≈1 MB of features at width 64).
FEATURE_BLOCK_ROWS = 2048


def find_last_linear(module, X):
    """Run ``module`` on ``X`` and return the name of the last executed ``nn.Linear``.

    Also returns that layer's input (the penultimate features) and the output.
    The temporary forward hooks are removed before returning.
    """
    seen = []
    handles = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            handles.append(
                sub.register_forward_hook(  # a copy: an in-place op may follow the layer
                    lambda m, inp, out, name=name: seen.append((name, inp[0], out.detach().clone()))
                )
            )
    try:
        out = module(X)
    finally:
        for h in handles:
            h.remove()
    if not seen:
        raise ValueError(
            "subset_of_weights='last_layer' needs a module with an nn.Linear layer; "
            "found none. Use subset_of_weights='all'."
        )
    name, features, last_out = seen[-1]
    _check_output_of(name, [n for n, *_ in seen].count(name), last_out, out)
    return name, features


def _check_output_of(name, calls, layer_out, out):
    """Raise unless the network output is the output of the one call of layer ``name``:
    f = W φ(x) + b with φ free of W and b, which the last-layer LA assumes."""
    if calls != 1:
        raise ValueError(
            f"The last nn.Linear layer {name!r} runs {calls} times in one forward pass, so "
            "its input depends on its own weights; subset_of_weights='last_layer' needs "
            "f = W φ(x) + b. Use subset_of_weights='all' or 'subnetwork'.")
    if layer_out.numel() != out.numel() or not torch.equal(layer_out.reshape(out.shape), out):
        raise ValueError(
            f"The network output does not come directly from its last nn.Linear "
            f"layer {name!r}; subset_of_weights='last_layer' needs it to. "
            "Use subset_of_weights='all' or 'subnetwork'."
        )


def check_last_layer(module, layer_name, X, rows=FEATURE_BLOCK_ROWS):
    """:func:`_check_output_of` on every row of ``X`` (in blocks): an output that passes
    through anything after the last layer (a ReLU, a clamp) may equal it on a few rows
    and not on others."""
    layer = module.get_submodule(layer_name)
    seen = []
    handle = layer.register_forward_hook(lambda m, inp, out: seen.append(out.detach().clone()))
    try:
        with torch.no_grad():
            for start in range(0, len(X), rows):
                seen.clear()
                out = module(X[start:start + rows])
                _check_output_of(layer_name, len(seen), seen[-1] if seen else out.new_empty(0),
                                 out)
    finally:
        handle.remove()


def check_head_gradient(module, layer, X):
    """Raise unless autograd's gradient of the output with respect to the last layer's
    weight and bias is the one of f = W φ + b with φ free of them (R ⊗ φ and R for row
    weights R): a weight also read elsewhere (``F.linear(x, head.weight.T)`` in the body)
    has more to its gradient, and the last-layer LA would silently miss it."""
    inputs = []
    params = [p for p in (layer.weight, layer.bias) if p is not None and p.requires_grad]
    handle = layer.register_forward_hook(lambda m, inp, out: inputs.append(inp[0].detach()))
    try:
        with _FUNCTIONAL_CALL_LOCK, torch.enable_grad():
            out = module(X).reshape(-1, layer.out_features)
            R = torch.rand(out.shape, generator=torch.Generator().manual_seed(0),
                           dtype=torch.float64).to(out) + 0.5
            grads = torch.autograd.grad((out * R).sum(), params, allow_unused=True,
                                        materialize_grads=True)
    finally:
        handle.remove()
    phi = inputs[-1].reshape(-1, layer.in_features)
    expected = [(R.T @ phi, R.abs().T @ phi.abs()), (R.sum(0), R.abs().sum(0))]
    for actual, (value, scale) in zip(grads, expected):
        tol = 1e3 * torch.finfo(value.dtype).eps * float(scale.max()) + 1e-30
        if float((actual - value).abs().max()) > tol:
            raise ValueError(
                "subset_of_weights='last_layer': the weights of the last nn.Linear layer are "
                "also read outside it (for instance F.linear(x, layer.weight.T) in the body), "
                "so the features depend on them; the last-layer LA needs f = W φ(x) + b with "
                "φ free of W and b. Use subset_of_weights='all' or 'subnetwork'.")


def _layer_input(module, layer_name, X):
    """Input of the submodule ``layer_name`` when ``module`` runs on ``X``.

    One temporary hook on that layer only (removed in ``finally``): the last
    layer was found and checked by :func:`find_last_linear` at fit time, so
    prediction skips the hooks on every ``nn.Linear`` and the output check. Under
    the lock: a hook sees the forward passes of every thread.
    """
    seen = []
    with _FUNCTIONAL_CALL_LOCK:
        handle = module.get_submodule(layer_name).register_forward_hook(
            lambda m, inp, out: seen.append(inp[0]))
        try:
            module(X)
        finally:
            handle.remove()
    return seen[-1]


def feature_body(module, layer_name):
    """The layers before ``layer_name`` as one module, where the architecture makes it plain.

    When the last layer ends an ``nn.Sequential`` that *is* the network (the module
    itself, or the ``layers`` of sklaplace's :class:`~sklaplace._laplace.nets.MLP`), the
    penultimate features are ``body(X)`` for the Sequential without its last layer:
    no hook, no last-layer product. Otherwise returns None and the features are read
    with a hook on the layer.
    """
    parent_name, _, last = layer_name.rpartition(".")
    parent = module.get_submodule(parent_name)
    if type(parent) is not nn.Sequential or last != next(reversed(parent._modules)):
        return None
    if parent is module or (type(module) is MLP and parent is module.layers):
        return parent[:-1]
    return None


class LastLayer:
    """Weights and bias of the last executed ``nn.Linear``: f = W φ(x) + b.

    ``module`` is the trained network in its own dtype: the features φ come
    from one forward pass of it and are cast to float64; everything else is
    closed form in φ (Jacobians I ⊗ φᵀ, Kronecker factors, predictive variance).
    """

    kind = "last_layer"
    const_bias = None

    def __init__(self, module, X):
        self.module = module
        X = _to_module(X, module)
        self.layer_name, _ = find_last_linear(module, X[:2])
        check_last_layer(module, self.layer_name, X)
        self.body = feature_body(module, self.layer_name)
        layer = self.layer = module.get_submodule(self.layer_name)
        prefix = f"{self.layer_name}." if self.layer_name else ""
        all_names = [k for k, _ in named_params(module)]
        own_bias = (layer.bias is None or not layer.bias.requires_grad
                    or prefix + "bias" in all_names)
        if prefix + "weight" not in all_names or not own_bias or shared_parameters(module) and any(
                k.startswith(prefix) for k in shared_parameters(module)):
            raise ValueError(
                f"subset_of_weights='last_layer': the weight of the last layer "
                f"{self.layer_name!r} is not a trainable parameter of its own: frozen "
                "(requires_grad=False), tied to another module, or computed (a "
                "parametrization such as weight_norm). Use subset_of_weights='all' or "
                "'subnetwork'.")
        check_head_gradient(module, layer, X[:256])
        self.has_bias = layer.bias is not None and layer.bias.requires_grad
        # a frozen bias is a constant of the output, not a weight of the LA
        self.const_bias = (None if layer.bias is None or self.has_bias else
                           layer.bias.detach().to(layer.weight.device, torch.float64))
        self.names = [prefix + "weight"] + ([prefix + "bias"] if self.has_bias else [])
        self.n_out, self.n_features = layer.weight.shape
        params = [layer.weight] + ([layer.bias] if self.has_bias else [])
        self.shapes = [tuple(p.shape) for p in params]
        # float64 on the layer's device: the LA runs where the net is
        self.theta = torch.cat([p.detach().reshape(-1) for p in params]).to(layer.weight.device,
                                                                            torch.float64)
        self.n_params = self.theta.numel()
        self.map_weight, self.map_bias = self._split(self.theta)
        offsets = param_offsets(module)
        groups = [all_names.index(k) for k in self.names]
        self.whole_index = np.concatenate([np.arange(offsets[g], offsets[g + 1]) for g in groups])
        self.group_index = np.concatenate(
            [np.full(offsets[g + 1] - offsets[g], g) for g in groups]
        )

    def native_features(self, X):
        """Penultimate features φ(X) as the module computes them (its device and dtype).

        A net put back in train mode by the user since fit is read in eval mode (dropout,
        batch norm) and restored after. Mode and forward pass are read under one lock:
        a thread that saw another's eval window unlocked would run on as that one restores
        train mode (batch statistics, running means overwritten)."""
        with _FUNCTIONAL_CALL_LOCK:
            training = self.module.training
            if training:
                self.module.eval()
            try:
                return self._eval_features(X)
            finally:
                if training:
                    self.module.train()

    def _eval_features(self, X):
        with torch.no_grad():
            X = X.to(device=self.layer.weight.device, dtype=self.layer.weight.dtype)
            if self.body is not None:
                return self.body(X)
            return _layer_input(self.module, self.layer_name, X)

    def features(self, X):
        """Penultimate features φ(X), the input of the last layer, like X (float64)."""
        return self.native_features(X).to(device=X.device, dtype=X.dtype)

    def row_bytes(self, n_out, moments=False, posterior=None):
        """Bytes per row of the largest prediction buffer: features and the posterior's
        contraction for the moments, else J."""
        if moments:
            return 8 * (self.n_features + n_out) + posterior_row_bytes(n_out, posterior)
        return 8 * n_out * self.n_params

    def _split(self, theta):
        W = theta[..., : self.n_out * self.n_features].reshape(
            *theta.shape[:-1], self.n_out, self.n_features
        )
        b = theta[..., self.n_out * self.n_features :] if self.has_bias else self.const_bias
        return W, b

    def forward(self, X, theta=None, features=None):
        phi = self.features(X) if features is None else features
        W, b = (self.map_weight, self.map_bias) if theta is None else self._split(theta)
        f = phi @ W.transpose(-1, -2)
        return f if b is None else f + b

    def jacobians(self, X, features=None):
        phi = self.features(X) if features is None else features
        n, C = phi.shape[0], self.n_out
        eye = torch.eye(C, dtype=phi.dtype, device=phi.device)
        # ∂f_c/∂W[o, i] = δ_co φ_i  (row-major W), ∂f_c/∂b_o = δ_co.
        J = (eye[None, :, :, None] * phi[:, None, None, :]).reshape(n, C, -1)
        if self.has_bias:
            J = torch.cat([J, eye.expand(n, C, C)], dim=2)
        return self.forward(X, features=phi), J

    def moments(self, X, posterior):
        """MAP outputs and J Σ Jᵀ straight from the features.

        The features come in the module's dtype; the float64 maths runs on blocks of
        rows, so its buffers stay small and cache-resident however many rows come.
        """
        phi = self.native_features(X)
        W, b = self.map_weight, self.map_bias
        parts = []
        for start in range(0, len(phi), FEATURE_BLOCK_ROWS):
            native = phi[start:start + FEATURE_BLOCK_ROWS]
            block = native.to(device=X.device, dtype=X.dtype)
            f = block @ W.T if b is None else torch.addmm(b, block, W.T)
            # A copy may be overwritten; the features themselves may be X (no hidden layer).
            copied = block.data_ptr() != native.data_ptr()
            var = posterior.last_layer_variance(block, self.n_out, self.has_bias, scratch=copied)
            parts.append((f, var))
        if len(parts) == 1:
            return parts[0]
        return torch.cat([f for f, _ in parts]), torch.cat([var for _, var in parts])
