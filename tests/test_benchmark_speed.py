"""The timing helpers of ``python -m sklaplace.benchmarks speed``."""

from sklaplace.benchmarks.speed import timed, timed_steady


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
    assert all(t >= 0 and peak >= 0 for t, peak, _ in res.values())


def test_timed_steady_times_each_callable_in_its_own_rounds():
    calls = []
    res = timed_steady({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                       rounds=2, calls=3)
    assert calls == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert set(res) == {"a", "b"} and all(t >= 0 for t in res.values())
