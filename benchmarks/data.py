"""Offline loaders for the UCI benchmark sets and their split protocols.

Two families of data sets are used by the papers the benchmarks reproduce:

* **UCI regression** (marginal-likelihood paper, Table C2): the eight sets of the
  Hernández-Lobato & Adams (2015) protocol, each with 20 fixed random 90/10
  train/test splits shipped as index files.  See :func:`load_uci_regression`.
* **UCI classification** (GLM-predictive paper, Tables 1 / B1-B3): small
  multi-class sets, split into 10 random stratified 70/15/15
  train/validation/test partitions.  See :func:`load_uci_classification` and
  :func:`classification_splits`.

Nothing is downloaded.  The data live in a directory with the layout::

    <data_dir>/
        uci_regression/<set>/data.txt, index_features.txt, index_target.txt,
                             index_train_K.txt, index_test_K.txt, n_splits.txt
        uci_classification/<set>.csv

which :func:`default_data_dir` locates, or which the user passes as
``data_dir``.  Every loader returns NumPy arrays.
"""

import csv
import operator
import os
from pathlib import Path
from types import MappingProxyType

import numpy as np
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.utils import check_random_state

__all__ = [
    "UCI_CLASSIFICATION",
    "UCI_REGRESSION",
    "UCI_REGRESSION_DIRS",
    "classification_splits",
    "default_data_dir",
    "load_uci_classification",
    "load_uci_regression",
    "make_waveform",
    "n_splits_uci_regression",
]

#: Environment variable naming the data root.
DATA_ENV_VAR = "SKLAPLACE_DATA"

#: Short names of the UCI regression sets, in the order of Table C2.
UCI_REGRESSION = ("boston", "concrete", "energy", "kin8nm", "naval", "power", "wine", "yacht")

#: Directory (under ``<data_dir>/uci_regression``) of each regression set.
UCI_REGRESSION_DIRS = MappingProxyType(
    {
        "boston": "bostonHousing",
        "concrete": "concrete",
        "energy": "energy",
        "kin8nm": "kin8nm",
        "naval": "naval-propulsion-plant",
        "power": "power-plant",
        "wine": "wine-quality-red",
        "yacht": "yacht",
    }
)

#: Names accepted by :func:`load_uci_classification`.
UCI_CLASSIFICATION = (
    "glass",
    "ionosphere",
    "vehicle",
    "satellite",
    "breast_cancer",
    "breast_cancer_wdbc",
    "digits",
    "waveform",
)

# Sets read from ``<data_dir>/uci_classification/<name>.csv``.
_CSV_CLASSIFICATION = ("glass", "ionosphere", "vehicle", "satellite", "breast_cancer")


# --------------------------------------------------------------------------- data root


def _candidate_data_dirs():
    """Fallback locations of the data root, in order of preference."""
    return [
        Path(__file__).resolve().parents[2] / "shared" / "data",
        Path.cwd() / ".." / "shared" / "data",
    ]


def default_data_dir():
    """Locate the root directory of the offline benchmark data.

    Returns
    -------
    path : pathlib.Path
        The directory named by the environment variable ``SKLAPLACE_DATA`` if
        it is set; otherwise the first existing one of
        ``<repository root>/../shared/data`` (located relative to this file)
        and ``<current directory>/../shared/data``.

    Raises
    ------
    FileNotFoundError
        If ``SKLAPLACE_DATA`` names a directory that does not exist, or if it
        is unset and none of the fallback directories exists.
    """
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"{DATA_ENV_VAR}={env!r} is not a directory. Point it at the data root "
                "(the directory holding uci_regression/ and uci_classification/)."
            )
        return path
    candidates = _candidate_data_dirs()
    for path in candidates:
        if path.is_dir():
            return path.resolve()
    tried = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"Benchmark data directory not found (tried {tried}). Set the environment "
        f"variable {DATA_ENV_VAR} to the data root (the directory holding uci_regression/ "
        "and uci_classification/) or pass data_dir=... to the loader."
    )


def _resolve_root(data_dir):
    return default_data_dir() if data_dir is None else Path(data_dir).expanduser()


def _check_name(name, known, kind):
    if not isinstance(name, str) or name not in known:
        raise ValueError(f"Unknown {kind} data set {name!r}; known names: {', '.join(known)}.")


# --------------------------------------------------------------------------- regression


def _regression_dir(name, data_dir):
    _check_name(name, UCI_REGRESSION, "UCI regression")
    root = _resolve_root(data_dir)
    sub = UCI_REGRESSION_DIRS[name]
    # Accept the data root (documented) and, for convenience, uci_regression/ itself.
    for path in (root / "uci_regression" / sub, root / sub):
        if path.is_dir():
            return path
    raise FileNotFoundError(
        f"No directory for {name!r} under {root} (expected {root / 'uci_regression' / sub})."
    )


def _read_indices(path, n_max):
    """Read a file of 0-based integer indices, one per line (may be written as floats)."""
    values = np.loadtxt(path, dtype=np.float64, ndmin=1)
    idx = values.astype(np.intp)
    if not np.array_equal(idx, values):
        raise ValueError(f"{path} holds non-integer indices.")
    if idx.size and (idx.min() < 0 or idx.max() >= n_max):
        raise ValueError(f"{path} holds indices outside [0, {n_max}).")
    return idx


def n_splits_uci_regression(name, data_dir=None):
    """Number of train/test splits shipped with a UCI regression set.

    Parameters
    ----------
    name : str
        One of :data:`UCI_REGRESSION`.
    data_dir : str or path-like, optional
        Data root (holding ``uci_regression/``); defaults to
        :func:`default_data_dir`.

    Returns
    -------
    n_splits : int
        The value of ``n_splits.txt`` (20 for all eight sets of the protocol).
    """
    return _read_n_splits(_regression_dir(name, data_dir))


def _read_n_splits(path):
    return int((path / "n_splits.txt").read_text().split()[0])


def load_uci_regression(name, split, *, data_dir=None):
    """Load one train/test split of a UCI regression set (Hernández-Lobato & Adams, 2015).

    The files follow the protocol's distribution: ``data.txt`` is a
    whitespace-separated matrix with one row per sample;
    ``index_features.txt`` / ``index_target.txt`` list the 0-based columns of
    the inputs and of the target; ``index_train_K.txt`` / ``index_test_K.txt``
    list the 0-based rows of split ``K`` (one integer per line).  For
    ``energy`` the target column is the one named in ``index_target.txt``
    (heating load); for ``naval`` column 17 (turbine decay) is neither feature
    nor target.  No standardisation is applied.

    Parameters
    ----------
    name : str
        One of :data:`UCI_REGRESSION`: ``"boston"``, ``"concrete"``,
        ``"energy"``, ``"kin8nm"``, ``"naval"``, ``"power"``, ``"wine"``,
        ``"yacht"``.
    split : int
        Split number, ``0 <= split < n_splits_uci_regression(name)``.
    data_dir : str or path-like, optional
        Data root (holding ``uci_regression/``; the ``uci_regression``
        directory itself is accepted too); defaults to
        :func:`default_data_dir`.

    Returns
    -------
    X_train : ndarray of shape (n_train, n_features), dtype float64
    y_train : ndarray of shape (n_train,), dtype float64
    X_test : ndarray of shape (n_test, n_features), dtype float64
    y_test : ndarray of shape (n_test,), dtype float64

    Raises
    ------
    ValueError
        If ``name`` is unknown or ``split`` is out of range.
    FileNotFoundError
        If the data directory cannot be found.
    """
    path = _regression_dir(name, data_dir)
    try:
        split = operator.index(split)
    except TypeError:
        raise ValueError(f"split must be an integer, got {split!r}.") from None
    n_splits = _read_n_splits(path)
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in [0, {n_splits}) for {name!r}, got {split}.")

    data = np.loadtxt(path / "data.txt", dtype=np.float64, ndmin=2)
    n_rows, n_cols = data.shape
    features = _read_indices(path / "index_features.txt", n_cols)
    target = _read_indices(path / "index_target.txt", n_cols)
    if target.size != 1:
        raise ValueError(f"{path / 'index_target.txt'} must name exactly one column.")
    train = _read_indices(path / f"index_train_{split}.txt", n_rows)
    test = _read_indices(path / f"index_test_{split}.txt", n_rows)

    X = data[:, features]
    y = data[:, target[0]]
    return (
        np.ascontiguousarray(X[train]),
        np.ascontiguousarray(y[train]),
        np.ascontiguousarray(X[test]),
        np.ascontiguousarray(y[test]),
    )


# --------------------------------------------------------------------------- classification


def _read_classification_csv(path):
    """Read a CSV with a header whose last column is the class label."""
    with open(path, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row]
    header, body = rows[0], rows[1:]
    if header[-1] != "target":
        raise ValueError(f"{path}: the last column must be 'target', got {header[-1]!r}.")
    X = np.array([row[:-1] for row in body], dtype=np.float64)
    labels = [row[-1].strip() for row in body]
    try:
        y = np.array([int(v) for v in labels], dtype=np.int64)
    except ValueError:
        y = np.array(labels, dtype=object)
    return X, y


def load_uci_classification(name, *, data_dir=None, random_state=0):
    """Load a classification set of the GLM-predictive paper's UCI benchmark.

    ============================  ===========  ====  =========================================
    name                          N x D        C     source
    ============================  ===========  ====  =========================================
    ``"glass"``                   214 x 9      6     ``uci_classification/glass.csv``
    ``"ionosphere"``              351 x 34     2     ``uci_classification/ionosphere.csv``
    ``"vehicle"``                 846 x 18     4     ``uci_classification/vehicle.csv``
    ``"satellite"``               6435 x 36    6     ``uci_classification/satellite.csv``
    ``"breast_cancer"``           683 x 10     2     ``uci_classification/breast_cancer.csv``
    ``"breast_cancer_wdbc"``      569 x 30     2     :func:`sklearn.datasets.load_breast_cancer`
    ``"digits"``                  1797 x 64    10    :func:`sklearn.datasets.load_digits`
    ``"waveform"``                5000 x 21    3     :func:`make_waveform` (generated)
    ============================  ===========  ====  =========================================

    ``"breast_cancer"`` is the original Wisconsin data with incomplete rows
    dropped.  Its first column ``Id`` (the sample code number) is **kept as a
    feature**, as in the LIBSVM copy the paper used; drop ``X[:, 0]`` for the
    9 clinical features only: the paper's ``cancer`` row (its code loads LIBSVM's
    breast-cancer_scale, 683 x 10; Table B1's N = 569 is a misprint).
    ``"breast_cancer_wdbc"`` is the diagnostic (WDBC) set, another data set.
    ``"waveform"`` has no offline copy and is drawn from the generator: same
    distribution as the UCI file, not the same rows.

    Parameters
    ----------
    name : str
        One of :data:`UCI_CLASSIFICATION`.
    data_dir : str or path-like, optional
        Data root (holding ``uci_classification/``; that directory itself is
        accepted too); defaults to :func:`default_data_dir`.  Only read for the
        CSV sets.
    random_state : int, RandomState instance or None, default=0
        Seed of the waveform generator; ignored by the other sets.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), dtype float64
    y : ndarray of shape (n_samples,)
        Class labels as stored: ``int64`` when every label is an integer
        (glass, digits, waveform, breast_cancer_wdbc), otherwise an ``object``
        array of ``str`` (e.g. ``"benign"`` / ``"malignant"``).

    Raises
    ------
    ValueError
        If ``name`` is unknown.
    FileNotFoundError
        If a CSV set is requested and the data directory cannot be found.
    """
    _check_name(name, UCI_CLASSIFICATION, "UCI classification")
    if name == "waveform":
        return make_waveform(n_samples=5000, random_state=random_state)
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
    if name == "breast_cancer_wdbc":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)

    root = _resolve_root(data_dir)
    for path in (root / "uci_classification" / f"{name}.csv", root / f"{name}.csv"):
        if path.is_file():
            return _read_classification_csv(path)
    raise FileNotFoundError(
        f"No file for {name!r} under {root} "
        f"(expected {root / 'uci_classification' / (name + '.csv')})."
    )


# Base waves of the UCI "Waveform Database Generator (Version 1)" (waveform.c),
# triangles of height 6 peaking at positions 7, 15 and 11 (1-based) of 21.
_WAVEFORM_BASES = np.maximum(
    6.0 - np.abs(np.arange(1, 22)[None, :] - np.array([[7], [15], [11]])), 0.0
)
# Class k mixes the two base waves _WAVEFORM_PAIRS[k].
_WAVEFORM_PAIRS = np.array([[0, 1], [0, 2], [1, 2]])


def make_waveform(n_samples=5000, *, noise=1.0, random_state=None):
    """Generate Breiman's waveform data (Breiman et al., 1984).

    Three triangular base waves ``h1, h2, h3`` on 21 positions have height 6
    and peak at positions 7, 15 and 11 (1-based), as in the UCI "Waveform
    Database Generator (Version 1)".  A sample of class ``k`` (uniform over
    {0, 1, 2}) is::

        x = u * h_a + (1 - u) * h_b + noise * eps,   u ~ U(0, 1),  eps ~ N(0, I_21)

    with ``(a, b) = (1, 2), (1, 3), (2, 3)`` for ``k = 0, 1, 2``.  The UCI
    file ``waveform.data`` (5000 rows, 21 attributes, classes 0/1/2) was
    drawn from this generator; this function gives the same distribution,
    not the same rows.  The base waves are numbered as in the UCI generator
    (the CART book lists the same three waves in another order, which only
    permutes the class labels).  The Bayes error is about 14%.

    Parameters
    ----------
    n_samples : int, default=5000
        Number of samples.
    noise : float, default=1.0
        Standard deviation of the Gaussian noise added to every attribute.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible draws.

    Returns
    -------
    X : ndarray of shape (n_samples, 21), dtype float64
    y : ndarray of shape (n_samples,), dtype int64
        Class labels in {0, 1, 2}.
    """
    n_samples = operator.index(n_samples)
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}.")
    if not noise >= 0:
        raise ValueError(f"noise must be non-negative, got {noise}.")
    rng = check_random_state(random_state)
    y = rng.randint(3, size=n_samples).astype(np.int64)
    u = rng.uniform(size=(n_samples, 1))
    a, b = _WAVEFORM_PAIRS[y, 0], _WAVEFORM_PAIRS[y, 1]
    X = u * _WAVEFORM_BASES[a] + (1.0 - u) * _WAVEFORM_BASES[b]
    X += noise * rng.standard_normal(X.shape)
    return X, y


# --------------------------------------------------------------------------- splits


def classification_splits(y, n_splits=10, *, random_state=0):
    """Stratified random 70/15/15 train/validation/test splits (GLM-predictive protocol).

    Each split first draws a stratified test set of ``round(0.15 * n)``
    samples, then a stratified validation set of ``round(0.15 * n)`` samples
    from the rest; the remaining ~70% is the training set.  Splits are drawn
    independently of each other.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class labels used for stratification.
    n_splits : int, default=10
        Number of splits.
    random_state : int, RandomState instance or None, default=0
        Seed; an int gives the same splits on every call.

    Yields
    ------
    train_idx, val_idx, test_idx : ndarray of int
        Sorted, disjoint row indices into ``y`` covering all rows.

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, ``n_splits < 1``, or a class is too small to
        stratify (raised by scikit-learn when iterating).
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}.")
    n_splits = operator.index(n_splits)
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}.")
    n = y.shape[0]
    n_hold = int(round(0.15 * n))
    if n_hold < 1 or n - 2 * n_hold < 1:
        raise ValueError(f"Too few samples ({n}) for a 70/15/15 split.")
    rng = check_random_state(random_state)
    seeds = rng.randint(np.iinfo(np.int32).max, size=(n_splits, 2))
    return _iter_splits(y, n_hold, seeds)


def _iter_splits(y, n_hold, seeds):
    dummy = np.zeros((y.shape[0], 1))
    for seed_test, seed_val in seeds:
        sss = StratifiedShuffleSplit(n_splits=1, test_size=n_hold, random_state=seed_test)
        rest, test = next(sss.split(dummy, y))
        sss = StratifiedShuffleSplit(n_splits=1, test_size=n_hold, random_state=seed_val)
        tr, va = next(sss.split(dummy[rest], y[rest]))
        yield np.sort(rest[tr]), np.sort(rest[va]), np.sort(test)
