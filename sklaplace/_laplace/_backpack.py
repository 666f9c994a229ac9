"""GGN curvature through BackPACK, for networks our nn.Linear code does not cover.

BackPACK backpropagates a square root of the loss Hessian through the modules it
knows (convolutions, pooling, padding, activations, flatten, linear, ...):

- ``KFLR`` gives Kronecker factors of the exact GGN (its ``KFAC`` samples the
  loss Hessian, Monte-Carlo, so it is not used).  Per layer the weight block is
  G ⊗ A with G = Σ_n B_n B_nᵀ summed over spatial positions (the exact GGN of the
  bias) and A = Σ_n Σ_t u_nt u_ntᵀ / N over the unfolded inputs — our
  ``kron_curvature`` convention, to which it reduces for nn.Linear layers;
- ``DiagGGNExact`` gives the exact diagonal of the GGN.

Both need the output Hessian in the form of a torch loss with summed reduction
(``_loss``); the targets do not enter the GGN of these losses.  The module is a
converted copy (``extend(..., use_converter=True)``, via torch.fx), so the
subset's module is never touched; every function returns None when BackPACK
cannot handle the module, and the caller falls back.

Row weights (``weight``): BackPACK's losses have no per-row weights, so the rows
are grouped by their weight value and each group's sum is multiplied by it
(zero-weight rows skipped) — exact, one pass per distinct weight.
"""

import contextlib
import copy
import warnings

import torch
from backpack import backpack, extend
from backpack.extensions import KFLR, DiagGGNExact
from torch import nn
from torch.fx.proxy import TraceError

from .subsets import shared_parameters


# Layers whose KFLR weight factors are [G (out × out), A]: the row-major weight
# (out, in, k...) read as (out, in·k...).  ConvTranspose stores (in, out, k...).
_KRON_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
# Raised by BackPACK for modules or set-ups it does not support (AssertionError:
# a backpropagated quantity is missing, e.g. after a functional op it cannot see).
#: What BackPACK raises for a module or a forward pattern it does not cover (an
#: in-place op on its hooks' views is a RuntimeError): the caller then uses the Jacobians.
_UNSUPPORTED = (NotImplementedError, AssertionError, TraceError, RuntimeError)


def _loss(likelihood, out_scale):
    """(loss module, target maker, c) with c · GGN(loss) our GGN, or None.

    Our GGN uses Λ_n = S_n S_nᵀ from ``likelihood.sqrt_hessian`` with rows scaled
    by ``out_scale``: softmax and Bernoulli Λ match cross-entropy and BCE with
    logits; for the Gaussian Λ = diag(out_scale²), while MSELoss(sum) has
    Hessian 2I, so c = out_scale²/2 when all entries are equal
    (``likelihood.loss_module``).
    """
    return likelihood.loss_module(out_scale)


def _prepare(subset, likelihood, out_scale):
    """(extended copy, its parameters in ``subset.names`` order, loss, target maker, c) or None.

    The converter keeps qualified names but may reorder parameters, so they are
    matched by name and checked by shape; None when the likelihood has no
    matching loss, conversion fails or the parameters do not correspond.
    """
    spec = _loss(likelihood, out_scale)
    if spec is None:
        return None
    try:
        with warnings.catch_warnings():
            # The converter warns about every functional node; one BackPACK cannot
            # backpropagate through surfaces as an error in the backward pass.
            warnings.filterwarnings("ignore", "Encountered node that may break", UserWarning)
            module = extend(copy.deepcopy(subset.module), use_converter=True)
    except Exception:  # noqa: BLE001 - torch.fx / BackPACK's converter fail in many ways;
        return None  # the caller falls back to the Jacobians, which cover any net
    params = {k: p for k, p in module.named_parameters() if p.requires_grad}
    if shared_parameters(module) or sorted(params) != sorted(subset.names):
        return None
    ordered = [params[k] for k in subset.names]
    if [tuple(p.shape) for p in ordered] != [tuple(s) for s in subset.shapes]:
        return None
    loss_fn, target, c = spec
    return module, ordered, extend(loss_fn), target, c


def _output_positions(module, owners, x):
    """Per layer of ``owners``: the positions its weight is applied at for one data row
    (the spatial size of a convolution's output, 1 for a Linear on rows)."""
    found = {}

    def record(layer, inputs, out):
        channels = out.shape[1] if isinstance(layer, nn.modules.conv._ConvNd) else out.shape[-1]
        found[id(layer)] = out[0].numel() // channels

    handles = [layer.register_forward_hook(record) for layer in {id(m): m for m in owners}.values()]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for handle in handles:
            handle.remove()
    return [found.get(id(m), 1) for m in owners]


def _chunk_results(prepared, X, extension, chunk):
    """Yield (BackPACK's result per parameter, rows) after each chunk's backward pass.

    Stops early when BackPACK cannot handle the module; callers compare the
    rows seen with N.
    """
    module, params, loss_fn, target, _ = prepared
    for start in range(0, X.shape[0], chunk):
        x = X[start : start + chunk]
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
            try:
                with _call_counts(module) as calls:
                    f = module(x)
                # a reshape after the last module would cut BackPACK's chain; a module run
                # twice, or a weight also read outside its module, keeps one use only
                if f.dim() != 2 or any(c > 1 for c in calls) or not _used_once(f, params):
                    return
                with backpack(extension):
                    loss_fn(f, target(f)).backward()
            except torch.OutOfMemoryError:
                raise
            except _UNSUPPORTED:
                return
        values = [getattr(p, extension.savefield, None) for p in params]
        if any(v is None for v in values):  # a parameter used outside a known module
            return
        yield values, x.shape[0]
        for p in params:
            p.grad = None
            delattr(p, extension.savefield)


def _used_once(output, params):
    """Whether each of ``params`` feeds exactly one operation of ``output``'s autograd
    graph (``F.linear(h, layer.weight.T)`` beside the layer's own call is a second)."""
    uses = {id(p): 0 for p in params}
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for child, _ in node.next_functions:
            if child is None:
                continue
            leaf = getattr(child, "variable", None)
            if leaf is not None and id(leaf) in uses:
                uses[id(leaf)] += 1
            stack.append(child)
    return all(count == 1 for count in uses.values())


@contextlib.contextmanager
def _call_counts(module):
    """While active, the number of calls of every submodule that holds parameters."""
    holders = [m for m in module.modules() if any(True for _ in m.parameters(recurse=False))]
    calls = [0] * len(holders)

    def count(i):
        calls[i] += 1

    handles = [m.register_forward_hook(lambda *args, i=i: count(i))
               for i, m in enumerate(holders)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _weight_groups(X, weight):
    """(rows of X, their common weight) per distinct non-zero weight; (X, None) unweighted."""
    if weight is None:
        return [(X, None)]
    values = torch.unique(weight)
    return [(X[weight == v], float(v)) for v in values if v != 0]


def backpack_diag(subset, likelihood, X, y, out_scale, chunk=4096, weight=None):
    """Exact diagonal GGN (P,) of all weights with BackPACK's DiagGGNExact, or None.

    ``y`` is unused: the GGN of these likelihoods does not depend on the targets.
    """
    prepared = _prepare(subset, likelihood, out_scale)
    if prepared is None:
        return None
    h = torch.zeros(subset.n_params, dtype=X.dtype, device=X.device)
    for Xg, w in _weight_groups(X, weight):
        part = torch.zeros_like(h)
        done = 0
        for values, rows in _chunk_results(prepared, Xg, DiagGGNExact(), chunk):
            part += torch.cat([v.detach().reshape(-1) for v in values])
            done += rows
        if not done == Xg.shape[0] > 0:
            return None
        h += part if w is None else w * part
    return prepared[-1] * h


def backpack_kron(subset, likelihood, X, y, out_scale, chunk=4096, weight=None):
    """KFLR Kronecker blocks (slice, [G, A]) per weight and (slice, [G]) per bias, or None.

    The blocks are those :class:`~sklaplace._laplace.posterior.KronPosterior` takes, for
    parameters of nn.Linear and nn.ConvNd layers only.  G is a sum over rows;
    BackPACK's A is a mean over each chunk's rows, so it is summed with weight
    ``rows`` and divided by N at the end (weighted: G and A of each weight group
    times its weight, A divided by Σ w).  ``y`` is unused.

    Convolutions: BackPACK's G sums the backpropagated factors over the T output
    positions before the outer product (the bias block, exact) while its A sums
    u uᵀ over the positions: their product is T times the KFC approximation
    (Grosse & Martens 2016; BackPACK's docstring says so), so A is divided by T.
    Then G ⊗ A is exact when the positions are identical (T² b bᵀ ⊗ u uᵀ) and when
    they are uncorrelated.  A Linear layer applied at several positions per row
    is declined (None).
    """
    prepared = _prepare(subset, likelihood, out_scale)
    if prepared is None:
        return None
    module, c = prepared[0], prepared[-1]
    kinds = [k.rpartition(".")[2] for k in subset.names]
    owners = [module.get_submodule(k.rpartition(".")[0]) for k in subset.names]
    if any(not isinstance(m, _KRON_LAYERS) or kind not in ("weight", "bias")
           for m, kind in zip(owners, kinds)):
        return None
    positions = _output_positions(module, owners, X[:1])
    if any(T != 1 for m, T in zip(owners, positions) if isinstance(m, nn.Linear)):
        return None
    factors = None
    for Xg, w in _weight_groups(X, weight):
        done = 0
        for values, rows in _chunk_results(prepared, Xg, KFLR(), chunk):
            new = [[v[0].detach(), rows * v[1].detach()] if kind == "weight" else [v[0].detach()]
                   for kind, v in zip(kinds, values)]
            if w is not None:
                new = [[w * M for M in fs] for fs in new]
            factors = new if factors is None else [
                [a + b for a, b in zip(old, add)] for old, add in zip(factors, new)]
            done += rows
        if done != Xg.shape[0]:
            return None
    if factors is None:
        return None
    n_total = X.shape[0] if weight is None else float(weight.sum())
    blocks, start = [], 0
    for kind, fs, shape, T in zip(kinds, factors, subset.shapes, positions):
        size = int(torch.Size(shape).numel())
        fs = [c * fs[0], fs[1] / (n_total * T)] if kind == "weight" else [c * fs[0]]
        if [M.shape[0] for M in fs] != [shape[0]] + ([size // shape[0]] if kind == "weight" else []):
            return None
        blocks.append((slice(start, start + size), fs))
        start += size
    return blocks
