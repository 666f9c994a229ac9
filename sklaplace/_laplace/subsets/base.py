"""What every weight subset shares: the trainable tensors of the module and their
offsets in the flattened whole-net vector θ (where a subset's weights sit, for the
prior), the lock that serializes calls of the module at other weights, rows moved to
the module, and the bytes a posterior's contraction adds to a prediction chunk.
"""

import threading

import numpy as np

# torch.func.functional_call swaps tensors into the module's attributes for the
# duration of a call, so two threads evaluating one module at other weights would
# see each other's tensors (and leave torch.func wrappers behind). Every such call
# holds this lock: predictions stay read-only on the fitted estimator.
_FUNCTIONAL_CALL_LOCK = threading.RLock()


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
