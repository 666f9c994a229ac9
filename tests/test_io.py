"""sklaplace.io: files that load without running code, and predict as before saving."""

import dataclasses
import io
import json
import pickle
import warnings
import zipfile

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification, make_regression
from sklearn.frozen import FrozenEstimator
from skorch import NeuralNetClassifier
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace import io as skio

Xc, yc = make_classification(48, 4, n_informative=3, n_redundant=0, n_classes=3,
                             random_state=0)
Xr, yr = make_regression(48, 3, noise=5.0, random_state=0)
SMALL = dict(hidden_layer_sizes=(6,), max_epochs=8, random_state=0)

PAIRS = [("all", s) for s in ("full", "diag", "kron", "lowrank")] + [
    ("last_layer", s) for s in ("full", "diag", "kron", "lowrank")] + [
    ("subnetwork", s) for s in ("full", "diag")]


def _fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y, **kw)


def _round_trip(est, tmp_path, **load_kw):
    path = skio.save(est, tmp_path / "model.sklaplace", **load_kw.pop("save_kw", {}))
    return skio.load(path, **load_kw)


def _assert_same_predictions(a, b, X):
    """Bitwise-equal predictions, evidence and fitted attributes."""
    assert type(a) is type(b)
    assert a.get_params().keys() == b.get_params().keys()
    assert a.log_evidence_ == b.log_evidence_
    np.testing.assert_array_equal(a.prior_precision_, b.prior_precision_)
    dist_a, dist_b = a.predict_dist(X), b.predict_dist(X)
    compared = 0
    for field in dataclasses.fields(dist_a):
        value = getattr(dist_a, field.name)
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, getattr(dist_b, field.name))
            compared += 1
    assert compared >= 2
    if isinstance(a, LaplaceClassifier):
        np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
        np.testing.assert_array_equal(a.predict(X), b.predict(X))
        np.testing.assert_array_equal(a.classes_, b.classes_)
    else:
        for x, y in zip(a.predict(X, return_std=True), b.predict(X, return_std=True)):
            np.testing.assert_array_equal(x, y)
        if hasattr(a, "sigma_noise_"):  # (a heteroscedastic fit has σ(x) instead)
            np.testing.assert_array_equal(a.sigma_noise_, b.sigma_noise_)
        for args in [(), (2.0,)]:
            try:
                expected = a.log_evidence(*args)
            except ValueError:
                with pytest.raises(ValueError):
                    b.log_evidence(*args)
            else:
                assert b.log_evidence(*args) == expected


@pytest.mark.parametrize("subset,structure", PAIRS)
@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_round_trip_structures_and_subsets(Estimator, subset, structure, tmp_path):
    X, y = (Xc, yc) if Estimator is LaplaceClassifier else (Xr, yr)
    est = _fit(Estimator(**SMALL, subset_of_weights=subset, hessian_structure=structure,
                         subnetwork=15 if subset == "subnetwork" else None,
                         hyperparameter_tuning="evidence"), X, y)
    loaded = _round_trip(est, tmp_path)
    assert (loaded.subset_of_weights_, loaded.hessian_structure_) == (subset, structure)
    _assert_same_predictions(est, loaded, X)
    assert type(loaded.laplace_.posterior) is type(est.laplace_.posterior)


@pytest.mark.parametrize("refine,subset,structure",
                         [("laplace", "all", "diag"), ("vi", "last_layer", "full"),
                          ("laplace", "subnetwork", "full")])
@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_round_trip_refined(Estimator, refine, subset, structure, tmp_path):
    X, y = (Xc, yc) if Estimator is LaplaceClassifier else (Xr, yr)
    est = _fit(Estimator(**SMALL, refine=refine, subset_of_weights=subset,
                         hessian_structure=structure,
                         subnetwork=15 if subset == "subnetwork" else None), X, y)
    loaded = _round_trip(est, tmp_path)
    assert loaded.laplace_.refined
    _assert_same_predictions(est, loaded, X)
    assert loaded.refine_objective_ == est.refine_objective_


@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_round_trip_partial_fit_and_continue(Estimator, tmp_path):
    X, y = (Xc, yc) if Estimator is LaplaceClassifier else (Xr, yr)
    extra = {"classes": np.unique(yc)} if Estimator is LaplaceClassifier else {}
    est = Estimator(**SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X[:24], y[:24], **extra).partial_fit(X[24:], y[24:])
    loaded = _round_trip(est, tmp_path)
    assert loaded.n_tasks_ == 2
    _assert_same_predictions(est, loaded, X)
    # a loaded model learns a further task as the saved one does
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X[:16], y[:16])
        loaded.partial_fit(X[:16], y[:16])
    np.testing.assert_allclose(loaded.predict(X), est.predict(X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("tuning", ["cv", "online"])
def test_round_trip_tuning_and_multioutput(tuning, tmp_path):
    Y = np.c_[yr, 0.5 * yr + np.sin(Xr[:, 0])]
    est = _fit(LaplaceRegressor(**SMALL, hyperparameter_tuning=tuning), Xr, Y)
    _assert_same_predictions(est, _round_trip(est, tmp_path), Xr)
    clf = _fit(LaplaceClassifier(**SMALL, hyperparameter_tuning=tuning, class_weight="balanced",
                                 link_approx="mc", n_samples=20), Xc, yc)
    _assert_same_predictions(clf, _round_trip(clf, tmp_path), Xc)


def test_round_trip_unfitted_and_sampled_predictive(tmp_path):
    est = LaplaceClassifier(hidden_layer_sizes=(3, 2), pred_type="nn", prior_precision=[1.0] * 6)
    loaded = _round_trip(est, tmp_path)
    assert repr(loaded) == repr(est)
    fitted = _fit(LaplaceClassifier(**SMALL, pred_type="nn", n_samples=10), Xc, yc)
    _assert_same_predictions(fitted, _round_trip(fitted, tmp_path), Xc)


class TinyNet(nn.Module):
    def __init__(self, width=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, width), nn.Tanh())
        self.head = nn.Linear(width, 3)

    def forward(self, X):
        return self.head(self.body(X))


def _user_net():
    return NeuralNetClassifier(TinyNet, module__width=4, max_epochs=5, lr=0.05,
                               criterion=nn.CrossEntropyLoss, optimizer=torch.optim.SGD,
                               train_split=None)


def test_user_module_needs_its_factory(tmp_path):
    est = _fit(LaplaceClassifier(_user_net(), random_state=0, subset_of_weights="last_layer"),
               Xc.astype(np.float32), yc)
    path = skio.save(est, tmp_path / "m.sklaplace", module_name="tiny")
    with pytest.raises(ValueError, match=r"modules=\{'tiny'"):
        skio.load(path)
    built = []

    def factory(**kwargs):
        built.append(kwargs)
        return TinyNet(**kwargs)

    loaded = skio.load(path, modules={"tiny": factory})
    assert built and built[0] == {"width": 4}
    assert loaded.net.module is factory and loaded.net.criterion is nn.CrossEntropyLoss
    _assert_same_predictions(est, loaded, Xc.astype(np.float32))
    # the default name is the class's qualified name
    skio.save(est, tmp_path / "d.sklaplace")
    loaded = skio.load(tmp_path / "d.sklaplace", modules={"TinyNet": TinyNet})
    np.testing.assert_array_equal(loaded.predict_proba(Xc), est.predict_proba(Xc))


def test_frozen_net(tmp_path):
    net = _user_net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net.fit(Xc.astype(np.float32), yc)
    est = _fit(LaplaceClassifier(FrozenEstimator(net), subset_of_weights="all",
                                 hessian_structure="kron"), Xc, yc)
    loaded = skio.load(skio.save(est, tmp_path / "f.sklaplace"), modules={"TinyNet": TinyNet})
    assert isinstance(loaded.net, FrozenEstimator) and loaded.net.estimator is loaded.net_
    _assert_same_predictions(est, loaded, Xc)


def test_device_argument_and_mapping(tmp_path):
    est = _fit(LaplaceRegressor(**SMALL), Xr, yr)
    loaded = skio.load(skio.save(est, tmp_path / "m.sklaplace"), device="cpu")
    assert loaded.device == "cpu" and loaded.laplace_.device.type == "cpu"
    _assert_same_predictions(est, loaded, Xr)


# ---------------------------------------------------------------- refusals
class _Payload:
    """Unpickling this creates the marker file: proof that a load ran the payload."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _model_file(tmp_path):
    est = _fit(LaplaceClassifier(**SMALL, subset_of_weights="last_layer",
                                 hessian_structure="full"), Xc, yc)
    return skio.save(est, tmp_path / "good.sklaplace")


def _rewrite(src, dst, replace=None, add=None, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compress) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if replace and name in replace:
                data = replace[name](data)
            zout.writestr(name, data)
        for name, data in (add or {}).items():
            zout.writestr(name, data)
    return dst


def test_pickle_payloads_are_refused_and_never_run(tmp_path):
    good = _model_file(tmp_path)
    marker = tmp_path / "payload_ran"
    payload = pickle.dumps(_Payload(marker))
    # the payload works: unpickling it creates the marker
    pickle.loads(payload)
    assert marker.exists()
    marker.unlink()

    object_array = io.BytesIO()
    np.save(object_array, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(good) as z:
        first_array = next(n for n in z.namelist() if n.endswith(".npy"))
    files = {
        "pickle": tmp_path / "p.pkl",
        "object_array": _rewrite(good, tmp_path / "o.sklaplace",
                                 replace={first_array: lambda _: object_array.getvalue()}),
        "pickle_member": _rewrite(good, tmp_path / "m.sklaplace", add={"data.pkl": payload}),
        "torch_save": tmp_path / "t.pt",
    }
    files["pickle"].write_bytes(payload)
    torch.save({"x": _Payload(marker)}, files["torch_save"])
    for what, path in files.items():
        with pytest.raises(ValueError, match="not a model file sklaplace.io can load"):
            skio.load(path)
        assert not marker.exists(), what


def _edit_document(src, dst, edit, compress=zipfile.ZIP_STORED):
    def change(data):
        doc = json.loads(data)
        edit(doc)
        return json.dumps(doc).encode()

    return _rewrite(src, dst, replace={"sklaplace.json": change}, compress=compress)


def test_unknown_types_and_classes_are_refused(tmp_path):
    good = _model_file(tmp_path)

    def unknown_object(doc):
        doc["attributes"]["laplace_"]["$object"] = "os.system"

    def foreign_class(doc):
        doc["attributes"]["net_"]["params"]["optimizer"] = {"$class": "os:system"}

    def foreign_function(doc):
        doc["attributes"]["laplace_"]["state"]["report"] = {
            "$partial": "builtins.eval", "args": {"$tuple": ["1"]}, "keywords": {"$dict": []}}

    for edit, message in [(unknown_object, "unknown type 'os.system'"),
                          (foreign_class, "not one sklaplace.io rebuilds as a skorch net's "
                                          "optimizer"),
                          (foreign_function, "unknown function 'builtins.eval'")]:
        path = _edit_document(good, tmp_path / "bad.sklaplace", edit)
        with pytest.raises(TypeError, match=message):
            skio.load(path)


def test_version_mismatch(tmp_path):
    good = _model_file(tmp_path)

    def newer(doc):
        doc["version"] = skio.FORMAT_VERSION + 1

    path = _edit_document(good, tmp_path / "new.sklaplace", newer)
    with pytest.raises(ValueError, match=f"new.sklaplace.*format version "
                                         f"{skio.FORMAT_VERSION + 1}.*Upgrade sklaplace"):
        skio.load(path)

    def zero(doc):
        doc["version"] = 0

    with pytest.raises(ValueError, match="format version 0"):
        skio.load(_edit_document(good, tmp_path / "old.sklaplace", zero))


def test_unknown_state_refuses_the_save(tmp_path):
    est = _fit(LaplaceClassifier(**SMALL), Xc, yc)
    est.laplace_.posterior.extra_state = object()
    path = tmp_path / "never.sklaplace"
    with pytest.raises(TypeError, match=r"attributes \['extra_state'\]"):
        skio.save(est, path)
    assert not path.exists()
    del est.laplace_.posterior.extra_state
    est.custom_ = object()
    with pytest.raises(TypeError, match="cannot save a value of type builtins.object"):
        skio.save(est, path)
    assert not path.exists()


def test_callable_parameters_outside_the_allowlist_are_refused(tmp_path):
    net = NeuralNetClassifier(TinyNet, predict_nonlinearity=lambda x: x, train_split=None)
    with pytest.raises(TypeError, match="cannot save the parameter 'predict_nonlinearity'"):
        skio.save(LaplaceClassifier(net), tmp_path / "x.sklaplace")
    with pytest.raises(TypeError, match="saves LaplaceClassifier and LaplaceRegressor"):
        skio.save(net, tmp_path / "x.sklaplace")


@pytest.mark.parametrize("case", ["multilabel", "multilabel_last_layer_mc", "heteroscedastic",
                                  "heteroscedastic_kron"])
def test_round_trip_multilabel_and_heteroscedastic(case, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    if case.startswith("multilabel"):
        y = np.c_[X[:, 0] > 0, X[:, 1] > 0].astype(int)
        extra = (dict(subset_of_weights="last_layer", link_approx="mc", n_samples=20)
                 if case.endswith("mc") else {})
        est = _fit(LaplaceClassifier(**SMALL, **extra), X, y)
    else:
        y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40) * (1 + np.abs(X[:, 1]))
        extra = dict(hessian_structure="kron", subset_of_weights="all") if "kron" in case else {}
        est = _fit(LaplaceRegressor(**SMALL, noise="heteroscedastic", **extra), X, y)
    _assert_same_predictions(est, _round_trip(est, tmp_path), X)


def test_every_likelihood_is_a_saved_type():
    from sklaplace._laplace.likelihoods import LIKELIHOODS
    from sklaplace._persist import TYPES

    assert set(LIKELIHOODS.values()) <= {spec.cls for spec in TYPES.values()}


@pytest.mark.skipif(torch.cuda.is_available(), reason="maps CUDA tensors where there is no CUDA")
def test_a_file_saved_on_cuda_loads_on_the_cpu(tmp_path):
    est = _fit(LaplaceClassifier(**SMALL, hessian_structure="kron", subset_of_weights="all"),
               Xc, yc)
    good = skio.save(est, tmp_path / "cpu.sklaplace")

    def on_cuda(value):  # the document of the same fit saved on a GPU
        if isinstance(value, dict):
            if "$tensor" in value:
                value["device"] = "cuda:0"
            for item in value.values():
                on_cuda(item)
        elif isinstance(value, list):
            for item in value:
                on_cuda(item)

    path = _edit_document(good, tmp_path / "cuda.sklaplace", on_cuda)
    with pytest.warns(UserWarning, match="saved on 'cuda:0'.*loaded onto the CPU"):
        loaded = skio.load(path)
    assert loaded.laplace_.device.type == "cpu"
    _assert_same_predictions(est, loaded, Xc)


def test_round_trip_of_a_fit_on_dask_collections(tmp_path):
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    X = np.random.default_rng(0).normal(size=(120, 3))
    y = np.sin(X[:, 0])
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        est = _fit(LaplaceRegressor(**SMALL, solver="lbfgs"), da.from_array(X, chunks=60),
                   da.from_array(y, chunks=60))
    _assert_same_predictions(est, _round_trip(est, tmp_path), X)


def test_a_file_written_before_the_estimators_moved_into_their_package_loads():
    """tests/data/flat_layout.skl was saved when the fit pipeline lived at
    ``sklaplace._fitting`` (its per-output σ evidence keeps a partial of
    ``sklaplace._fitting._build_posterior``); it loads and predicts as when it was saved:
    ``LaplaceRegressor(hidden_layer_sizes=(3,), max_epochs=3, sigma_noise=[1.0, 1.0],
    random_state=0)`` on the first 30 rows of ``RandomState(0).randn(30, 2)``."""
    import pathlib

    path = pathlib.Path(__file__).parent / "data" / "flat_layout.skl"
    assert b"sklaplace._fitting._build_posterior" in zipfile.ZipFile(path).read("sklaplace.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = skio.load(path)
    X = np.random.RandomState(0).randn(30, 2)
    mean, std = est.predict(X[:2], return_std=True)
    np.testing.assert_allclose(mean, [[0.07405975, 0.53896074], [0.16934244, 0.48121213]],
                               rtol=1e-5)
    np.testing.assert_allclose(std, [[1.20857803, 1.19142071], [1.2485194, 1.21198303]],
                               rtol=1e-5)
    # the saved evidence rebuilds the curvature at another per-output σ through the partial
    assert np.isfinite(est.log_evidence(sigma_noise=[0.5, 2.0]))
    np.testing.assert_allclose(est.log_evidence_, -98.67967310718889, rtol=1e-6)
