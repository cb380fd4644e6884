"""What every subcommand shares: its common flags, declared once, and how it prints.

Commands: ``add_command`` (described by its function's docstring), ``add_actions`` (a command of actions).
Flags: ``add_json``, ``add_out``, ``add_overwrite``, ``add_quiet``, ``add_platform``. Printing:
``print_json`` (NaN/inf to null, numpy scalars to Python through ``clean``), ``print_table``, ``say``
(a progress line on stderr unless --quiet / --json) and ``progress_enabled`` (bars only when stderr is a
terminal). Values: ``number``, ``integer``, ``int_list``, ``number_list``, ``size_list``, ``check_output``.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from xstage.errors import InputError, require_int, require_number
from xstage.paths import writable_folder
from xstage.records import json_safe
from xstage.units import parse_size


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message):
        prog = "xstage" if self.prog.startswith("xstage") else self.prog
        self.exit(2, f"{prog}: error: {message}\n")


def add_command(sub, name: str, func, help: str):
    """A subcommand run by ``func(args) -> int``; its ``--help`` description is ``func``'s docstring (one place
    for what the command does)."""
    import inspect

    p = sub.add_parser(name, help=help, description=inspect.cleandoc(func.__doc__) if func.__doc__ else None)
    p.set_defaults(func=func)
    return p


def add_actions(sub, name: str, help: str, description: str, dest: str):
    """A command made of actions (``xstage attention layout|check|run``): its subparsers; the command alone
    prints its help and exits 2."""
    p = sub.add_parser(name, help=help, description=description)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p.add_subparsers(dest=dest, metavar="ACTION")


# --- flags ------------------------------------------------------------------------------------
def add_json(p, help="print one JSON object"):
    p.add_argument("--json", action="store_true", help=help)


def add_overwrite(p, help="replace --out if it exists"):
    p.add_argument("--overwrite", action="store_true", help=help)


def add_out(p, help, *, required=False, default=None, overwrite=True):
    p.add_argument("--out", required=required, default=default, help=help)
    if overwrite:
        add_overwrite(p)


def add_quiet(p):
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr (errors still go there)")


def add_platform(p, *, required=False, default="paper-b200", short=True):
    from xstage.sim.platform import bundled_platforms

    names = ", ".join(bundled_platforms())
    flags = ("--platform", "-p") if short else ("--platform",)
    p.add_argument(*flags, required=required, default=None if required else default,
                   help=f"bundled platform name ({names}) or platform .json file"
                   + ("" if required or default is None else f" (default {default})"))


# --- printing ---------------------------------------------------------------------------------
clean = json_safe  # the CLI's name for it


def print_json(obj) -> None:
    print(json.dumps(clean(obj), indent=2, sort_keys=False, default=str))


def print_table(rows: dict) -> None:
    """Print a flat dict as aligned ``key  value`` lines."""
    width = max((len(k) for k in rows), default=0)
    for key, value in rows.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        print(f"{key:<{width}}  {value}")


def quiet(args) -> bool:
    return bool(getattr(args, "quiet", False) or getattr(args, "json", False))


def say(args, message: str) -> None:
    """A progress line on stderr, unless --quiet or --json."""
    if not quiet(args):
        print(message, file=sys.stderr, flush=True)


def progress_enabled(args) -> bool:
    """Progress bars: only when stderr is a terminal, never with --json, --quiet or --no-progress."""
    if quiet(args) or getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# --- values -----------------------------------------------------------------------------------
def number(field, text, *, minimum=None, allow_equal=True, default=None):
    """A finite float from a flag's text (None stays ``default``)."""
    if text is None:
        return default
    return require_number(field, text, minimum=minimum, allow_equal=allow_equal)


def integer(field, text, *, minimum=1, maximum=None, default=None):
    if text is None:
        return default
    return require_int(field, text, minimum=minimum, maximum=maximum)


def _items(field, text, what):
    parts = [x.strip() for x in str(text).split(",") if x.strip()]
    if not parts:
        raise InputError(field, text, f"must be a comma-separated list of {what}")
    return parts


def int_list(field, text, *, minimum=1, maximum=None):
    if text is None:
        return None
    parts = _items(field, text, "integers")
    try:
        return tuple(require_int(field, x, minimum=minimum, maximum=maximum) for x in parts)
    except InputError as err:
        raise InputError(field, text, f"must be a comma-separated list of integers: {err.must}") from None


def number_list(field, text, *, minimum=None, allow_equal=True):
    parts = _items(field, text, "numbers")
    try:
        return tuple(require_number(field, x, minimum=minimum, allow_equal=allow_equal) for x in parts)
    except InputError as err:
        raise InputError(field, text, f"must be a comma-separated list of numbers: {err.must}") from None


def size_list(field, text):
    return tuple(parse_size(x, field) for x in _items(field, text, "sizes"))


def check_output(field, path, *, overwrite=False, suffixes=None, folder=False) -> Path:
    """Refuse an output path before any work: wrong suffix, exists without --overwrite, not writable."""
    text, path = str(path), Path(path)
    if not folder and text.endswith(("/", os.sep)):
        raise InputError(field, text, "names a folder; give a file name")
    if suffixes and path.suffix not in suffixes:
        raise InputError(field, str(path), f"must end in {' or '.join(suffixes)}")
    if path.exists():
        if folder != path.is_dir():
            raise InputError(field, str(path), f"exists and is {'not ' if folder else ''}a folder")
        if not folder and not overwrite:
            raise InputError(field, str(path), "already exists (pass --overwrite to replace it)")
    writable_folder(field, path, path if folder and path.exists() else path.parent)
    return path


class atomic_output:
    """``with atomic_output(path) as tmp: write(tmp)``: ``tmp`` (same folder, same suffix) becomes ``path``
    by rename when the block succeeds, and is removed when it fails or is interrupted."""

    def __init__(self, path, *, overwrite: bool = False):
        self.path = Path(path)
        self.overwrite = overwrite

    def __enter__(self) -> Path:
        import tempfile

        if self.path.exists() and not self.overwrite:
            raise InputError("output", str(self.path), "already exists (pass --overwrite to replace it)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=f".tmp{self.path.suffix}",
                                   dir=self.path.parent)
        os.close(fd)
        self.tmp = Path(tmp)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            os.chmod(self.tmp, 0o644)
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
        return False
