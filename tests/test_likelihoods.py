"""The likelihood objects: what the estimators decide by likelihood, against closed forms."""

import pickle

import numpy as np
import pytest
import torch
from scipy import stats

from sklaplace._laplace import likelihoods

NAMES = ("categorical", "bernoulli", "gaussian")


@pytest.mark.parametrize("name", NAMES)
def test_get_round_trips_names_objects_and_pickles(name):
    lik = likelihoods.get(name)
    assert lik.name == name and likelihoods.get(lik) is lik
    assert pickle.loads(pickle.dumps(lik)) == lik
    with pytest.raises(ValueError, match="unknown likelihood 'poisson'"):
        likelihoods.get("poisson")


def test_noisy_nll_is_the_density():
    rng = np.random.default_rng(0)
    f, y = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    sigma = np.array([0.3, 2.0])
    got = likelihoods.get("gaussian").noisy_nll(torch.tensor(f), torch.tensor(y),
                                                torch.tensor(sigma))
    expected = -stats.norm(f, sigma).logpdf(y).sum(1)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    # without noise the σ argument is ignored: the categorical / Bernoulli NLL
    logits, labels = torch.tensor(f), torch.tensor([0, 1, 1, 0, 1])
    cat = likelihoods.get("categorical")
    np.testing.assert_allclose(cat.noisy_nll(logits, labels, torch.tensor(9.0)),
                               -torch.log_softmax(logits, -1)[torch.arange(5), labels])
    ber = likelihoods.get("bernoulli")
    p = torch.sigmoid(logits[:, :1])[:, 0]
    np.testing.assert_allclose(ber.noisy_nll(logits[:, :1], labels, torch.tensor(9.0)),
                               -torch.where(labels == 1, p.log(), (1 - p).log()))


@pytest.mark.parametrize("name, dtype, shape", [("categorical", torch.long, (4,)),
                                                ("bernoulli", torch.float64, (4,)),
                                                ("gaussian", torch.float64, (4, 2))])
def test_split_weight_takes_the_last_column(name, dtype, shape):
    lik = likelihoods.get(name)
    targets = torch.arange(4.0).reshape(4, 1).repeat(1, shape[1] if len(shape) > 1 else 1)
    weights = torch.tensor([0.5, 1.0, 2.0, 0.0])
    y, w = lik.split_weight(torch.cat([targets, weights[:, None]], 1))
    assert y.dtype == dtype and tuple(y.shape) == shape
    np.testing.assert_array_equal(w, weights)
    np.testing.assert_array_equal(y.reshape(4, -1)[:, 0], torch.arange(4))
    assert lik.n_outputs(3) == (1 if name == "bernoulli" else 3)
