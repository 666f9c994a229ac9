"""The estimators' thread policy: each call's work, and the threads it runs with.

:func:`thread_policy` decorates ``fit``, ``partial_fit`` and the prediction methods:
it estimates a call's work per operation (rows per batch × weights) from the estimator
and its input, and runs the call under :func:`sklaplace._laplace.threads.torch_threads`,
which chooses and restores the threads (the process-wide resources, and why, are
described there).
"""

import functools
import inspect

import torch

from .._laplace import policy
from .._laplace.threads import torch_threads


def _n_weights(estimator, X):
    """Weights of the estimator's net: fitted, a given module, or the default MLP; or None."""
    module = getattr(getattr(estimator, "net_", None), "module_", None)
    net = getattr(estimator, "net", None)
    if module is None and net is not None:
        inner = getattr(net, "estimator", net)  # a FrozenEstimator's net
        module = getattr(inner, "module_", None)
        if module is None:
            module = getattr(getattr(inner, "net_", None), "module_", None)
        if module is None and isinstance(getattr(inner, "module", None), torch.nn.Module):
            module = inner.module
    if module is not None:
        return sum(p.numel() for p in module.parameters())
    if net is None and X is not None and getattr(X, "ndim", 0) == 2:
        total, d_in = 0, X.shape[1]
        sizes = estimator.hidden_layer_sizes  # "auto" / candidates: a typical size
        sizes = (50,) if isinstance(sizes, str) or any(
            isinstance(h, (tuple, list)) for h in sizes) else sizes
        for h in (*sizes, 1):
            total += (d_in + 1) * h
            d_in = h
        return total
    return None


def _work(estimator, X, fitting):
    """Multiply-adds of one forward operation of the call (None: unknown)."""
    try:
        if X is None:  # log_evidence: the posterior's matrices
            n = int(getattr(estimator, "n_params_", 0))
            return n * n or None
        X = X if hasattr(X, "shape") else None
        weights = _n_weights(estimator, X)
        if weights is None or X is None:
            return None
        rows = X.shape[0]
        if fitting:
            rows = min(rows, policy.batch_rows(getattr(estimator, "batch_size", rows) or rows,
                                               rows))
        return rows * weights
    except Exception:  # an estimate only: never the reason a call fails
        return None


def thread_policy(method):
    """Decorate ``fit``/``partial_fit``/prediction methods with :func:`torch_threads`."""
    fitting = method.__name__ in ("fit", "partial_fit")
    takes_X = list(inspect.signature(method).parameters)[1:2] == ["X"]

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        X = (args[0] if args else kwargs.get("X")) if takes_X else None
        with torch_threads(_work(self, X, fitting)):
            return method(self, *args, **kwargs)

    return wrapper
