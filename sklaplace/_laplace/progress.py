"""Progress of a verbose fit (``verbose=1``): stage lines with their time, and a progress
indication on loops that run longer than a few seconds.

Every message goes to ``sys.stdout`` through the estimator's ``_log`` (one line each, as
scikit-learn's verbose output). On a terminal a loop shows a tqdm bar (tqdm comes with
skorch), after :data:`DELAY` seconds and erased when the loop ends; elsewhere (a log
file, a captured stream, CI) it prints a plain counter line at most every
:data:`INTERVAL` seconds: no carriage returns, no ANSI escape codes.

MAP training reports its epochs through :class:`EpochProgress`, a skorch callback that
:func:`show_epochs` puts into the training of this context only (it is removed from the
trained net afterwards, and is not an argument of the cached training function).
"""

import contextlib
import contextvars
import sys
import time

from skorch.callbacks import Callback

#: Seconds a loop runs before its progress shows.
DELAY = 2.0
#: Seconds between two counter lines when the output is not a terminal.
INTERVAL = 5.0

_EPOCHS = contextvars.ContextVar("sklaplace_epoch_progress", default=None)


def _is_terminal(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Steps of a loop of ``total`` steps called ``label``, reported to ``log``.

    ``log`` prints one line (the estimator's ``_log``). On a terminal a tqdm bar on
    stdout, else a counter line through ``log`` at most every :data:`INTERVAL` s, the
    first after :data:`DELAY` s.
    """

    def __init__(self, total, label, log, stream=None):
        self.total, self.label, self.log = total, label, log
        self.start = self._last = time.perf_counter()
        self.step = 0
        self._bar = None
        stream = sys.stdout if stream is None else stream
        if _is_terminal(stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=label, file=stream, delay=DELAY, leave=False,
                             dynamic_ncols=True)

    def update(self, step=None, unit="step", **info):
        """Move to ``step`` (the next one by default); ``info`` joins the message."""
        self.step = self.step + 1 if step is None else step
        if self._bar is not None:
            self._bar.update(self.step - self._bar.n)
            if info:
                self._bar.set_postfix(info, refresh=False)
            return
        now = time.perf_counter()
        if now - self.start < DELAY or now - self._last < INTERVAL:
            return
        self._last = now
        extra = "".join(f", {k} {v}" for k, v in info.items())
        self.log(f"{self.label}: {unit} {self.step}/{self.total}{extra} "
                 f"({now - self.start:.1f} s)")

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        return time.perf_counter() - self.start


@contextlib.contextmanager
def stage(log, label):
    """Time the block and print one line ``"<label> in <seconds> s"`` after it."""
    start = time.perf_counter()
    yield
    log(f"{label} in {time.perf_counter() - start:.2f} s")


class EpochProgress(Callback):
    """skorch callback: each epoch's end to the :class:`Progress` of :func:`show_epochs`."""

    def on_epoch_end(self, net, **kwargs):
        progress = _EPOCHS.get()
        if progress is not None:
            loss = net.history[-1].get("train_loss") if len(net.history) else None
            info = {} if loss is None else {"train loss": f"{loss:.4g}"}
            progress.update(len(net.history), unit="epoch", **info)


def show_epochs(progress):
    """Report the epochs of MAP training to ``progress`` (or nothing) until
    :func:`stop_epochs`; returns the token that one takes."""
    return _EPOCHS.set(progress)


def stop_epochs(token, progress):
    """End :func:`show_epochs`: close ``progress``; its seconds (0 for None)."""
    _EPOCHS.reset(token)
    return 0.0 if progress is None else progress.close()


def epoch_callbacks():
    """``[EpochProgress()]`` while :func:`show_epochs` has a progress, else ``[]``."""
    return [EpochProgress()] if _EPOCHS.get() is not None else []


def drop_callbacks(net, added, callbacks_param):
    """Remove the callbacks ``added`` from a trained skorch ``net``: its ``callbacks``
    parameter back to ``callbacks_param``, and out of its initialized ``callbacks_``."""
    if not added:
        return
    net.callbacks = callbacks_param
    net.callbacks_ = [(name, cb) for name, cb in net.callbacks_
                      if all(cb is not a for a in added)]
