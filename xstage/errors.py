"""One error type for bad input: it names the field and the value given.

The CLI turns it into one line on stderr and exit status 2 (``xstage.cli.exits``). It pickles, so an
input error raised inside a worker process (``xstage sweep --jobs 2``) arrives as itself.
"""

import math


class InputError(ValueError):
    """Invalid user input. ``str(err)`` is the one line the CLI prints."""

    def __init__(self, field: str, value, must: str):
        self.field = field
        self.value = value
        self.must = must
        super().__init__(f"{field}(={value!r}) {must}")

    def __reduce__(self):  # ValueError pickles as cls(message): rebuild from the three parts instead
        return (type(self), (self.field, self.value, self.must))


def require_number(field: str, value, *, minimum: float | None = None, allow_equal: bool = True) -> float:
    """``value`` as a finite float (>= minimum, or > minimum with allow_equal=False)."""
    if isinstance(value, bool):
        raise InputError(field, value, "must be a number")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(field, value, "must be a number") from None
    if not math.isfinite(x):
        raise InputError(field, value, "must be finite")
    if minimum is not None and (x < minimum or (not allow_equal and x == minimum)):
        raise InputError(field, value, f"must be {'>=' if allow_equal else '>'} {minimum:g}")
    return x


def require_positive(field: str, value, *, allow_zero: bool = False):
    """Return ``value`` if it is a finite number > 0 (>= 0 with allow_zero)."""
    require_number(field, value, minimum=0, allow_equal=allow_zero)
    return value


def require_int(field: str, value, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in [minimum, maximum]."""
    if isinstance(value, bool) or value is None:
        raise InputError(field, value, "must be an integer")
    if isinstance(value, int):
        ivalue = value
    elif isinstance(value, float) and value.is_integer():
        ivalue = int(value)
    else:
        try:
            ivalue = int(str(value).strip(), 10)
        except (TypeError, ValueError):
            raise InputError(field, value, "must be an integer") from None
    if ivalue < minimum:
        raise InputError(field, value, f"must be >= {minimum}")
    if maximum is not None and ivalue > maximum:
        raise InputError(field, value, f"must be <= {maximum}")
    return ivalue


def require_int_fields(obj, positive=(), nonnegative=()) -> None:
    """A frozen dataclass's integer fields checked and stored back as int (from its ``__post_init__``): each of
    ``positive`` an integer >= 1, each of ``nonnegative`` >= 0; the first bad one → ``InputError`` naming it."""
    for names, minimum in ((positive, 1), (nonnegative, 0)):
        for name in names:
            object.__setattr__(obj, name, require_int(name, getattr(obj, name), minimum=minimum))


def require_rank(rank: int, world_size: int) -> None:
    """A rank of ``world_size`` ranks: ``rank < world_size`` (both already checked as integers)."""
    if rank >= world_size:
        raise InputError("rank", rank, f"must be < world_size={world_size}")


def exit_with(main, prog: str):
    """``sys.exit(main())`` for a module's ``__main__``, through the CLI's one error-exit path."""
    import sys

    from xstage.cli.exits import call

    sys.exit(call(main, prog))
