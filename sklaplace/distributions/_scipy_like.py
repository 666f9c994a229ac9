"""What makes the predictive distributions feel like frozen scipy distributions.

:class:`_RowsMixin` gives every distribution of :mod:`sklaplace.distributions` ``len`` and row
selection (``dist[:10]``, ``dist[mask]``, ``dist[[0, 5]]``); :class:`_NormalScipyMixin` gives
:class:`~sklaplace.distributions.NormalPrediction` the methods of a frozen
``scipy.stats.norm`` by delegation to :meth:`to_scipy`.
"""

import dataclasses
from numbers import Integral

import numpy as np
from scipy import stats


class _RowsMixin:
    """``len`` and row selection for frozen dataclasses whose arrays have rows first.

    ``_ROW_FIELDS`` names the fields indexed on their first axis, ``_DRAW_FIELDS`` those of
    shape (n_draws, n_rows, ...) indexed on their second axis (None values are kept).
    """

    _ROW_FIELDS = ()
    _DRAW_FIELDS = ()

    def _n_rows(self):
        first = getattr(self, self._ROW_FIELDS[0])
        if np.ndim(first) == 0:
            raise TypeError(f"len() of a {type(self).__name__} without rows (scalar mean).")
        return np.shape(first)[0]

    def __len__(self):
        return self._n_rows()

    def __getitem__(self, key):
        """Rows ``key`` as a distribution of the same type (an integer keeps the row axis)."""
        if isinstance(key, tuple):
            raise IndexError(
                f"{type(self).__name__} selects rows only (dist[rows]); got a tuple key {key!r}."
            )
        n_rows = self._n_rows()
        if isinstance(key, (Integral, np.integer)) and not isinstance(key, (bool, np.bool_)):
            key = int(key)
            if not -n_rows <= key < n_rows:
                raise IndexError(f"row {key} is out of range for {n_rows} rows.")
            rows = np.array([key % n_rows])
        else:
            key_array = None if isinstance(key, slice) else np.asarray(key)
            if key_array is not None and not (
                key_array.ndim == 1 and key_array.dtype.kind in "biu"
                or key_array.size == 0 and key_array.ndim == 1
            ):
                raise IndexError(
                    "rows are selected by an integer, a slice, a boolean mask of length "
                    f"{n_rows} or an array of integers; got {key!r}."
                )
            if key_array is not None and key_array.dtype.kind not in "biu":
                key_array = key_array.astype(int)  # an empty list
            rows = np.arange(n_rows)[key if key_array is None else key_array]
        changes = {name: getattr(self, name)[rows] for name in self._ROW_FIELDS}
        for name in self._DRAW_FIELDS:
            value = getattr(self, name)
            if value is not None:
                changes[name] = value[:, rows]
        return dataclasses.replace(self, **changes)

    def __iter__(self):
        for row in range(self._n_rows()):
            yield self[row]

    def __bool__(self):
        return True  # a distribution, not a container: truthy even without rows

    def __array__(self, dtype=None, copy=None):
        # numpy would otherwise take the distribution for a nested sequence of rows.
        raise TypeError(
            f"{type(self).__name__} is a distribution, not an array; use its mean or "
            "parameters (e.g. dist.mean)."
        )



def _broadcast_checked(values, shape, name):
    """``values`` (float64) if they broadcast to ``shape`` without growing it, else a
    ``ValueError`` naming them (a (n, 1) column against (n,) means would silently give an
    (n, n) result)."""
    values = np.asarray(values, dtype=np.float64)
    try:
        ok = np.broadcast_shapes(values.shape, shape) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {values.shape} does not broadcast to the "
                         f"predictive's shape {tuple(shape)}.")
    return values

class _NormalScipyMixin:
    """The methods of a frozen ``scipy.stats.norm(loc=mean, scale=std)``.

    The host class provides ``to_scipy()`` and ``_like_mean(values, name)``. Each method
    evaluates scipy's, so the results are scipy's to the last bit.
    """

    def pdf(self, y):
        """Probability density at ``y`` (broadcast against ``mean``).

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        pdf : ndarray
            Predictive density of each value.
        """
        return self.to_scipy().pdf(self._like_mean(y, "y"))

    def logcdf(self, y):
        """Log of the cumulative distribution function at ``y``.

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        logcdf : ndarray
            Log predictive probability of a value at most ``y`` (accurate far in the tail).
        """
        return self.to_scipy().logcdf(self._like_mean(y, "y"))

    def sf(self, y):
        """Survival function ``1 - cdf(y)``, computed without cancellation.

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        sf : ndarray
            Predictive probability of a value above ``y``.
        """
        return self.to_scipy().sf(self._like_mean(y, "y"))

    def logsf(self, y):
        """Log of the survival function at ``y``.

        Parameters
        ----------
        y : array-like
            Target values, broadcastable to the shape of ``mean``.

        Returns
        -------
        logsf : ndarray
            Log predictive probability of a value above ``y``.
        """
        return self.to_scipy().logsf(self._like_mean(y, "y"))

    def isf(self, q):
        """Inverse survival function: the value exceeded with probability ``q``.

        Parameters
        ----------
        q : float or array-like
            Probabilities in [0, 1], broadcastable to the shape of ``mean``.

        Returns
        -------
        isf : ndarray
            Predictive upper quantiles, ``ppf(1 - q)``.
        """
        return self.to_scipy().isf(self._like_mean(q, "q"))

    def median(self):
        """Median of the predictive (its mean, for a Normal).

        Returns
        -------
        median : ndarray of the shape of ``mean``
            Predictive median.
        """
        return self.to_scipy().median()

    def entropy(self):
        """Differential entropy in nats, ``0.5 * log(2 pi e var)``.

        Returns
        -------
        entropy : ndarray of the shape of ``mean``
            Entropy of each predictive marginal.
        """
        return self.to_scipy().entropy()

    def moment(self, order):
        """Non-central moment of the given order, as ``scipy.stats.norm.moment``.

        Parameters
        ----------
        order : int
            Order of the moment, at least 0.

        Returns
        -------
        moment : ndarray of the shape of ``mean``
            ``E[Y**order]`` under the predictive.
        """
        return self.to_scipy().moment(order)

    def support(self):
        """Support of the predictive, ``(-inf, inf)`` for every entry.

        Returns
        -------
        lower, upper : ndarray of the shape of ``mean``
            End points of the support.
        """
        return self.to_scipy().support()

    def expect(self, func, **kwargs):
        """Expected value of ``func(Y)`` by scipy's quadrature; scalar predictives only.

        scipy's ``expect`` integrates one distribution at a time, so this needs a predictive
        of one value (select it first, e.g. ``dist[i]`` of a single-output predictive).

        Parameters
        ----------
        func : callable
            Function of one argument.
        **kwargs : dict
            Passed to ``scipy.stats.rv_continuous.expect`` (``lb``, ``ub``,
            ``conditional``, quadrature options).

        Returns
        -------
        expect : float
            ``E[func(Y)]``.

        Raises
        ------
        ValueError
            If the predictive holds more than one value.
        """
        if np.size(self.mean) != 1:
            raise ValueError(
                f"expect integrates one predictive at a time; this one has shape "
                f"{np.shape(self.mean)}: select one value first (e.g. dist[i])."
            )
        return stats.norm(loc=float(np.ravel(self.mean)[0]),
                          scale=float(np.ravel(self.std)[0])).expect(func, **kwargs)

    def rvs(self, size=None, random_state=None):
        """Random draws as scipy's ``rvs`` (see :meth:`sample` for a leading draw axis).

        Parameters
        ----------
        size : int or tuple of ints, default=None
            Output shape; None gives one draw of the shape of ``mean``. As in scipy, it
            must broadcast with that shape (e.g. ``(n_draws, *dist.mean.shape)``).
        random_state : int, RandomState or Generator instance or None, default=None
            Seed or generator, as in scipy.

        Returns
        -------
        rvs : ndarray
            Draws of the target, noise included.
        """
        return self.to_scipy().rvs(size=size, random_state=random_state)
