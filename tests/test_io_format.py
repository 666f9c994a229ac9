"""sklaplace.io's file format: names of its own (version 2), files of version 1 still read,
and a change of the code's names that leaves the files as they are."""

import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace import io as skio
from sklaplace._laplace.posterior import EigenPosterior
from sklaplace._persist_schema import FUNCTIONS, TYPES, Spec, classes
from test_io import TinyNet

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "format_v1.json").read_text())
X = np.random.RandomState(0).randn(24, 3)
SMALL = dict(hidden_layer_sizes=(4,), max_epochs=5, random_state=0)


def _load(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return skio.load(path, **kw)


def _document(path):
    return json.loads(zipfile.ZipFile(path).read("sklaplace.json"))


def _tagged(value, tag):
    """Every JSON object of ``value`` whose first key is ``tag``."""
    stack, out = [value], []
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if next(iter(item), None) == tag:
                out.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _outputs(est, rows):
    if isinstance(est, LaplaceClassifier):
        return {"predict_proba": est.predict_proba(rows)}
    mean, std = est.predict(rows, return_std=True)
    return {"mean": mean, "std": std}


def _rows(name):
    if name == "v1_user_net_callbacks":
        from sklearn.datasets import make_classification

        Xc, _ = make_classification(48, 4, n_informative=3, n_redundant=0, n_classes=3,
                                    random_state=0)
        return Xc[:3].astype(np.float32)
    return X[:5]


def _assert_as_when_written(est, name):
    """The predictions and evidence of a tests/data file, against those its fit gave
    when the file was written (tests/data/format_v1.json)."""
    expected = EXPECTED[name]
    # a float32 net's outputs differ between CPUs in their last float32 bits (the kernels a
    # CPU's instructions select): the file holds the same weights, not the same rounding
    dtype = next(est.net_.module_.parameters()).dtype
    rtol = 1e-10 if dtype == torch.float64 else 1e-6
    for key, value in _outputs(est, _rows(name)).items():
        np.testing.assert_allclose(value, expected[key], rtol=rtol, atol=1e-13)
    np.testing.assert_allclose(est.log_evidence_, expected["log_evidence_"], rtol=rtol)


V1_FILES = sorted(EXPECTED)


# ---------------------------------------------------------------- version 1
@pytest.mark.parametrize("name", V1_FILES)
def test_version_1_files_load_and_predict_as_when_written(name, tmp_path):
    path = DATA / f"{name}.skl"
    doc = _document(path)
    assert doc["version"] == 1
    est = _load(path, modules={"TinyNet": TinyNet})
    _assert_as_when_written(est, name)
    # saved again, the same fit in version 2: the same predictions, bit for bit
    again = skio.save(est, tmp_path / "v2.sklaplace", module_name="TinyNet")
    assert _document(again)["version"] == skio.FORMAT_VERSION == 2
    loaded = _load(again, modules={"TinyNet": TinyNet})
    for key, value in _outputs(est, _rows(name)).items():
        np.testing.assert_array_equal(_outputs(loaded, _rows(name))[key], value)
    assert loaded.log_evidence_ == est.log_evidence_
    for attribute in ("sklaplace_target_scaling_", "classes_inferred_"):
        if f'"{attribute}"'.encode() in zipfile.ZipFile(path).read("sklaplace.json"):
            expected = getattr(est.net_, attribute)
            assert np.array_equal(getattr(loaded.net_, attribute), expected)


def test_the_version_1_files_hold_the_code_names_they_are_translated_from():
    """The files of tests/data are of the old writer: its private attribute names, class
    names and module paths, which version 2 no longer writes."""
    found = set()
    for name in V1_FILES:
        text = (zipfile.ZipFile(DATA / f"{name}.skl").read("sklaplace.json")).decode()
        found |= {word for word in ('"_d_inv_sqrt"', '"_Q"', '"_omega2"', '"_var"', '"_inv"',
                                    '"_all"', '"_d2"', '"_curvature_quadratic"',
                                    '"EigenPosterior"', '"KronPosterior"', '"DiagPosterior"',
                                    '"TaskEvidence"', '"RefinedSubset"', '"Subnetwork"',
                                    '"LastLayer"', '"RangeKernel"',
                                    '"sklaplace._laplace.nets:MLP"',
                                    '"sklaplace_target_scaling_"') if word in text}
    assert len(found) == 18


# ---------------------------------------------------------------- version 2
def _fits():
    """Fits whose state holds every type of the schema but the stateless likelihoods."""
    yc = ((X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)).astype(int)
    yr = np.sin(X[:, 0]) + 0.1 * X[:, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield LaplaceClassifier(**SMALL, prior_structure="layerwise",
                                hyperparameter_tuning="evidence").fit(X, yc)
        yield LaplaceClassifier(**SMALL, subset_of_weights="subnetwork", subnetwork=10,
                                hessian_structure="full", refine="laplace").fit(X, yc)
        yield LaplaceRegressor(**SMALL, subset_of_weights="last_layer", hessian_structure="kron",
                               extrapolation_variance=0.5, sigma_noise=[1.0, 1.0]).fit(
            X, np.c_[yr, -yr])
        yield LaplaceRegressor(**SMALL, hessian_structure="diag").partial_fit(
            X[:12], yr[:12]).partial_fit(X[12:], yr[12:])


def test_version_2_names_every_type_field_function_and_class_by_the_schema(tmp_path):
    types, functions = set(), set()
    for i, est in enumerate(_fits()):
        path = skio.save(est, tmp_path / f"{i}.sklaplace")
        doc = _document(path)
        assert doc["version"] == 2
        for obj in _tagged(doc, "$object"):
            spec = TYPES[obj["$object"]]
            assert set(obj["state"]) <= set(spec.fields), obj["$object"]
            assert not any(field.startswith("_") for field in obj["state"])
            types.add(obj["$object"])
        functions |= {p["$partial"] for p in _tagged(doc, "$partial")}
        named = {c["$class"] for c in _tagged(doc, "$class")}
        assert {n for n in named if n.startswith("sklaplace")} <= set(classes())
        text = json.dumps(doc)  # no module path or attribute name of the package:
        assert "sklaplace._" not in text and "sklaplace_" not in text
        _assert_round_trip(est, _load(path))
    likelihoods = {name for name in TYPES if name.startswith("likelihood/")}
    assert set(TYPES) - likelihoods <= types
    assert functions == set(FUNCTIONS)


def _assert_round_trip(a, b):
    for key, value in _outputs(a, X).items():
        np.testing.assert_array_equal(_outputs(b, X)[key], value)
    assert a.log_evidence_ == b.log_evidence_


def test_the_schema_lists_each_attribute_once_and_no_name_of_the_code():
    for name, spec in TYPES.items():
        assert len(set(spec.fields.values())) == len(spec.fields), name
        assert not any(field.startswith("_") for field in spec.fields), name
        assert name == name.lower() and spec.cls.__name__ not in name


# ---------------------------------------------------------------- a rename in the code
def _renamed(attribute):
    return property(lambda self: self.__dict__[attribute],
                    lambda self, value: self.__dict__.__setitem__(attribute, value))


class RenamedEigenPosterior(EigenPosterior):
    """EigenPosterior as it would be with its prior-whitened factors renamed in the code:
    the methods read ``prior_scale``, ``whitened_basis`` and ``whitened_spectrum``."""

    _d_inv_sqrt = _renamed("prior_scale")
    _Q = _renamed("whitened_basis")
    _omega2 = _renamed("whitened_spectrum")


def test_a_renamed_attribute_changes_no_file(tmp_path, monkeypatch):
    name = "v1_classifier_full_layerwise"
    before = skio.save(_load(DATA / f"{name}.skl"), tmp_path / "before.sklaplace")
    spec = TYPES["posterior/eigen"]
    monkeypatch.setitem(TYPES, "posterior/eigen", Spec(
        RenamedEigenPosterior, {**spec.fields, "prior_std": "prior_scale",
                                "whitened_eigenvectors": "whitened_basis",
                                "whitened_eigenvalues": "whitened_spectrum"},
        caches=spec.caches))
    for path in [before, DATA / f"{name}.skl"]:  # a version-2 and a version-1 file
        est = _load(path)
        posterior = est.laplace_.posterior
        assert type(posterior) is RenamedEigenPosterior
        assert {"prior_scale", "whitened_basis", "whitened_spectrum"} <= set(vars(posterior))
        assert not {"_d_inv_sqrt", "_Q", "_omega2"} & set(vars(posterior))
        _assert_as_when_written(est, name)
        # written after the rename, the file is the one written before it
        after = skio.save(est, tmp_path / "after.sklaplace")
        assert _document(after) == _document(before)
