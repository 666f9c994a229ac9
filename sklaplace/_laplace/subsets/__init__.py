"""Which weights the Laplace approximation covers: all, last layer, subnetwork.

A subset is a *linearization target*: it knows its MAP parameter vector θ* of
length P, evaluates the network with other values of those parameters, and
returns per-row Jacobians ∂f/∂θ of shape (n, C, P).  Every subset also records
where its parameters sit in the whole network (``whole_index``) and to which
parameter tensor they belong (``group_index``), so that a prior precision
given for the whole net (scalar, per tensor or per parameter) maps onto it.

Subsets keep tensors and (parts of) the module, never hooks, so fitted estimators pickle.

The package: :mod:`.base` (what every subset shares: the trainable tensors and their
offsets, the lock of functional calls, rows on the module, bytes of a prediction chunk),
:mod:`.layerwise` (Jacobians and predictive moments of nn.Linear nets from per-layer
factors g_c ⊗ a), and one module per subset: :mod:`.all_weights`, :mod:`.last_layer`,
:mod:`.subnetwork`.
"""

from .all_weights import AllWeights
from .base import (_to_module, named_params, param_offsets, posterior_row_bytes,
                   shared_parameters, tensor_sizes)
from .last_layer import (FEATURE_BLOCK_ROWS, LastLayer, check_head_gradient, check_last_layer,
                         feature_body, find_last_linear)
from .layerwise import (factors_account_for, layer_parameters, mixing_weights,
                        preactivation_hooks, single_pass)
from .subnetwork import Subnetwork

__all__ = [
    "AllWeights", "LastLayer", "Subnetwork", "_to_module", "named_params", "param_offsets",
    "posterior_row_bytes", "shared_parameters", "tensor_sizes", "FEATURE_BLOCK_ROWS",
    "check_head_gradient", "check_last_layer", "feature_body", "find_last_linear",
    "factors_account_for", "layer_parameters", "mixing_weights", "preactivation_hooks",
    "single_pass",
]
