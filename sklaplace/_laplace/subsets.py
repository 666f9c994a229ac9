"""Which weights the Laplace approximation covers: all, last layer, subnetwork.

A subset is a *linearization target*: it knows its MAP parameter vector θ* of
length P, evaluates the network with other values of those parameters, and
returns per-row Jacobians ∂f/∂θ of shape (n, C, P).  Every subset also records
where its parameters sit in the whole network (``whole_index``) and to which
parameter tensor they belong (``group_index``), so that a prior precision
given for the whole net (scalar, per tensor or per parameter) maps onto it.

Subsets keep tensors and (parts of) the module, never hooks, so fitted estimators pickle.
"""

import contextlib
import threading

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, jacrev, vmap

from .nets import MLP

# torch.func.functional_call swaps tensors into the module's attributes for the
# duration of a call, so two threads evaluating one module at other weights would
# see each other's tensors (and leave torch.func wrappers behind). Every such call
# holds this lock: predictions stay read-only on the fitted estimator.
_FUNCTIONAL_CALL_LOCK = threading.RLock()

# Rows per float64 block of the last-layer predictive (≈1 MB of features at width 64).
FEATURE_BLOCK_ROWS = 2048


def named_params(module):
    """The trainable parameters of ``module`` as an ordered list of (name, tensor)."""
    return [(k, p) for k, p in module.named_parameters() if p.requires_grad]


def tensor_sizes(module):
    """Number of values of each trainable parameter tensor, in the net's order."""
    return [p.numel() for _, p in named_params(module)]


def param_offsets(module):
    """Start offset of each trainable tensor in the flattened whole-net vector."""
    return np.concatenate([[0], np.cumsum(tensor_sizes(module))]).astype(int)


def shared_parameters(module):
    """Names of the trainable tensors that more than one submodule holds (tied weights, or
    one module registered under two names)."""
    holders = {}
    for _, sub in module.named_modules(remove_duplicate=False):
        for p in sub._parameters.values():
            if p is not None and p.requires_grad:
                holders[id(p)] = holders.get(id(p), 0) + 1
    return [k for k, p in named_params(module) if holders.get(id(p), 0) > 1]


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


def _as_2d(f, n):
    return f.reshape(n, -1)


def _to_module(X, module):
    """X on the module's device and in its parameter dtype."""
    for p in module.parameters():
        return X.to(device=p.device, dtype=p.dtype)
    return X


def posterior_row_bytes(n_out, posterior):
    """Bytes per row that contracting with ``posterior`` adds to a prediction chunk: the
    (n, C, C) result and its temporaries, and for an eigendecomposed posterior of rank r
    the (n, C, r) projections onto its directions (three: J M, with the bias, scaled)."""
    return 8 * n_out * (3 * n_out + 3 * getattr(posterior, "rank", 0))


def _jacobian_moments(subset, X, posterior):
    f, J = subset.jacobians(X)
    return f, posterior.functional_variance(J)


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


class Subnetwork:
    """A chosen set of individual weights; the others stay at the MAP."""

    kind = "subnetwork"

    def __init__(self, module, indices):
        self._all = AllWeights(module)
        self.module = module
        self.indices = torch.as_tensor(np.sort(np.asarray(indices)), dtype=torch.long)
        self.theta = self._all.theta[self.indices]
        self.n_params = self.theta.numel()
        self.whole_index = self.indices.numpy()
        self.group_index = self._all.group_index[self.whole_index]

    def row_bytes(self, n_out, moments=False, posterior=None):
        """Bytes per row of the largest prediction buffer: the all-weights Jacobians, and
        for the moments the subnetwork's and the posterior's contraction."""
        if moments:
            return (self._all.row_bytes(n_out) + 8 * n_out * self.n_params
                    + posterior_row_bytes(n_out, posterior))
        return self._all.row_bytes(n_out)

    @staticmethod
    def indices_from_names(module, names):
        all_names = [k for k, _ in named_params(module)]
        unknown = [k for k in names if k not in all_names]
        if unknown:
            raise ValueError(
                f"subnetwork names {unknown} are not parameters of the module; "
                f"known names: {all_names}."
            )
        offsets = param_offsets(module)
        return np.concatenate(
            [np.arange(offsets[all_names.index(k)], offsets[all_names.index(k) + 1]) for k in names]
        )

    def _full(self, theta):
        """All weights: the MAP with the subnetwork's entries replaced by ``theta``."""
        full = self._all.theta.clone()
        full[self.indices] = theta
        return full

    def forward(self, X, theta=None):
        if theta is None:
            return self._all.forward(X)
        return self._all.forward(X, self._full(theta))

    def jacobians(self, X):
        f, J = self._all.jacobians(X)
        return f, J[:, :, self.indices]

    moments = _jacobian_moments
