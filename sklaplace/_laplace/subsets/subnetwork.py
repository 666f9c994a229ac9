"""The subnetwork subset: a chosen set of individual weights, the others at the MAP.

Its Jacobians are the all-weights Jacobians' columns of the chosen weights, and the
net at other values of them is the net at the MAP with those entries replaced.
"""

import numpy as np
import torch

from .all_weights import AllWeights
from .base import _jacobian_moments, named_params, param_offsets, posterior_row_bytes


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
