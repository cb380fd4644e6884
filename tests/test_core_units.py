import pickle

import pytest

from xstage.errors import InputError, require_int, require_number
from xstage.units import format_size, parse_size


@pytest.mark.parametrize("text,expected", [
    ("32KiB", 32768), ("4.25MiB", 4456448), ("4.6MB", 4600000), ("4096", 4096), (4096, 4096),
    ("1k", 1024), ("1K", 1024), ("1KB", 1000), ("2 GiB", 2 * 1024**3), ("16B", 16), ("1e3", 1000),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["32KB2", "32 KiBs", "-1", "0", "KiB", "", "3.2.1MiB", True, None,
                                  "0.4", "1.5", "1e400", "1e30GiB", float("inf"), float("nan"), "0.0001KiB"])
def test_parse_size_rejects(text):
    with pytest.raises(InputError) as err:
        parse_size(text, "bytes_per_producer")
    assert str(err.value).startswith("bytes_per_producer(=")


def test_format_size():
    assert format_size(4456448) == "4.25MiB"
    assert format_size(512) == "512B"


def test_input_error_pickles_as_itself():
    err = pickle.loads(pickle.dumps(InputError("jobs", "0", "must be >= 1")))
    assert type(err) is InputError and str(err) == "jobs(='0') must be >= 1"
    assert (err.field, err.value, err.must) == ("jobs", "0", "must be >= 1")


@pytest.mark.parametrize("require,value", [(require_number, v) for v in ("x", "", None, "1e400", "inf", "-inf", "nan",
                                                                       True)]
                         + [(require_int, v) for v in ("1.5", "x", "", None, "1e3", True, "0")])
def test_require_rejects_naming_the_field(require, value):
    with pytest.raises(InputError, match=r"^l1_us\(="):
        require("l1_us", value)


@pytest.mark.parametrize("require,ok,bound,bad,must", [
    (require_number, "0", {"minimum": 0}, {"minimum": 0, "allow_equal": False}, "must be > 0"),
    (require_int, "7", {"maximum": 7}, {"maximum": 6}, "must be <= 6"),
])
def test_require_bounds(require, ok, bound, bad, must):
    assert require("g", ok, **bound) == float(ok)
    with pytest.raises(InputError, match=must):
        require("g", ok, **bad)
