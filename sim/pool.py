"""A process pool whose workers never outlive their parent.

``ProcessPoolExecutor`` leaves its workers running when the parent is killed, and on an exception inside
``with`` it waits for every queued item. ``WorkerPool``:

- workers ignore SIGINT (Ctrl-C reaches the whole process group; the parent decides) and take SIGTERM's
  default action, and on Linux ask the kernel for SIGKILL when their parent dies (``PR_SET_PDEATHSIG``:
  covers ``kill -9`` of the parent); elsewhere a watchdog thread exits when the parent is gone;
- leaving the ``with`` block by an exception (an input error in a worker, KeyboardInterrupt, SIGTERM turned
  into an exception by the CLI) cancels the queued items and terminates the running workers at once.
"""

import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

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
        self.shutdown(wait=False, cancel_futures=True)
        for proc in workers:
            if proc.is_alive():
                proc.terminate()
        for proc in workers:
            proc.join(timeout=5)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return super().__exit__(exc_type, exc, tb)
        self.terminate()
        return False
