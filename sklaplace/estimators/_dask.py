"""Dask collections in and out: partitions of rows, reductions, lazy prediction.

Nothing here imports dask at module level (``import sklaplace`` does not import it): a
collection is recognized by its type's module (:func:`is_dask`) and dask is imported when
one arrives. The computations run on the active ``dask.distributed`` client (the default
client, as ``xgboost.dask`` and dask-ml do) or, without one, on dask's local scheduler;
the same graphs either way.

- :func:`row_parts`: the partitions of X and y (checked to match) as pairs, and
  :func:`read_pair`, one converted and checked where it is read;
- :func:`share`: an object sent once (scattered to every worker, or one graph key);
- :func:`tree_reduce`: per-partition pieces combined in a tree (``split_every``) whose
  shape and order of additions follow the partitions' order, never where or when a piece
  was computed;
- :func:`partition_task`: a per-partition task on one torch thread, so that its piece
  is the same bitwise on any worker or scheduler;
- :func:`lazy_on_dask`: a prediction method that maps over the partitions of a dask
  input (``map_blocks`` / ``map_partitions`` with explicit ``meta``) and returns dask arrays.
"""

import functools

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._laplace.threads import single_thread

#: Parts combined per node of a reduction tree.
SPLIT_EVERY = 8


def is_dask(X):
    """Whether ``X`` is a dask collection (array, DataFrame or Series)."""
    return (type(X).__module__.split(".", 1)[0] == "dask"
            and hasattr(X, "__dask_graph__"))


def active_client():
    """The ``dask.distributed`` client that ``dask.compute`` runs on here (the default
    client, unless ``dask.config.set(scheduler=...)`` names another scheduler), or
    None: dask's local scheduler."""
    from dask.base import get_scheduler

    client = getattr(get_scheduler(), "__self__", None)  # the bound Client.get
    return client if "Client" in type(client).__name__ else None


def share(obj):
    """``obj`` for the tasks of a graph, sent once: scattered to every worker of the
    active client, else one key of the graph."""
    client = active_client()
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    import dask

    return dask.delayed(obj, pure=False)


def compute(*collections):
    """``dask.compute``; a computation that lost its workers (dask's retries exhausted)
    raises a ``RuntimeError`` that says so."""
    import dask

    try:
        return dask.compute(*collections)
    except Exception as error:
        if type(error).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError"):
            raise RuntimeError(
                f"The dask computation failed: {error!r}. Workers were lost and dask's retries "
                "(distributed.scheduler.allowed-failures) are exhausted, so the estimator was "
                "left unchanged; check the workers' memory limits and logs, then fit again."
            ) from error
        raise


def _is_frame(X):
    return hasattr(X, "npartitions") and not hasattr(X, "chunks")


def check_collections(X, y):
    """A ``ValueError`` unless ``X`` and ``y`` are both dask collections."""
    if not is_dask(X) or not is_dask(y):
        raise ValueError(
            "X and y must both be dask collections (dask arrays or DataFrames partitioned by "
            f"rows) or both in memory; got X of type {type(X).__name__} and y of type "
            f"{type(y).__name__}.")


def empty_like(collection):
    """An in-memory container of no rows with the columns and dtypes of ``collection``."""
    if _is_frame(collection):
        return collection._meta  # dask's empty pandas object of the same columns and dtypes
    return np.empty((0, *collection.shape[1:]), dtype=collection.dtype)


def row_parts(X, y):
    """(list of (X part, y part) pairs of delayed partitions, as they are, n_features) of
    a dask array or DataFrame ``X`` and dask ``y`` partitioned by rows alike (a
    ``ValueError`` otherwise); :func:`read_pair` reads one."""
    check_collections(X, y)
    if _is_frame(X):
        n_features = len(X.columns)
        x_parts = X.to_delayed()
    else:
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got {X.ndim} dimensions.")
        n_features = X.shape[1]
        X = X.rechunk({1: -1})
        x_parts = list(X.to_delayed()[:, 0])
    y_parts = y.to_delayed() if _is_frame(y) else list(_column_chunks(y))
    if len(y_parts) != len(x_parts) or not _same_rows(X, y):
        raise ValueError(
            f"X and y must be partitioned alike (the same rows in each partition); X has "
            f"{len(x_parts)} partitions of {_sizes(X)} rows and y {len(y_parts)} partitions of "
            f"{_sizes(y)} rows: rechunk or repartition one like the other.")
    return list(zip(x_parts, y_parts)), n_features


def _column_chunks(y):
    return y.rechunk({1: -1}).to_delayed()[:, 0] if y.ndim == 2 else y.to_delayed()


def _sizes(X):
    chunks = getattr(X, "chunks", None)
    if chunks is not None:
        return tuple(chunks[0])
    divisions = getattr(X, "divisions", None)
    return "unknown" if divisions is None else f"index divisions {tuple(divisions)}"


def _same_rows(X, y):
    sx, sy = getattr(X, "chunks", None), getattr(y, "chunks", None)
    if sx is not None and sy is not None and not any(np.isnan(sx[0])) \
            and not any(np.isnan(sy[0])):
        return tuple(sx[0]) == tuple(sy[0])
    dx, dy = getattr(X, "divisions", None), getattr(y, "divisions", None)
    if dx is not None and dy is not None and None not in dx and None not in dy:
        return tuple(dx) == tuple(dy)
    return True  # unknown sizes: each part checks its own rows (read_pair)


def read_pair(pair, check):
    """A partition's (X part, y part) as ``check(X part, y part)`` returns them, once its
    X and y are known to hold the same rows."""
    X, y = pair
    if len(X) != len(y):
        raise ValueError(
            f"X and y must be partitioned alike: a partition of X has {len(X)} rows and the "
            f"matching partition of y {len(y)}; rechunk or repartition one like the other.")
    return check(X, y)


def partition_task(function):
    """Decorate the function of a per-partition task: it runs on one torch thread
    (:func:`._laplace.threads.single_thread`), so that the piece it returns does not
    depend on the worker, the scheduler or their thread settings."""

    @functools.wraps(function)
    def task(*args, **kwargs):
        with single_thread():
            return function(*args, **kwargs)

    return task


def tree_reduce(pieces, combine, split_every=SPLIT_EVERY):
    """One delayed value: ``combine`` applied up a tree of the delayed ``pieces``
    (``split_every`` children per node, left to right in the pieces' order): the same
    additions in the same order wherever and whenever each piece is computed."""
    import dask

    level = list(pieces)
    while len(level) > 1:
        level = [dask.delayed(_combine_all)(combine, *level[i:i + split_every])
                 for i in range(0, len(level), split_every)]
    return level[0]


def _combine_all(combine, *pieces):
    return functools.reduce(combine, pieces)


# ------------------------------------------------------------------ lazy prediction
def lazy_on_dask(method):
    """Decorate a prediction method: on a dask input, a lazy result (:func:`lazy_predict`)."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if is_dask(X):
            return lazy_predict(self, method.__name__, X, args, kwargs)
        return method(self, X, *args, **kwargs)

    return wrapper


def refuse_dask(method):
    """Decorate a method whose result holds NumPy arrays of all rows: a clear error on
    dask input."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if is_dask(X):
            raise ValueError(
                f"{method.__name__} returns objects holding NumPy arrays of all rows and does "
                "not take dask input; use predict, predict_proba, predict_log_proba or "
                "predict(return_std=True), which return dask arrays, or compute a part of X "
                "first.")
        return method(self, X, *args, **kwargs)

    return wrapper


def lazy_predict(estimator, name, X, args=(), kwargs=None):
    """``estimator.<name>(X, *args, **kwargs)`` as dask arrays over the partitions of
    ``X``: the fitted estimator is shared once (:func:`share`) and each partition predicts
    in memory; the output's shape and dtype (``meta``) come from one probe row."""
    kwargs = dict(kwargs or {})
    check_is_fitted(estimator)
    if kwargs.get("return_cov"):
        raise ValueError("return_cov=True couples all rows (an n × n covariance) and does not "
                         "take dask input; use return_std=True.")
    if kwargs.get("return_mean_grad") or kwargs.get("return_std_grad"):
        raise ValueError("return_mean_grad / return_std_grad do not take dask input; "
                         "compute the rows first (acquisition optimizers ask for one).")
    method = getattr(estimator, name)
    outs = method(_probe(estimator), *args, **kwargs)
    several = isinstance(outs, tuple)
    outs = outs if several else (outs,)
    widths = [int(np.prod(o.shape[1:])) for o in outs]
    dtype = np.result_type(*[o.dtype for o in outs]) if several else outs[0].dtype
    shape = (sum(widths),) if several else outs[0].shape[1:]
    model = share(estimator)
    meta = np.empty((0, *shape), dtype=dtype)
    task = functools.partial(_predict_part, name=name, args=args, kwargs=kwargs,
                             several=several, names=getattr(estimator, "feature_names_in_", None))
    if _is_frame(X):
        result = X.map_partitions(task, model, meta=meta)
    else:
        X = X.rechunk({1: -1})
        result = X.map_blocks(task, model, dtype=dtype, meta=meta,
                              chunks=(X.chunks[0], *[(s,) for s in shape]),
                              **({"drop_axis": 1} if not shape else {}))
    if not several:
        return result
    bounds = np.cumsum([0, *widths])
    return tuple(_unflatten(result[:, a:b], o) for a, b, o in zip(bounds, bounds[1:], outs))


def _unflatten(part, probe):
    return part[:, 0] if probe.ndim == 1 else part.reshape((-1, *probe.shape[1:]))


def _probe(estimator):
    row = np.zeros((1, estimator.n_features_in_))
    names = getattr(estimator, "feature_names_in_", None)
    if names is None:
        return row
    import pandas as pd

    return pd.DataFrame(row, columns=names)


@partition_task
def _predict_part(X, model, *, name, args, kwargs, several, names):
    if names is not None and not hasattr(X, "columns"):
        import pandas as pd

        X = pd.DataFrame(np.asarray(X), columns=names)
    out = getattr(model, name)(X, *args, **kwargs)
    if several:
        return np.concatenate([o.reshape(len(o), -1) for o in out], axis=1)
    return out
