"""A process pool whose workers never outlive their parent.

``ProcessPoolExecutor`` leaves its workers running when the parent is killed, and on an exception inside
``with`` it waits for every queued item. ``WorkerPool``:

- workers ignore SIGINT (Ctrl-C reaches the whole process group; the parent decides) and take SIGTERM's
  default action, and on Linux ask the kernel for SIGKILL when their parent dies (``PR_SET_PDEATHSIG``:
  covers ``kill -9`` of the parent); elsewhere a watchdog thread exits when the parent is gone;
- leaving the ``with`` block by an exception (an input error in a worker, KeyboardInterrupt, SIGTERM turned
  into an exception by the CLI) cancels the queued items and terminates the running workers at once.

``DeferredSignals`` holds SIGINT and SIGTERM back while the parent talks to the pool, and raises them only at
points it chooses (``check``, ``result``). A Ctrl-C raised anywhere can land inside the executor's own locks
(``Future``'s condition, the call queue's lock inside ``submit``) and leave one held; the pool's manager thread
then blocks on it and the interpreter hangs at exit (about 1 in 300 interrupts sent as the workers start, after
``as_completed`` was no longer used; about 1 in 30 with it).
"""

import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

_DEFERRED = (signal.SIGINT, signal.SIGTERM)
_POLL_S = 0.05

_PR_SET_PDEATHSIG = 1


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _worker_init(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


class WorkerPool(ProcessPoolExecutor):
    def __init__(self, max_workers: int):
        super().__init__(max_workers=max_workers, initializer=_worker_init, initargs=(os.getpid(),))

    def terminate(self) -> None:
        """Cancel what is queued, stop the workers now."""
        workers = list((getattr(self, "_processes", None) or {}).values())  # the executor's own table
        manager = getattr(self, "_executor_manager_thread", None)            # shutdown() forgets it
        self.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            if proc.is_alive():
                proc.terminate()
        for proc in workers:
            proc.join(timeout=5)
        if manager is not None:   # let it close its wake-up pipe now: at interpreter exit, concurrent.futures'
            manager.join(timeout=5)   # exit hook could write to that pipe as it closes (CPython 3.11: EBADF on stderr)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return super().__exit__(exc_type, exc, tb)
        self.terminate()
        return False


class DeferredSignal(BaseException):
    """A held-back signal whose own action is the default one (e.g. SIGTERM outside the CLI): delivered on exit."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class DeferredSignals:
    """Hold SIGINT and SIGTERM back inside ``with``; raise them only at ``check`` and ``result``.

    A held signal is raised by the handler it displaced (``KeyboardInterrupt`` for SIGINT, the CLI's
    ``Terminated`` for SIGTERM). Where that handler is the default action, ``DeferredSignal`` unwinds the block
    and the signal is sent again, undeferred, on exit. Signals arriving while the block unwinds by an
    exception (the pool terminating its workers) are dropped; one arriving after the last ``check`` of a block
    that ends normally is raised on exit. Outside the main thread signals cannot be handled, and this does nothing.
    """

    def __init__(self):
        self.pending: list[int] = []
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in _DEFERRED:
                previous = signal.getsignal(sig)
                if previous is not signal.SIG_IGN and previous is not None:
                    self._previous[sig] = signal.signal(sig, self._hold)
        return self

    def _hold(self, signum, frame):
        self.pending.append(signum)

    def check(self) -> None:
        """Raise the first held signal, as its displaced handler would have."""
        if not self.pending:
            return
        sig = self.pending.pop(0)
        handler = self._previous.get(sig)
        if callable(handler):
            handler(sig, None)  # raises (KeyboardInterrupt, Terminated); a handler that returns is done
        else:
            raise DeferredSignal(sig)

    def result(self, future):
        """``future.result()``, checking for held signals every few tens of milliseconds."""
        while True:
            self.check()
            try:
                return future.result(timeout=_POLL_S)
            except TimeoutError:
                continue

    def __exit__(self, exc_type, exc, tb):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if isinstance(exc, DeferredSignal):
            signal.raise_signal(exc.signum)  # the default action, now that nothing holds it back
            return False
        if exc_type is None and self.pending:
            signal.raise_signal(self.pending.pop(0))
        return False
