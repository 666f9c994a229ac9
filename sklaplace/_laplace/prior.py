"""The prior precision δ across the boundary between the net and the Laplace weights.

A user gives δ for the *whole net*: a float, one value per parameter tensor
(weight and bias of each layer) or one per parameter.  The LA works on a
*subset* of the weights (all, last layer, subnetwork), where δ is a 0-d tensor
or one value per Laplace weight, and tuning moves only the *free* values of the
``prior_structure``: one (scalar), one per parameter tensor (layerwise) or one
per weight (diag).  This module is the only place that crosses between the three:

- :func:`expand_prior`: whole-net δ → one value per net parameter;
- :func:`subset_prior`: whole-net δ → the Laplace weights' δ;
- :class:`PriorGroups`: the free values of a structure on a subset — their start
  from a subset δ, their expansion to the subset, and back to the whole-net form;
  with ``heads``, each group of the structure split further by the output head its
  weights feed (``noise="heteroscedastic"``: :func:`.natural.head_index`).
"""

import numpy as np
import torch

from .subsets import tensor_sizes

__all__ = ["PriorGroups", "constant_per_tensor", "expand_prior", "subset_prior", "tensor_sizes"]


def expand_prior(prior, sizes):
    """Whole-net prior (float, per tensor or per parameter) → one value per parameter."""
    arr = np.asarray(prior, dtype=float)
    total = int(np.sum(sizes))
    if arr.ndim == 0:
        return np.full(total, float(arr))
    if arr.size == len(sizes):
        return np.repeat(arr, sizes)
    if arr.size == total:
        return arr.copy()
    raise ValueError(
        f"prior_precision has {arr.size} values; expected a float, one value per parameter "
        f"tensor ({len(sizes)}: weight and bias of each layer) or one per parameter ({total})."
    )


def constant_per_tensor(prior, module):
    """Whether a whole-net prior is constant within every parameter tensor (as Kronecker
    factors need); ``module`` may also be the list of tensor sizes."""
    arr = np.asarray(prior, dtype=float)
    if arr.ndim == 0:
        return True
    sizes = module if isinstance(module, (list, tuple)) else tensor_sizes(module)
    whole = expand_prior(arr, sizes)
    return all(np.all(part == part[0]) for part in np.split(whole, np.cumsum(sizes)[:-1]))


def subset_prior(prior, subset):
    """Whole-net prior → 0-d float64 tensor or one value per Laplace weight, on the
    subset's device."""
    arr = np.asarray(prior, dtype=float)
    device = subset.theta.device
    if arr.ndim == 0:
        return torch.tensor(float(arr), dtype=torch.float64, device=device)
    whole = expand_prior(arr, tensor_sizes(subset.module))
    return torch.as_tensor(whole[subset.whole_index], device=device)


class PriorGroups:
    """The free prior precisions of ``structure`` on the Laplace weights of ``subset``.

    Parameters
    ----------
    structure : {"scalar", "layerwise", "diag"}
        One free value, one per parameter tensor present in the subset, or one per
        Laplace weight.
    subset : AllWeights, LastLayer or Subnetwork
    heads : int array of shape (P,), optional
        A label per Laplace weight (0: shared by every output); each group of
        ``structure`` is split by it, and the whole-net form is then one value per
        parameter (a group may hold part of a tensor).

    Attributes
    ----------
    index : LongTensor of shape (P,)
        The free value of each Laplace weight.
    n_free : int
    """

    def __init__(self, structure, subset, heads=None):
        self.structure, self.subset = structure, subset
        if structure == "scalar":
            index = np.zeros(subset.n_params, dtype=int)
        elif structure == "layerwise":
            index = np.unique(subset.group_index, return_inverse=True)[1]
        else:
            index = np.arange(subset.n_params)
        self.by_weight = heads is not None and structure != "diag"
        if self.by_weight:  # the pairs (group, head), numbered in order
            pairs = np.stack([index, np.asarray(heads, dtype=int)], 1)
            index = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1)
        self.index = torch.as_tensor(index, dtype=torch.long)
        self.n_free = int(index.max()) + 1 if len(index) else 0

    def head_of_groups(self, heads):
        """The ``heads`` label of each free value's weights (n_free,): one per group where
        the groups were split by them."""
        out = np.zeros(self.n_free, dtype=int)
        out[self.index.numpy()] = np.asarray(heads, dtype=int)
        return out

    def log_start(self, delta):
        """The free values' start from a subset δ (0-d or (P,)): the mean of log δ over
        each group, as a float64 CPU tensor of shape (n_free,)."""
        start = delta.to("cpu", torch.float64).expand(self.subset.n_params)
        sums = torch.zeros(self.n_free, dtype=torch.float64).index_add_(0, self.index,
                                                                          start.log())
        return sums / torch.bincount(self.index, minlength=self.n_free).to(torch.float64)

    def expand(self, values):
        """Free values → the subset δ: a 0-d tensor (scalar) or one per Laplace weight."""
        if self.structure == "scalar" and not self.by_weight:
            return values[0]
        return values[self.index.to(values.device)]

    def to_whole(self, values, prior):
        """Free values (numpy) → the whole-net form of ``prior_precision_``: a float
        (scalar), one value per parameter tensor (layerwise) or per parameter (diag).
        Weights outside the subset keep their values in ``prior``."""
        values = np.asarray(values, dtype=float)
        if self.structure == "scalar" and not self.by_weight:
            return float(values[0])
        sizes = tensor_sizes(self.subset.module)
        whole = expand_prior(prior, sizes)
        per_weight = values[self.index.numpy()]
        whole[self.subset.whole_index] = per_weight
        if self.structure == "layerwise" and not self.by_weight:
            # a tensor's value is its group's, also where the subset (a subnetwork) does not
            # hold the tensor's first weight; untouched tensors keep their first value
            per_tensor = whole[np.cumsum([0, *sizes[:-1]])]
            tensor_of = np.repeat(np.arange(len(sizes)), sizes)
            per_tensor[tensor_of[self.subset.whole_index]] = per_weight
            return per_tensor
        return whole
