"""DeferredSignals: SIGINT / SIGTERM held back inside the block, raised only at check / result, handlers restored."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

import pytest

from xstage.sim.pool import DeferredSignals

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")


class Stop(Exception):
    pass


@pytest.fixture(autouse=True)
def _sigint_handled():
    """SIGINT raises KeyboardInterrupt, as in a foreground Python process, whatever the launching shell left: a shell
    without job control starts background commands with SIGINT ignored, and DeferredSignals rightly leaves an ignored
    signal ignored, so these tests would wait forever for a signal that never comes (session 28)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _send(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs in the main thread at its next bytecode


def test_sigint_waits_for_check_and_raises_keyboardinterrupt():
    seen = []
    with pytest.raises(KeyboardInterrupt):
        with DeferredSignals() as held:
            _send(signal.SIGINT)
            seen.append("after the signal")  # not raised here
            assert held.pending == [signal.SIGINT]
            held.check()
            seen.append("after check")
    assert seen == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_is_raised_by_the_handler_it_displaced_and_that_handler_comes_back():
    def on_term(signum, frame):
        raise Stop(signum)

    before = signal.signal(signal.SIGTERM, on_term)
    try:
        with pytest.raises(Stop):
            with DeferredSignals() as held:
                _send(signal.SIGTERM)
                held.check()
        assert signal.getsignal(signal.SIGTERM) is on_term
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_signal_after_the_last_check_is_raised_on_exit():
    with pytest.raises(KeyboardInterrupt):
        with DeferredSignals():
            _send(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_signals_while_unwinding_by_an_exception_are_dropped():
    with pytest.raises(Stop):
        with DeferredSignals():
            _send(signal.SIGINT)
            raise Stop()


def test_result_returns_the_value_and_raises_a_signal_that_arrives_while_waiting():
    done = Future()
    done.set_result(7)
    with DeferredSignals() as held:
        assert held.result(done) == 7
    never = Future()
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        with DeferredSignals() as held:
            held.result(never)
    assert time.monotonic() - start < 5.0
    assert not never.done()


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with DeferredSignals() as held:
            _send(signal.SIGINT)
            held.check()
            assert held.pending == []
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_default_action_signal_is_delivered_undeferred_on_exit():
    # SIGTERM at its default action kills the process, as it would have without the block, but only after the
    # block (and what it wraps, e.g. the pool's terminate) has unwound
    code = ("import os, signal, sys, time\n"
            "from xstage.sim.pool import DeferredSignals\n"
            "try:\n"
            "    with DeferredSignals() as held:\n"
            "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.05)\n"
            "        print('held', flush=True)\n"
            "        try:\n"
            "            held.check()\n"
            "        finally:\n"
            "            print('unwound', flush=True)\n"
            "finally:\n"
            "    print('not reached', flush=True)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGTERM
    assert run.stdout.split() == ["held", "unwound"]


def test_outside_the_main_thread_it_does_nothing():
    out = []

    def body():
        with DeferredSignals() as held:
            held.check()
            out.append(held.pending)

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert out == [[]]
