"""``xstage calibrate --models``: every model ``--model`` takes, with its standing and the page that measured it."""

import json
from pathlib import Path

from xstage.sim.platform_fit import DEFAULT_MODEL, MODEL_STANDING, MODELS, RECOMMENDED_MODEL, model_standing

ROOT = Path(__file__).resolve().parents[2]
STANDINGS = {"default", "recommended", "alternative", "superseded", "refuted", "not qualified", "opt-in"}


def test_every_model_has_one_standing_and_an_existing_page():
    assert list(MODEL_STANDING) == list(MODELS)
    rows = model_standing()
    assert {r["standing"] for r in rows} <= STANDINGS
    assert [r["model"] for r in rows if r["standing"] == "default"] == [DEFAULT_MODEL]
    assert [r["model"] for r in rows if r["standing"] == "recommended"] == [RECOMMENDED_MODEL]
    missing = [r["page"] for r in rows if not (ROOT / r["page"]).is_file()]
    assert not missing
    for r in rows:   # each page names the model it stands for
        text = (ROOT / r["page"]).read_text()
        assert f"`{r['model']}`" in text or r["model"] in text, r


def test_models_lists_every_model_without_out(cli):
    code, out, err = cli("calibrate", "--models")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == list(MODELS)
    assert "recommended" in lines[list(MODELS).index(RECOMMENDED_MODEL)]
    assert "docs/calibration/wide-rerun.md" in out


def test_models_json_is_the_rows(cli):
    code, out, _ = cli("calibrate", "--models", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["default"] == DEFAULT_MODEL and doc["recommended"] == RECOMMENDED_MODEL
    assert doc["models"] == model_standing()


def test_calibrate_without_out_is_one_line_naming_out(cli):
    code, out, err = cli("calibrate", "--sim", "paper-b200", "--target", "host")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--out" in err and "Traceback" not in err
