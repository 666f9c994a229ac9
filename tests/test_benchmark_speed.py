"""The timing helpers of ``python -m benchmarks speed``."""

import time

import numpy as np

from benchmarks.speed import timed, timed_steady


def test_timed_alternates_the_order_and_keeps_the_last_result():
    calls = []

    def make(name):
        def fn():
            calls.append(name)
            return len(calls)
        return fn

    res = timed({"a": make("a"), "b": make("b")}, 4)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert res["a"][2] == 8 and res["b"][2] == 7

    # the time and the peak memory are those of the call
    # (bounds that hold under any load: a sleep lasts at least its time, and the median of the
    # two sleeps is at most half the whole call's wall time)
    start = time.perf_counter()
    # (40 MB: above glibc's largest mmap threshold, 32 MiB, so the buffer is always fresh
    # pages; a smaller one may reuse heap that an earlier test freed and left resident,
    # which the resident high-water mark does not see)
    res = timed({"sleep": lambda: time.sleep(0.02), "alloc": lambda: np.ones(5 * 10**6).sum()}, 2)
    total = time.perf_counter() - start
    assert 0.015 <= res["sleep"][0] <= total / 2
    assert res["alloc"][1] >= 35 * 10**6 > res["sleep"][1]  # 40 MB touched; page rounding


def test_timed_steady_times_each_callable_in_its_own_rounds():
    calls = []
    res = timed_steady({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                       rounds=2, calls=3)
    assert calls == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert set(res) == {"a", "b"}
    start = time.perf_counter()
    res = timed_steady({"sleep": lambda: time.sleep(0.005), "noop": lambda: None},
                       rounds=2, calls=4)
    total = time.perf_counter() - start
    assert 0.004 <= res["sleep"] <= total and res["noop"] < res["sleep"]


def test_backends_section_compares_equal_curvatures(monkeypatch):
    from benchmarks import speed

    real = speed.pretrained_net
    monkeypatch.setattr(speed, "pretrained_net",
                        lambda kind, X, y: real(kind, X, y, hidden=(8, 8), epochs=5))
    out = []
    ratios = speed.section_backends(1, out, n_large=1200)
    rows = [line for line in out if line.startswith("| ") and "ms" not in line]
    assert len(rows) == len(ratios) == 8
    for line in rows:  # the last column: the largest relative difference of the results
        assert float(line.rstrip(" |").split("|")[-1]) < 1e-10, line
    assert all(np.isfinite(r) and r > 0 for r in ratios.values())


def test_threads_section_times_both_settings():
    from benchmarks.threads import SETTINGS, section_threads

    out = []
    ratios = section_threads(1, out, n_rows=50, hidden=(8,), epochs=2, n_train=60,
                             conditions=("idle",))
    rows = [line for line in out if line.startswith("| ") and " s |" in line]
    assert len(rows) == len(ratios) == 2
    assert all(np.isfinite(r) and r > 0 for r in ratios.values())
    assert len(SETTINGS) == 2 and "| default threads | policy |" in "\n".join(out)


def test_sklearn_section_times_a_scoreboard_set_in_fresh_processes():
    """The child process fits the scoreboard's pipeline (bundled or offline UCI sets)."""
    from benchmarks.vs_sklearn import _time

    for which in ("LA", "MLP"):
        seconds = _time("iris", which, 1, busy=False)
        assert 0 < seconds < 60


def test_sklearn_section_without_the_busy_neighbour(monkeypatch):
    """--sklearn-no-busy times idle only; the busy columns read "–"."""
    from benchmarks import vs_sklearn

    calls = []
    monkeypatch.setattr(vs_sklearn, "_time", lambda name, which, repeats, busy, params:
                        calls.append((busy, params)) or 2.0)
    out = []
    vs_sklearn.section_sklearn(1, out, sets=["iris"], busy=False, params={"max_epochs": 3})
    assert calls == [(False, {"max_epochs": 3})] * 2  # the MLP child ignores them
    assert "| iris | 2.00 | 2.00 | 1.0 | – | – | – |" in out
