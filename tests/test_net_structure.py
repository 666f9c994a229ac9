"""Nets the fast paths must not misread.

The per-layer paths (Jacobians g ⊗ a, our KFLR and exact diagonal) and the last-layer
LA assume each nn.Linear weight is used once, by its own layer, and that the output is
the last layer's. Every test below returned a wrong number without a word before the
fix: tied weights, a weight read by ``F.linear`` elsewhere, a layer run twice or on
rows flattened into the batch dimension, a last
layer run twice or followed by a ReLU that is the identity on the first rows, a frozen
net left in train mode by skorch, a frozen last-layer bias; and for the regressor the
GP predictive at the initial per-output σ and ``sigma_noise_`` of multi-output y.
References are exact: Jacobians by ``torch.func`` on a float64 copy, the full GGN
and its diagonal from them.
"""

import copy

import numpy as np
import pytest
import torch
from skorch import NeuralNet, NeuralNetClassifier, NeuralNetRegressor
from sklearn.frozen import FrozenEstimator
from torch import nn
from torch.func import functional_call, jacrev

from sklaplace import LaplaceClassifier, LaplaceRegressor

DELTA = 0.5


class TiedModules(nn.Module):
    """Two nn.Linear modules share one weight; the second has no bias of its own."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.l1 = nn.Linear(4, 4)
        self.l2 = nn.Linear(4, 4, bias=False)
        self.l2.weight = self.l1.weight
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.l1(torch.tanh(self.inp(x))))
        return self.out(torch.tanh(self.l2(h)))


class FunctionalTie(nn.Module):
    """A tied autoencoder: the encoder's weight is read again by F.linear."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 4)
        self.out = nn.Linear(3, 3)

    def forward(self, x):
        h = torch.tanh(self.enc(x))
        return self.out(torch.tanh(nn.functional.linear(h, self.enc.weight.T)))


class LayerTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.mid = nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.mid(torch.tanh(self.inp(x))))
        return self.out(torch.tanh(self.mid(h)))


class RowsFlattened(nn.Module):
    """Each feature a token: the first layer sees 3·n rows (x.reshape(-1, 1))."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Linear(1, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.tok(x.reshape(-1, 1)))
        return self.out(h.reshape(x.shape[0], -1, 4).mean(1))


class InplaceTemperature(nn.Module):
    """A temperature applied in place to the head's output."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 3)
        self.register_buffer("T", torch.tensor(0.5))

    def forward(self, x):
        out = self.head(torch.tanh(self.body(x)))
        out /= self.T
        return out


class HeadReadByBody(nn.Module):
    """The body reads the head's weight through F.linear (a tied autoencoder)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 3)

    def forward(self, x):
        return self.head(torch.tanh(nn.functional.linear(x, self.head.weight.T)))


class WeightNormHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


class DirectParameters(nn.Module):
    """A hidden layer of bare nn.Parameters with a broadcast bias (BackPACK asserts)."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(0.5 * torch.randn(3, 4))
        self.b = nn.Parameter(torch.zeros(4))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.tanh(x @ self.W + self.b))


class InplaceReluAfterBatchNorm(nn.Module):
    """An in-place ReLU on BatchNorm's output (a view of BackPACK's hooks: RuntimeError)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(3, 5)
        self.bn = nn.BatchNorm1d(5)
        self.out = nn.Linear(5, 3)

    def forward(self, x):
        return self.out(nn.functional.relu(self.bn(self.l1(x)), inplace=True))


def _data(n=60, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3).astype(np.float32)
    return X, (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)


def _trained(module, X, y, **kwargs):
    torch.manual_seed(0)
    return NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, max_epochs=10, lr=0.1,
                               train_split=None, verbose=0, **kwargs).fit(X, y)


def _exact_logit_cov(module, X, diagonal):
    """J (Σ Jᵀ Λ J + δ I)⁻¹ Jᵀ over the trainable weights (or the diagonal GGN's)."""
    module = copy.deepcopy(module).double().eval()
    named = [(k, p) for k, p in module.named_parameters() if p.requires_grad]
    theta = torch.cat([p.detach().reshape(-1) for _, p in named])
    X = torch.as_tensor(X, dtype=torch.float64)

    def outputs(t):
        params, start = {}, 0
        for k, p in named:
            params[k] = t[start:start + p.numel()].reshape(p.shape)
            start += p.numel()
        return functional_call(module, params, (X,))

    f, J = outputs(theta).detach(), jacrev(outputs)(theta)
    p = torch.softmax(f, 1)
    lam = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    H = torch.einsum("ncp,ncd,ndq->pq", J, lam, J)
    if diagonal:
        H = torch.diag(H.diagonal())
    cov = J @ torch.linalg.inv(H + DELTA * torch.eye(len(theta), dtype=H.dtype)) @ J.transpose(1, 2)
    return cov.numpy()


@pytest.mark.parametrize("module", [TiedModules, FunctionalTie, LayerTwice, RowsFlattened])
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_reused_weights_get_their_whole_jacobian(module, structure):
    X, y = _data()
    net = _trained(module, X, y)
    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="all",
                            hessian_structure=structure, hyperparameter_tuning=None,
                            prior_precision=DELTA).fit(X, y)
    reference = _exact_logit_cov(net.module_, X, diagonal=structure == "diag")
    np.testing.assert_allclose(est.predict_dist(X).logit_cov, reference, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("module", [TiedModules, FunctionalTie, LayerTwice, RowsFlattened])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_kron_refuses_reused_weights(module, curvature):
    X, y = _data()
    est = LaplaceClassifier(FrozenEstimator(_trained(module, X, y)), subset_of_weights="all",
                            hessian_structure="kron", curvature=curvature,
                            hyperparameter_tuning=None)
    with pytest.raises(ValueError, match="(?i)kron"):
        est.fit(X, y)


@pytest.mark.parametrize("module", [LayerTwice, RowsFlattened])
def test_auto_structure_does_not_pick_kron_for_a_net_it_cannot_read(module, monkeypatch):
    # beyond the full budget "auto" took Kronecker factors for any net of nn.Linear
    # layers, and the fit then raised
    import sklaplace._laplace.policy as base

    monkeypatch.setattr(base, "AUTO_FULL_SECONDS", 0.0)
    X, y = _data()
    for subset, expected in [("auto", ("last_layer", "full")), ("all", ("all", "diag"))]:
        net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, max_epochs=5, lr=0.1,
                                  train_split=None, verbose=0)
        est = LaplaceClassifier(net, subset_of_weights=subset, hyperparameter_tuning="evidence",
                                random_state=0).fit(X, y)
        assert (est.subset_of_weights_, est.hessian_structure_) == expected
    net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, max_epochs=5, lr=0.1,
                              train_split=None, verbose=0)
    est = LaplaceClassifier(net, random_state=0).partial_fit(X, y, classes=[0, 1, 2])
    assert est.hessian_structure_ == "diag"
    assert np.isfinite(est.predict_proba(X)).all()


@pytest.mark.parametrize("module", [InplaceTemperature, HeadReadByBody, WeightNormHead])
def test_last_layer_refuses_heads_it_cannot_read_and_auto_takes_all_weights(
        module, monkeypatch):
    # an in-place temperature passed the output check (the hook's tensor was divided too):
    # logit variances 2.1 where they are 8.1; a head weight read by the body was missed;
    # a weight-normed head raised "'head.weight' is not in list"
    import sklaplace._laplace.policy as base

    X, y = _data()
    net = _trained(module, X, y)
    common = dict(hyperparameter_tuning=None, prior_precision=DELTA)
    with pytest.raises(ValueError, match="subset_of_weights='last_layer'|last nn.Linear"):
        LaplaceClassifier(FrozenEstimator(net), subset_of_weights="last_layer",
                          hessian_structure="full", **common).fit(X, y)
    monkeypatch.setattr(base, "AUTO_FULL_SECONDS", 0.0)
    est = LaplaceClassifier(FrozenEstimator(net), **common).fit(X, y)
    assert est.subset_of_weights_ == "all"
    if est.hessian_structure_ == "diag":  # kron for the in-place temperature (nn.Linear only)
        np.testing.assert_allclose(est.predict_dist(X).logit_cov,
                                   _exact_logit_cov(net.module_, X, diagonal=True),
                                   rtol=1e-7, atol=1e-10)
    assert est.hessian_structure_ == ("kron" if module is InplaceTemperature else "diag")


@pytest.mark.parametrize("module", [DirectParameters, InplaceReluAfterBatchNorm,
                                    HeadReadByBody])
def test_diagonal_of_a_net_backpack_cannot_run_is_exact(module):
    # BackPACK raised an AssertionError / RuntimeError out of fit, or (a head weight also
    # read by F.linear) returned the diagonal of its module's use alone
    X, y = _data()
    net = _trained(module, X, y)
    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="all",
                            hessian_structure="diag", hyperparameter_tuning=None,
                            prior_precision=DELTA).fit(X, y)
    np.testing.assert_allclose(est.predict_dist(X).logit_cov,
                               _exact_logit_cov(net.module_, X, diagonal=True),
                               rtol=1e-7, atol=1e-10)


class HeadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.head(x)))


def test_last_layer_run_twice_is_refused():
    X, y = _data()
    est = LaplaceClassifier(FrozenEstimator(_trained(HeadTwice, X, y)),
                            subset_of_weights="last_layer", hyperparameter_tuning=None)
    with pytest.raises(ValueError, match="runs 2 times"):
        est.fit(X, y)


class ReluAfterHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(1, 1)

    def forward(self, x):
        return torch.relu(self.head(x))


def test_last_layer_output_is_checked_on_every_row():
    # the ReLU is the identity on the first two rows only
    X = np.array([[1.0], [2.0], [-1.0], [-2.0], [0.5], [-0.5]], dtype=np.float32)
    y = np.maximum(X[:, 0], 0)
    net = NeuralNetRegressor(ReluAfterHead, verbose=0).initialize()
    with torch.no_grad():
        net.module_.head.weight.fill_(1.0)
        net.module_.head.bias.zero_()
    est = LaplaceRegressor(FrozenEstimator(net), subset_of_weights="last_layer",
                           hyperparameter_tuning=None, normalize_y=False)
    with pytest.raises(ValueError, match="does not come directly"):
        est.fit(X, y)


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Dropout(0.5))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x))


def test_frozen_net_left_in_train_mode_is_read_in_inference_mode():
    X, y = _data(seed=1)
    net = _trained(BatchNormNet, X, y)
    assert net.module_.training  # skorch leaves it so after fit
    running_mean = net.module_.body[1].running_mean.clone()
    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="last_layer",
                            hessian_structure="full", hyperparameter_tuning=None).fit(X, y)
    torch.testing.assert_close(net.module_.body[1].running_mean, running_mean, rtol=0, atol=0)
    logits = net.forward(X).numpy()  # skorch's inference-mode forward
    np.testing.assert_allclose(est.predict_dist(X).logit_mean, logits, rtol=1e-5, atol=1e-5)


class FrozenHeadBias(nn.Module):
    def __init__(self, freeze_body):
        super().__init__()
        self.body = nn.Linear(3, 8)
        self.head = nn.Linear(8, 3)
        self.head.bias.requires_grad_(False)
        for p in self.body.parameters():
            p.requires_grad_(not freeze_body)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_frozen_last_layer_bias_is_a_constant(structure):
    X, y = _data()
    net = _trained(FrozenHeadBias, X, y, module__freeze_body=True)
    # A float64 net: "last_layer" reads the features of the net in its own dtype and "all"
    # differentiates a float64 copy, so with a float32 net the two differ by the features'
    # float32 rounding (the covariances by ~1e-7, which the CPU's kernels decide); in
    # float64 they are one computation done two ways.
    net.module_.double()
    X = X.astype(np.float64)
    kwargs = dict(hessian_structure=structure, hyperparameter_tuning=None, prior_precision=DELTA)
    last = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="last_layer",
                             **kwargs).fit(X, y)
    # with the body frozen too, "all" trainable weights are the last layer's weight
    every = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="all", **kwargs).fit(X, y)
    assert last.n_params_ == every.n_params_ == 24
    a, b = last.predict_dist(X), every.predict_dist(X)
    np.testing.assert_allclose(a.logit_mean, b.logit_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.logit_cov, b.logit_cov, rtol=1e-10, atol=1e-13)
    assert last.log_evidence_ == pytest.approx(every.log_evidence_, rel=1e-12)


def test_frozen_last_layer_weight_is_refused_clearly():
    X, y = _data()
    net = _trained(FrozenHeadBias, X, y, module__freeze_body=False)
    net.module_.head.weight.requires_grad_(False)
    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="last_layer",
                            hyperparameter_tuning=None)
    with pytest.raises(ValueError, match="frozen"):
        est.fit(X, y)


# ------------------------------------------------------------ regressor: σ per output
def _two_outputs(n=80, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 2)
    Y = np.c_[X @ [1.0, -1.0] + 0.3 * rng.randn(n), 100 * (X @ [0.5, 2.0] + 0.3 * rng.randn(n))]
    return X, Y


def test_sigma_noise_is_reported_per_output_for_standardized_multi_output_y():
    X, Y = _two_outputs()
    reg = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=30, random_state=0).fit(X, Y)
    sigma = np.asarray(reg.sigma_noise_)
    assert sigma.shape == (2,)
    np.testing.assert_allclose(np.sqrt(reg.predict_dist(X).aleatoric_var[0]), sigma, rtol=1e-10)
    assert reg.log_evidence(sigma_noise=reg.sigma_noise_) == pytest.approx(reg.log_evidence_,
                                                                            rel=1e-10)
    with pytest.raises(ValueError, match="sigma_noise"):
        reg.log_evidence(sigma_noise=[1.0, 1.0])


def test_sigma_noise_form_does_not_depend_on_equal_target_stds():
    # [y, y + 5] (stds equal to the last bit) reported one float, [y, 2y] an array, and
    # log_evidence(sigma_noise=[s, s]) raised for one of them only
    X, Y = _two_outputs()
    forms = []
    for second in (Y[:, 0] + 5, 2 * Y[:, 0]):
        reg = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=10, random_state=0).fit(
            X, np.column_stack([Y[:, 0], second]))
        forms.append(np.shape(reg.sigma_noise_))
        assert reg.log_evidence(sigma_noise=reg.sigma_noise_) == pytest.approx(
            reg.log_evidence_, rel=1e-10)
    assert forms == [(2,), (2,)]


def test_a_frozen_laplace_estimator_is_refused_with_the_way_out():
    X, Y = _two_outputs()
    reg = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=5, random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match=r"FrozenEstimator\(estimator.net_\)"):
        LaplaceRegressor(FrozenEstimator(reg)).fit(X, Y)


def _linear_frozen_regressor(n_out):
    return FrozenEstimator(NeuralNet(lambda: nn.Linear(2, n_out), criterion=nn.MSELoss)
                           .initialize())


def test_gp_predictive_uses_the_tuned_per_output_noise():
    X, Y = _two_outputs()
    Y = Y / Y.std(0)
    kwargs = dict(net=_linear_frozen_regressor(2), sigma_noise=[1.0, 1.0], normalize_y=False,
                  subset_of_weights="all", hessian_structure="full")
    glm = LaplaceRegressor(**kwargs).fit(X, Y)
    gp = LaplaceRegressor(pred_type="gp", **kwargs).fit(X, Y)
    assert not np.allclose(glm.sigma_noise_, 1.0)  # tuning moved σ
    np.testing.assert_allclose(gp.predict_dist(X).epistemic_var,
                               glm.predict_dist(X).epistemic_var, rtol=1e-8)


def test_gp_subset_is_drawn_from_rows_of_positive_weight():
    # rows of weight 0 are dropped before the draw (a draw of zero-weight rows only was
    # refused before)
    X, Y = _two_outputs()
    weight = np.zeros(len(X))
    weight[::4] = 1.0
    params = dict(net=_linear_frozen_regressor(2), pred_type="gp", gp_subset_size=3,
                  hyperparameter_tuning=None, random_state=0)
    weighted = LaplaceRegressor(**params).fit(X, Y, sample_weight=weight)
    kept = LaplaceRegressor(**params).fit(X[::4], Y[::4])
    np.testing.assert_allclose(weighted.predict(X, return_std=True),
                               kept.predict(X, return_std=True), rtol=1e-12)


@pytest.mark.parametrize("settings", [dict(criterion__weight=torch.tensor([1.0, 20.0, 1.0])),
                                      dict(criterion__label_smoothing=0.4)])
def test_criterion_settings_are_refused_not_ignored(settings):
    # class weights or label smoothing on the net's criterion vanished without a word
    X, y = _data()
    net = NeuralNetClassifier(InplaceReluAfterBatchNorm, criterion=nn.CrossEntropyLoss,
                              max_epochs=2, train_split=None, verbose=0, **settings)
    with pytest.raises(ValueError, match="criterion settings.*class_weight or sample_weight"):
        LaplaceClassifier(net).fit(X, y)
    trained = _trained(InplaceReluAfterBatchNorm, X, y, **settings)
    with pytest.warns(UserWarning, match="criterion settings"):
        LaplaceClassifier(FrozenEstimator(trained), hyperparameter_tuning=None).fit(X, y)
    # the defaults change nothing and pass (a grid over criterion__weight has None in it)
    harmless = dict(criterion__weight=None, criterion__label_smoothing=0.0,
                    criterion__ignore_index=-100, criterion__reduction="sum")
    LaplaceClassifier(net.set_params(**harmless)).fit(X, y)


def test_a_fitted_last_layer_la_keeps_the_frozen_net_it_was_fitted_on():
    # the last-layer LA read the user's live module: training it further in place moved the
    # fitted LA's predictions by 0.21 (new features, old head posterior)
    X, y = _data()
    net = _trained(InplaceReluAfterBatchNorm, X, y)
    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="last_layer",
                            hessian_structure="full", hyperparameter_tuning=None).fit(X, y)
    before = est.predict_proba(X)
    net.partial_fit(X, y)
    net.partial_fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), before)
