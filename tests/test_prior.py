"""The prior precision across the net / Laplace-weights boundary (``_laplace.prior``)."""

import numpy as np
import pytest
import torch
from torch import nn

from sklaplace._laplace.prior import PriorGroups, expand_prior, subset_prior, tensor_sizes
from sklaplace._laplace.subsets import AllWeights, LastLayer, Subnetwork


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _subsets(net):
    X = torch.randn(2, 3, dtype=torch.float64)
    return {"all": AllWeights(net), "last_layer": LastLayer(net, X),
            "subnetwork": Subnetwork(net, np.array([1, 5, 17, 20, 25]))}


@pytest.mark.parametrize("kind", ["all", "last_layer", "subnetwork"])
@pytest.mark.parametrize("structure", ["scalar", "layerwise", "diag"])
def test_groups_expand_and_return_to_the_whole_net(kind, structure):
    net = _net()
    subset = _subsets(net)[kind]
    sizes = tensor_sizes(net)  # 12, 4, 8, 2 (26 weights)
    prior = np.array([1.0, 2.0, 3.0, 4.0])  # one per tensor
    groups = PriorGroups(structure, subset)
    delta = subset_prior(prior, subset)
    np.testing.assert_array_equal(delta.numpy(), expand_prior(prior, sizes)[subset.whole_index])
    start = groups.log_start(delta)
    assert start.shape == (groups.n_free,)
    # log-mean per group: exact where a group holds one tensor's values
    if structure != "scalar":
        np.testing.assert_allclose(groups.expand(start.exp()).numpy(), delta.numpy())
    else:
        assert float(start.exp()) == pytest.approx(np.exp(np.log(delta.numpy()).mean()))
    new = torch.arange(1, groups.n_free + 1, dtype=torch.float64) * 10
    whole = groups.to_whole(new.numpy(), prior)
    if structure == "scalar":
        assert whole == 10.0
        return
    whole_per_param = expand_prior(whole, sizes)
    np.testing.assert_array_equal(whole_per_param[subset.whole_index],
                                  groups.expand(new).numpy())
    outside = np.setdiff1d(np.arange(sum(sizes)), subset.whole_index)
    if structure == "diag":  # the weights outside the subset keep the given prior
        np.testing.assert_array_equal(whole_per_param[outside],
                                      expand_prior(prior, sizes)[outside])
    else:
        assert whole.shape == (len(sizes),)
