"""One error type for bad input: it names the field and the value given.

The CLI turns it into one line on stderr and exit status 2.
"""


class InputError(ValueError):
    """Invalid user input. ``str(err)`` is the one line the CLI prints."""

    def __init__(self, field: str, value, must: str):
        self.field = field
        self.value = value
        self.must = must
        super().__init__(f"{field}(={value!r}) {must}")


def require_positive(field: str, value, *, allow_zero: bool = False):
    """Return ``value`` if it is a finite number > 0 (>= 0 with allow_zero)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(field, value, "must be a number") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise InputError(field, value, "must be finite")
    if allow_zero and x < 0:
        raise InputError(field, value, "must be >= 0")
    if not allow_zero and x <= 0:
        raise InputError(field, value, "must be > 0")
    return value


def require_int(field: str, value, *, minimum: int = 1) -> int:
    """Return ``value`` as int if it is an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
        isinstance(value, float) and value.is_integer()
    ):
        try:
            ivalue = int(str(value), 10)
        except (TypeError, ValueError):
            raise InputError(field, value, "must be an integer") from None
    else:
        ivalue = int(value)
    if ivalue < minimum:
        raise InputError(field, value, f"must be >= {minimum}")
    return ivalue


def exit_with(main, prog: str):
    """``sys.exit(main())`` for a module's ``__main__``: InputError becomes one line on stderr and exit 2."""
    import sys

    try:
        sys.exit(main())
    except InputError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(2)
