import pytest

from xstage.errors import InputError
from xstage.units import format_size, parse_size


@pytest.mark.parametrize("text,expected", [
    ("32KiB", 32768), ("4.25MiB", 4456448), ("4.6MB", 4600000), ("4096", 4096), (4096, 4096),
    ("1k", 1024), ("2 GiB", 2 * 1024**3), ("16B", 16), ("1e3", 1000),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["32KB2", "32 KiBs", "-1", "0", "KiB", "", "3.2.1MiB", True])
def test_parse_size_rejects(text):
    with pytest.raises(InputError) as err:
        parse_size(text, "bytes_per_producer")
    assert str(err.value).startswith("bytes_per_producer(=")


def test_format_size():
    assert format_size(4456448) == "4.25MiB"
    assert format_size(512) == "512B"
