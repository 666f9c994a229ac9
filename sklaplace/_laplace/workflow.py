"""The workflows around the core: interrupts, torch's grad modes, pickles
across devices (the architecture of later ``partial_fit`` calls: ``sklaplace.estimators._continual``).

- :func:`torch_entry_point` decorates the public methods: the library needs autograd
  (evidence maximisation, Jacobians, training), so each runs with gradients enabled
  and outside inference mode, whatever the caller's mode (``torch.no_grad()``,
  ``torch.set_grad_enabled(False)``, ``torch.inference_mode()``). The grad mode
  changes no number; what the caller gets back is numpy.
- :func:`interrupts_recorded` lets a Ctrl-C (SIGINT) out of skorch's training loop,
  which catches ``KeyboardInterrupt`` (its callbacks, e.g. ``EarlyStopping``, raise it
  to end training early: those still end training normally).
- :func:`pack_state` / :func:`unpack_state`: the fitted tensors travel in a
  ``torch.save`` blob, loaded with ``map_location="cpu"`` where CUDA is absent (as
  skorch does for its net), so a fit on a GPU unpickles on a CPU-only machine.
"""

import contextlib
import functools
import io
import signal
import threading
import warnings

import torch

from .subsets.base import _FUNCTIONAL_CALL_LOCK as MODULE_IN_USE


# ---------------------------------------------------------------- grad modes
def torch_entry_point(method):
    """Run ``method`` with autograd on and inference mode off (see the module docstring)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            return method(*args, **kwargs)
        with torch.inference_mode(False), torch.enable_grad():
            return method(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------- Ctrl-C
@contextlib.contextmanager
def interrupts_recorded():
    """Yield a list that gets an entry when the SIGINT handler raises KeyboardInterrupt.

    skorch's ``partial_fit`` swallows every ``KeyboardInterrupt`` of its training loop,
    the user's Ctrl-C included; the caller re-raises it when the list is not empty.
    Python runs signal handlers in the main thread only, so elsewhere (and where the
    handler is not a Python callable, e.g. ``SIG_IGN``) this records nothing.
    """
    record = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield record
        return

    def handler(signum, frame):
        try:
            previous(signum, frame)
        except KeyboardInterrupt:
            record.append(signum)
            raise

    signal.signal(signal.SIGINT, handler)
    try:
        yield record
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------- pickles across devices
_PACKED = "_sklaplace_fitted_tensors"


def pack_state(state, params):
    """The pickled state: constructor parameters and the skorch net ``net_`` (which
    pickles its own tensors, mapping them as below) as they are, every other attribute
    in one ``torch.save`` blob."""
    moved = {k: v for k, v in state.items() if k not in params and k != "net_"}
    if not moved:
        return state
    buffer = io.BytesIO()
    # a prediction in another thread borrows the fitted module (forward hooks, weights
    # swapped in by torch.func): pickle it between calls, never mid-call
    with MODULE_IN_USE:
        torch.save(moved, buffer)
    kept = {k: v for k, v in state.items() if k not in moved}
    kept[_PACKED] = buffer.getvalue()
    return kept


def unpack_state(state, owner):
    """The inverse of :func:`pack_state`: tensors stored on a CUDA device load onto the
    CPU where torch has no CUDA, with a warning (as skorch maps its net's)."""
    if _PACKED not in state:
        return state
    state = dict(state)
    mapped = []

    def restore(storage, location):  # storage: deserialized on the CPU
        if location.startswith("cuda") and not torch.cuda.is_available():
            mapped.append(location)
            return storage
        return None  # torch's default

    state.update(torch.load(io.BytesIO(state.pop(_PACKED)), map_location=restore,
                            weights_only=False))
    if mapped:
        warnings.warn(
            f"This {owner} was fitted on {mapped[0]!r}, but torch has no CUDA device here: "
            "its fitted tensors were loaded onto the CPU (predictions are the same numbers). "
            "To fit it again here, set device='cpu' (or the skorch net's device).",
            UserWarning)
    return state
