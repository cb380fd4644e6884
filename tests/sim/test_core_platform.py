import json

import pytest

from xstage.errors import InputError
from xstage.sim.platform import Platform, bundled_platforms, load_platform
from xstage.records.platform import save_platform


def test_paper_b200_matches_the_paper():
    p = load_platform("paper-b200")
    assert p.sm_count == 148
    assert p.drain_rate_GBps == 717.0
    assert p.capacity_bytes(148) == pytest.approx(4.25 * 2**20)
    assert p.issue_time0_us(148, 32 * 1024) == pytest.approx(0.76)
    # T_iss0 grows linearly in B, does not depend on K (no injection ceiling)
    assert p.issue_time0_us(16, 64 * 1024) == pytest.approx(0.12 + 2 * 0.64)
    assert p.capacity_bytes(74) == pytest.approx(4.25 * 2**20 / 2)
    assert p.capacity_bytes(200) == pytest.approx(4.25 * 2**20)


def test_capacity_interpolates_between_points():
    p = Platform("x", 132, 50.0, 1.0, 20.0, ((10, 1000.0), (110, 2000.0)))
    assert p.capacity_bytes(5) == pytest.approx(500.0)
    assert p.capacity_bytes(60) == pytest.approx(1500.0)
    assert p.capacity_bytes(132) == pytest.approx(2000.0)


def test_injection_ceiling_makes_t_iss0_grow_with_k():
    p = Platform("x", 132, 50.0, 1.0, 10.0, ((132, 1e6),), injection_GBps=40.0)
    assert p.issue_time0_us(1, 10_000) == pytest.approx(1.0 + 1.0)
    assert p.issue_time0_us(8, 10_000) == pytest.approx(1.0 + 2.0)


def test_round_trip(tmp_path):
    p = load_platform("paper-b200")
    path = save_platform(p, tmp_path / "p.json")
    q = Platform.load(path)
    assert q == p and q.content_hash == p.content_hash
    with pytest.raises(InputError, match="already exists"):
        save_platform(p, path)


@pytest.mark.parametrize("field,value", [
    ("drain_rate_GBps", 0), ("drain_rate_GBps", -1), ("sm_count", 0), ("producer_issue_GBps", "fast"),
    ("t_fixed_us", -0.1), ("capacity_points", []), ("capacity_points", [[0, 5]]), ("capacity_points", [[4, -1]]),
    ("name", ""),
])
def test_invalid_fields_name_field_and_value(field, value):
    d = load_platform("paper-b200").to_dict()
    d[field] = value
    with pytest.raises(InputError) as err:
        Platform.from_dict(d)
    assert field.split("_GBps")[0] in str(err.value) or "capacity_points" in str(err.value)
    assert repr(value) in str(err.value) or "capacity_points" in str(err.value)


def test_bad_files(tmp_path):
    wrong = load_platform("paper-b200").to_dict() | {"schema_version": 99}
    (tmp_path / "v.json").write_text(json.dumps(wrong))
    with pytest.raises(InputError, match="schema_version"):
        load_platform(tmp_path / "v.json")
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_platform(str(tmp_path / "m.json"))
    with pytest.raises(InputError, match="unknown"):
        load_platform("no-such-platform")
    extra = load_platform("paper-b200").to_dict() | {"colour": "red"}
    (tmp_path / "e.json").write_text(json.dumps(extra))
    with pytest.raises(InputError, match="colour"):
        load_platform(tmp_path / "e.json")


def test_bundled_list():
    assert "paper-b200" in bundled_platforms()
