"""Tests of the offline benchmark data loaders (benchmarks.data)."""

from collections import Counter

import numpy as np
import pytest

from benchmarks import data as bd
from benchmarks.data import (
    UCI_CLASSIFICATION,
    UCI_REGRESSION,
    UCI_REGRESSION_DIRS,
    classification_splits,
    default_data_dir,
    load_uci_classification,
    load_uci_regression,
    make_waveform,
    n_splits_uci_regression,
)




# (rows, features) of every regression set.
REGRESSION_SHAPES = {
    "boston": (506, 13),
    "concrete": (1030, 8),
    "energy": (768, 8),
    "kin8nm": (8192, 8),
    "naval": (11934, 16),
    "power": (9568, 4),
    "wine": (1599, 11),
    "yacht": (308, 6),
}

# (rows, features, classes) of every classification set (data README / sklearn).
CLASSIFICATION_SHAPES = {
    "glass": (214, 9, 6),
    "ionosphere": (351, 34, 2),
    "vehicle": (846, 18, 4),
    "satellite": (6435, 36, 6),
    "breast_cancer": (683, 10, 2),
    "breast_cancer_wdbc": (569, 30, 2),
    "digits": (1797, 64, 10),
    "waveform": (5000, 21, 3),
}


def _split_indices(data_dir, name, split):
    path = data_dir / "uci_regression" / UCI_REGRESSION_DIRS[name]
    train = np.loadtxt(path / f"index_train_{split}.txt", dtype=int, ndmin=1)
    test = np.loadtxt(path / f"index_test_{split}.txt", dtype=int, ndmin=1)
    return path, train, test


# --------------------------------------------------------------------------- data root


def test_default_data_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SKLAPLACE_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.setenv("SKLAPLACE_DATA", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="SKLAPLACE_DATA"):
        default_data_dir()


def test_default_data_dir_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("SKLAPLACE_DATA", raising=False)
    monkeypatch.setattr(bd, "_candidate_data_dirs", lambda: [tmp_path / "nope"])
    with pytest.raises(FileNotFoundError, match="SKLAPLACE_DATA.*data_dir"):
        default_data_dir()
    with pytest.raises(FileNotFoundError):
        load_uci_regression("boston", 0)


# --------------------------------------------------------------------------- regression


def test_regression_names():
    assert set(UCI_REGRESSION) == set(UCI_REGRESSION_DIRS)
    assert len(UCI_REGRESSION) == 8


@pytest.mark.parametrize("name", UCI_REGRESSION)
def test_regression_split0(data_dir, name):
    n_rows, n_features = REGRESSION_SHAPES[name]
    X_tr, y_tr, X_te, y_te = load_uci_regression(name, 0, data_dir=data_dir)
    for a in (X_tr, y_tr, X_te, y_te):
        assert isinstance(a, np.ndarray) and a.dtype == np.float64
        assert np.all(np.isfinite(a))
    assert X_tr.shape == (y_tr.shape[0], n_features) and y_tr.ndim == 1
    assert X_te.shape == (y_te.shape[0], n_features) and y_te.ndim == 1
    assert len(y_tr) + len(y_te) == n_rows
    assert len(y_te) == pytest.approx(0.1 * n_rows, abs=1)

    # Rows are exactly those of the index files, which are disjoint and cover the data.
    path, train, test = _split_indices(data_dir, name, 0)
    assert len(np.intersect1d(train, test)) == 0
    assert np.array_equal(np.union1d(train, test), np.arange(n_rows))
    raw = np.loadtxt(path / "data.txt")
    features = np.loadtxt(path / "index_features.txt", dtype=int, ndmin=1)
    target = int(np.loadtxt(path / "index_target.txt"))
    np.testing.assert_array_equal(X_tr, raw[train][:, features])
    np.testing.assert_array_equal(y_te, raw[test, target])
    assert n_splits_uci_regression(name, data_dir=data_dir) == 20


def test_boston_sizes(data_dir):
    X_tr, y_tr, X_te, y_te = load_uci_regression("boston", 0, data_dir=data_dir)
    assert X_tr.shape == (455, 13) and X_te.shape == (51, 13)
    # First row of the data file: CRIM 0.00632, MEDV 24.0.
    _, train, test = _split_indices(data_dir, "boston", 0)
    X, y, idx = (X_tr, y_tr, train) if 0 in train else (X_te, y_te, test)
    row = int(np.flatnonzero(idx == 0)[0])
    assert X[row, 0] == pytest.approx(0.00632) and y[row] == pytest.approx(24.0)
    X_last, _, _, _ = load_uci_regression("boston", 19, data_dir=data_dir)
    assert X_last.shape[1] == 13


def test_energy_target(data_dir):
    path = data_dir / "uci_regression" / "energy"
    target = int(np.loadtxt(path / "index_target.txt"))
    raw = np.loadtxt(path / "data.txt")
    _, train, test = _split_indices(data_dir, "energy", 3)
    X_tr, y_tr, X_te, y_te = load_uci_regression("energy", 3, data_dir=data_dir)
    np.testing.assert_array_equal(y_tr, raw[train, target])
    np.testing.assert_array_equal(y_te, raw[test, target])
    # The target column is not among the features.
    assert not np.any(np.all(X_tr == y_tr[:, None], axis=0))


def test_regression_data_dir_variants(data_dir, monkeypatch):
    ref = load_uci_regression("yacht", 1, data_dir=data_dir)
    # The uci_regression directory itself and a str path are accepted.
    alt = load_uci_regression("yacht", 1, data_dir=str(data_dir / "uci_regression"))
    # The environment variable is honoured.
    monkeypatch.setenv("SKLAPLACE_DATA", str(data_dir))
    env = load_uci_regression("yacht", 1)
    for a, b, c in zip(ref, alt, env):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_regression_errors(data_dir):
    with pytest.raises(ValueError, match="known names: boston, concrete"):
        load_uci_regression("bostonHousing", 0, data_dir=data_dir)
    with pytest.raises(ValueError, match="known names"):
        n_splits_uci_regression("nope", data_dir=data_dir)
    for bad in (20, -1):
        with pytest.raises(ValueError, match=r"split must be in \[0, 20\)"):
            load_uci_regression("yacht", bad, data_dir=data_dir)
    with pytest.raises(ValueError, match="integer"):
        load_uci_regression("yacht", 1.5, data_dir=data_dir)
    # A bad name fails before the data root is looked up.
    with pytest.raises(ValueError):
        load_uci_regression("nope", 0, data_dir="/nonexistent")
    with pytest.raises(FileNotFoundError):
        load_uci_regression("yacht", 0, data_dir="/nonexistent")


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize("name", UCI_CLASSIFICATION)
def test_classification_shapes(name, request):
    n, d, c = CLASSIFICATION_SHAPES[name]
    kwargs = {}
    if name in ("glass", "ionosphere", "vehicle", "satellite", "breast_cancer"):
        kwargs["data_dir"] = request.getfixturevalue("data_dir")
    X, y = load_uci_classification(name, **kwargs)
    assert isinstance(X, np.ndarray) and X.dtype == np.float64 and X.shape == (n, d)
    assert isinstance(y, np.ndarray) and y.shape == (n,)
    assert np.all(np.isfinite(X))
    assert len(np.unique(y)) == c


def test_classification_labels(data_dir):
    X, y = load_uci_classification("glass", data_dir=data_dir)
    assert y.dtype == np.int64 and set(np.unique(y)) == {1, 2, 3, 5, 6, 7}
    X, y = load_uci_classification("breast_cancer", data_dir=data_dir)
    assert y.dtype == object and Counter(y) == {"benign": 444, "malignant": 239}
    # The Id column (sample code number) is kept as the first feature.
    assert X[0, 0] == 1000025 and X[:, 0].max() > 1e5
    assert X[:, 1:].min() >= 1 and X[:, 1:].max() <= 10
    _, y = load_uci_classification("satellite", data_dir=data_dir)
    assert "grey soil" in set(y)
    X, _ = load_uci_classification("ionosphere", data_dir=data_dir)
    assert np.all(X[:, 1] == 0)  # V2 is constant


def test_classification_errors():
    with pytest.raises(ValueError, match="known names: glass, ionosphere"):
        load_uci_classification("australian")
    with pytest.raises(FileNotFoundError):
        load_uci_classification("glass", data_dir="/nonexistent")


def test_waveform():
    X, y = make_waveform(n_samples=3000, random_state=0)
    assert X.shape == (3000, 21) and X.dtype == np.float64
    assert y.dtype == np.int64 and set(np.unique(y)) == {0, 1, 2}
    assert min(np.bincount(y)) > 900  # classes equiprobable
    i = np.arange(1, 22)
    h = [np.maximum(6 - np.abs(i - p), 0) for p in (7, 15, 11)]
    expected = [(h[0] + h[1]) / 2, (h[0] + h[2]) / 2, (h[1] + h[2]) / 2]
    means = [X[y == k].mean(axis=0) for k in range(3)]
    for k in range(3):
        np.testing.assert_allclose(means[k], expected[k], atol=0.35)
        for j in range(k):
            assert np.abs(means[k] - means[j]).max() > 2
    # Ends of the signal carry only N(0, 1) noise.
    assert abs(X[:, 0].mean()) < 0.1 and X[:, 0].std() == pytest.approx(1.0, abs=0.1)

    X2, y2 = make_waveform(n_samples=3000, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    X3, _ = make_waveform(n_samples=3000, random_state=1)
    assert not np.array_equal(X, X3)
    X0, y0 = make_waveform(n_samples=50, noise=0.0, random_state=2)
    assert X0.min() >= 0 and X0.max() <= 6
    Xw, yw = load_uci_classification("waveform", random_state=5)
    assert Xw.shape == (5000, 21)
    np.testing.assert_array_equal(Xw, make_waveform(5000, random_state=5)[0])
    with pytest.raises(ValueError):
        make_waveform(0)
    with pytest.raises(ValueError):
        make_waveform(10, noise=-1.0)


# --------------------------------------------------------------------------- splits


def _glass_like_labels():
    # Class sizes of glass (214 rows, two small classes), as strings.
    sizes = {"1": 70, "2": 76, "3": 17, "5": 13, "6": 9, "7": 29}
    return np.array([k for k, v in sizes.items() for _ in range(v)], dtype=object)


@pytest.mark.parametrize("labels", ["glass_like", "digits"])
def test_classification_splits(labels):
    if labels == "digits":
        _, y = load_uci_classification("digits")
    else:
        y = _glass_like_labels()
    n = len(y)
    splits = list(classification_splits(y, n_splits=10, random_state=0))
    assert len(splits) == 10
    classes, counts = np.unique(y, return_counts=True)
    for train, val, test in splits:
        assert len(val) == len(test) == round(0.15 * n)
        assert len(train) / n == pytest.approx(0.70, abs=0.01)
        allidx = np.concatenate([train, val, test])
        assert len(allidx) == n and np.array_equal(np.sort(allidx), np.arange(n))
        for part, frac in ((train, 0.70), (val, 0.15), (test, 0.15)):
            got = Counter(y[part])
            for c, m in zip(classes, counts):
                assert abs(got[c] - frac * m) <= 1.5, (c, got[c], frac * m)
    # Deterministic for a seed; different splits and seeds differ.
    again = list(classification_splits(y, n_splits=10, random_state=0))
    for s, t in zip(splits, again):
        for a, b in zip(s, t):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(splits[0][2], splits[1][2])
    other = next(iter(classification_splits(y, random_state=1)))
    assert not np.array_equal(splits[0][2], other[2])


def test_classification_splits_errors():
    with pytest.raises(ValueError, match="1-D"):
        classification_splits(np.zeros((10, 2)))
    with pytest.raises(ValueError, match="n_splits"):
        classification_splits(np.arange(100) % 2, n_splits=0)
