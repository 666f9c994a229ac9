"""The likelihood objects: what the estimators decide by likelihood, against closed forms."""

import pickle

import numpy as np
import pytest
import torch
from scipy import stats

from sklaplace._laplace import likelihoods

NAMES = ("categorical", "bernoulli", "multilabel", "gaussian")


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
                                                ("multilabel", torch.float64, (4, 3)),
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


def test_multilabel_is_independent_bernoullis_against_autograd():
    """nll, ∇_f nll (the residual) and Λ = ∇²_f nll of the multilabel likelihood, in
    float64 against torch.func on a hand-written sum of per-label Bernoulli NLLs; one
    output of it is the binary Bernoulli likelihood."""
    from torch.func import grad, hessian

    g = torch.Generator().manual_seed(0)
    f = 3 * torch.randn(6, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (6, 4), generator=g).to(torch.float64)
    lik = likelihoods.get("multilabel")

    def row_nll(fr, yr):
        return -(yr * torch.log(torch.sigmoid(fr)) + (1 - yr) * torch.log(torch.sigmoid(-fr))).sum()

    np.testing.assert_allclose(lik.nll(f, y), [row_nll(f[n], y[n]) for n in range(6)],
                               rtol=1e-12)
    np.testing.assert_allclose(lik.residual(f, y),
                               torch.stack([grad(row_nll)(f[n], y[n]) for n in range(6)]),
                               rtol=1e-12, atol=1e-15)
    S = lik.sqrt_hessian(f)
    np.testing.assert_allclose(S @ S.transpose(1, 2),
                               torch.stack([hessian(row_nll)(f[n], y[n]) for n in range(6)]),
                               rtol=1e-10, atol=1e-15)
    assert lik.targets(y).shape == (6, 4) and lik.n_outputs(4) == 4
    assert lik.multilabel and not lik.single_logit
    ber = likelihoods.get("bernoulli")
    np.testing.assert_allclose(ber.nll(f[:, :1], y[:, 0]), lik.nll(f[:, :1], y[:, :1]),
                               rtol=1e-14)
