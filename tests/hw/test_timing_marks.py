"""``timing.paired_differences``'s ``marks`` (host wall-clock start and end of each variant's paired timing) and
``raw`` (each pair's two launch times) on a fake torch: the timing and its differences are unchanged, each variant
gets one mark around its own pairs, and ``raw`` gives back the times the differences are made of."""

import sys
import types

import pytest

from xstage.hw.common import timing

from ..fake_cuda import FakeEvent



@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=FakeEvent, _sleep=lambda n: None))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(timing, "device", lambda: "cuda")
    monkeypatch.setattr(timing, "sync", lambda: None)
    FakeEvent.clock_ms = 0.0
    return torch


def launch(ms):
    def fn():
        FakeEvent.clock_ms += ms
    return fn


def no_capture(fn):
    return fn, "eager"


def test_marks_bracket_each_variants_pairs_and_leave_the_differences(fake_torch, monkeypatch):
    clock = iter(float(x) for x in range(100, 200))
    monkeypatch.setattr(timing.time, "time", lambda: next(clock))
    others = {"a": launch(1.5), "b": launch(0.5)}
    plain = timing.paired_differences(launch(1.0), others, pairs=4, capture_fn=no_capture)
    marks = []
    marked = timing.paired_differences(launch(1.0), others, pairs=4, capture_fn=no_capture, marks=marks)
    assert plain == marked
    assert marked["a"] == pytest.approx([500.0] * 4) and marked["b"] == pytest.approx([-500.0] * 4)
    assert [m["variant"] for m in marks] == ["a", "b"]
    assert [m["pairs"] for m in marks] == [4, 4]
    assert marks[0]["host_start_s"] < marks[0]["host_end_s"] <= marks[1]["host_start_s"] < marks[1]["host_end_s"]


def test_marks_on_the_cpu_dry_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())
    monkeypatch.setattr(timing, "device", lambda: "cpu")
    marks = []
    out = timing.paired_differences(lambda: None, {"a": lambda: None}, pairs=3, marks=marks)
    assert out == {"a": [0.0]}
    assert [(m["variant"], m["pairs"]) for m in marks] == [("a", 0)]


def test_raw_gets_each_pairs_two_launch_times_in_either_order(fake_torch):
    raw = []
    out = timing.paired_differences(launch(1.0), {"a": launch(1.5)}, pairs=4, capture_fn=no_capture, raw=raw)
    assert [(r["variant"], r["pair"], r["base_first"]) for r in raw] == [("a", i, i % 2 == 0) for i in range(4)]
    assert [r["base_us"] for r in raw] == pytest.approx([1000.0] * 4)
    assert [r["other_us"] for r in raw] == pytest.approx([1500.0] * 4)
    assert out["a"] == pytest.approx([r["other_us"] - r["base_us"] for r in raw])


def test_order_sets_which_launch_goes_first_and_raw_follows_it(fake_torch):
    order = [False, False, True, False, True, True]
    raw = []
    out = timing.paired_differences(launch(1.0), {"a": launch(1.5)}, pairs=6, capture_fn=no_capture, raw=raw,
                                    order=order)
    assert [r["base_first"] for r in raw] == order
    assert [r["pair"] for r in raw] == list(range(6))
    # each launch's own time is read whichever goes first, so the differences do not depend on the order
    assert [r["base_us"] for r in raw] == pytest.approx([1000.0] * 6)
    assert out["a"] == pytest.approx([500.0] * 6)


def test_order_launches_in_the_order_given(fake_torch):
    seen = []

    def tagged(tag, ms):
        def fn():
            seen.append(tag)
            FakeEvent.clock_ms += ms
        return fn

    timing.paired_differences(tagged("b", 1.0), {"a": tagged("o", 2.0)}, pairs=3, capture_fn=no_capture,
                              order=[False, True, False])
    assert seen == ["o", "b", "b", "o", "o", "b"]
    seen.clear()
    timing.paired_differences(tagged("b", 1.0), {"a": tagged("o", 2.0)}, pairs=3, capture_fn=no_capture)
    assert seen == ["b", "o", "o", "b", "b", "o"]          # no order: alternating, base first in pair 0


def test_order_of_the_wrong_length_is_refused(fake_torch):
    with pytest.raises(timing.InputError, match=r"order\(='2 entries'\) must give one boolean per pair \(pairs=3\)"):
        timing.paired_differences(launch(1.0), {"a": launch(1.5)}, pairs=3, capture_fn=no_capture, order=[True, False])


def test_warm_pairs_run_after_the_queueing_wait_and_before_the_timed_pairs(fake_torch):
    seen = []
    fake_torch.cuda._sleep = lambda n: seen.append("sleep")

    def tagged(tag, ms):
        def fn():
            seen.append(tag)
            FakeEvent.clock_ms += ms
        return fn

    raw = []
    out = timing.paired_differences(tagged("b", 1.0), {"a": tagged("o", 2.0)}, pairs=2, capture_fn=no_capture,
                                    warm=2, raw=raw)
    assert seen == ["sleep", "b", "o", "b", "o", "b", "o", "o", "b"]
    assert len(raw) == 2 and out["a"] == pytest.approx([1000.0, 1000.0])   # the warm pairs are not timed


def test_negative_warm_is_refused(fake_torch):
    with pytest.raises(timing.InputError, match="warm"):
        timing.paired_differences(launch(1.0), {"a": launch(1.5)}, pairs=2, capture_fn=no_capture, warm=-1)
