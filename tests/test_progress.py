"""verbose=1: one line per stage with its time, progress on long loops, no ANSI codes
when stdout is not a terminal; verbose=2 adds skorch's epoch table."""

import io
import pickle
import re

import numpy as np
import pytest

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace import progress

ANSI = re.compile(r"\x1b\[")


def _data(n=100, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] > 0).astype(int)


def test_verbose_fit_prints_each_stage_with_its_time_and_no_ansi(capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)  # every epoch counts as a long loop
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    X, y = _data()
    est = LaplaceClassifier(hidden_layer_sizes=(50,), max_epochs=3, verbose=1,
                            random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert est.hyperparameter_tuning_ == "cv"
    seconds = r"in \d+\.\d\d s"
    for stage in [rf"MAP training on 80 of 100 rows \(20 held out to tune δ\): 3 epochs {seconds}",
                  rf"tuning \(held-out NLL\) {seconds}",
                  rf"MAP training on all 100 rows: 3 epochs {seconds}",
                  rf"curvature and decomposition done {seconds}"]:
        assert re.search(r"^\[LaplaceClassifier\] " + stage + "$", out, re.M), stage
    # the counter lines of the epochs, plain text
    assert re.search(r"MAP training on all 100 rows: epoch 2/3, train loss [\d.]+ \(", out)
    assert not ANSI.search(out) and "\r" not in out
    assert "train_loss" not in out  # skorch's table only from verbose=2
    # the progress callback left the trained net: it is the net verbose=0 trains
    assert not any(isinstance(cb, progress.EpochProgress) for _, cb in est.net_.callbacks_)
    assert est.net_.callbacks is None
    pickle.loads(pickle.dumps(est))


def test_short_loops_print_no_progress_lines(capsys):
    X, y = _data()
    LaplaceClassifier(max_epochs=2, verbose=1, hyperparameter_tuning=None,
                      random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert "epoch 1/2" not in out and re.search(r"all 100 rows: 2 epochs in", out)


def test_verbose_two_adds_skorch_epoch_table(capsys):
    X, y = _data()
    LaplaceClassifier(max_epochs=2, verbose=2, hyperparameter_tuning=None,
                      random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert "train_loss" in out and "MAP training on all 100 rows: 2 epochs in" in out


def test_evidence_tuning_and_refinement_stage_lines(capsys):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(60, 2))
    y = X @ [1.0, -2.0] + 0.1 * rng.normal(size=60)
    LaplaceRegressor(max_epochs=2, verbose=1, hessian_structure="diag", refine="laplace",
                     random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert re.search(r"^\[LaplaceRegressor\] tuning \(evidence\) in \d+\.\d\d s$", out, re.M)
    assert re.search(r"^\[LaplaceRegressor\] refinement \(laplace\) in \d+\.\d\d s$", out, re.M)
    assert not ANSI.search(out)


def test_silent_by_default(capsys):
    X, y = _data()
    LaplaceClassifier(max_epochs=2, random_state=0).fit(X, y)
    assert capsys.readouterr().out == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch, terminal):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    stream, lines = (_Terminal() if terminal else io.StringIO()), []
    shown = progress.Progress(4, "MAP training", lines.append, stream=stream)
    for _ in range(4):
        shown.update(unit="epoch", loss="0.5")
    assert shown.close() >= 0
    if terminal:  # tqdm drew (and, leave=False, erased) its bar on the stream
        assert "MAP training" in stream.getvalue() and "\r" in stream.getvalue()
        assert lines == []
    else:
        assert stream.getvalue() == ""
        assert lines[-1].startswith("MAP training: epoch 4/4, loss 0.5 (")
