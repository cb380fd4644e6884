"""The one way a command ends: exit status and at most one line on stderr.

``call(fn, prog)`` runs ``fn()`` (a subcommand, or a module's ``main``) and maps what escapes it:

- ``InputError``              -> ``prog: error: <field>(=<value>) <must>``, status 2
- ``OSError`` (a path)        -> ``prog: error: <path>: <reason>``, status 2
- a missing GPU library       -> ``prog: error: environment(='no torch') ...: pip install ...``, status 2
- ``BrokenPipeError``         -> quiet (``xstage ... | head``), status 141
- ``KeyboardInterrupt``       -> ``prog: interrupted``, status 130; SIGTERM the same, status 143
- ``SystemExit``              -> its status (argparse's usage errors are already one line)

SIGTERM is turned into an exception while ``fn`` runs, so ``with`` blocks and temporary files unwind
(worker pools are stopped, half-written outputs removed) just as for Ctrl-C.
"""

import logging
import os
import signal
import sys
import threading

from xstage.errors import InputError

GPU_LIBRARIES = ("torch", "triton", "cupy", "nvshmem")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _silence_stdout():
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _path_error(err: OSError) -> str:
    where = err.filename if err.filename is not None else None
    reason = err.strerror or str(err) or type(err).__name__
    return f"{where}: {reason}" if where else reason


def missing_library(name: str) -> InputError:
    return InputError("environment", f"no {name}", "this command needs the GPU libraries: "
                      "pip install 'xstage[gpu]' (or torch and triton; TRITON_INTERPRET=1 runs kernels on a CPU)")


def require_libraries(*names: str) -> None:
    """Raise one InputError naming the first of ``names`` that cannot be imported."""
    import importlib.util

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise missing_library(name)


class _Stderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each line (not as it was when the handler was made)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def show_hw_progress(quiet: bool = False) -> None:
    """Point the ``xstage.hw`` logger (the GPU runs' progress lines) at stderr; ``quiet`` keeps warnings only."""
    logger = logging.getLogger("xstage.hw")
    if not any(getattr(h, "_xstage", False) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._xstage = True
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.WARNING if quiet else logging.INFO)


def call(fn, prog: str = "xstage") -> int:
    """Run ``fn()`` and return its exit status, every failure mode as at most one stderr line."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        code = fn()
        sys.stdout.flush()
        return int(code or 0)
    except InputError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as err:
        root = (err.name or "").split(".")[0]
        if root not in GPU_LIBRARIES:
            raise
        print(f"{prog}: error: {missing_library(root)}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{prog}: error: {_path_error(err)}", file=sys.stderr)
        return 2
    except SystemExit as err:
        return err.code if isinstance(err.code, int) else (0 if err.code is None else 2)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
