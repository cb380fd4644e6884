"""The twelfth FA rule beside the one-GPU Triton rows of ``xstage results attention`` (issue 15 item 5;
``benchmarks/predict_fa_rule12.py``), as new keys only.

On each one-GPU Triton row of ``data/attention`` (``ranks`` 1, the record's platform) at an M of the fit record:
``e_res_predicted_rule12_<tag>_us`` (tag: the variant less ``fused_``) and ``rule12_held_out`` False (its regime
drifts are fitted on these residuals), and the judged block_n-64 run from the judged record: ``rule12_heldout5_run``,
``_record``, ``_median_within`` / ``_median_n`` (per configuration and variant, the rule's answer at the median
FA-only time against the median residual over repeats), ``_single_within`` / ``_single_n`` (each repeat alone),
``_prereg_median_within`` (the pre-registered answers), ``_rule11_m_``, ``_rule11_``, ``_rule10_`` and
``_rule9_median_within``, and on the refutation test's rows (``fused_wb_split`` at block_n != 128 in the high steps
regime, medians): ``_split_high_steps_n``, ``_split_high_steps_within`` (rule 12), ``_split_high_steps_rule11_m_within``
and ``_split_high_steps_min_us`` (the smallest measured median there). A record that is not there adds nothing.
"""

import json
from pathlib import Path

RULE12_FIT = "predictions/fa-rule12-fit-h200-pcie-host.json"
RULE12_HELDOUT = "predictions/fa-rule12-heldout5-b4fb3a7-h200-pcie-host.json"
FIT_SET = "attention"
SPLIT = "fused_wb_split"


def _heldout(path: Path, name: str) -> dict:
    rec = json.loads(path.read_text())
    s = rec.get("summary", {})
    med, one = s.get("median", {}), s.get("single", {})
    rows = rec.get("rows", [])
    runs = sorted({str(r.get("set")).split("#")[0] for r in rows})
    test = [r for r in rows if str(r.get("set")).endswith("#median") and r.get("variant") == SPLIT
            and r.get("rule12_regime") == "high" and int(r.get("kw", {}).get("block_n", 128)) != 128]
    out = {"rule12_heldout5_record": name, "rule12_heldout5_run": ",".join(runs),
           "rule12_heldout5_median_within": med.get("rule12", {}).get("within"),
           "rule12_heldout5_median_n": med.get("rule12", {}).get("n"),
           "rule12_heldout5_single_within": one.get("rule12", {}).get("within"),
           "rule12_heldout5_single_n": one.get("rule12", {}).get("n"),
           "rule12_heldout5_prereg_median_within": med.get("prereg_rule12", {}).get("within"),
           "rule12_heldout5_split_high_steps_n": len(test),
           "rule12_heldout5_split_high_steps_within": sum(bool(r.get("rule12_within")) for r in test),
           "rule12_heldout5_split_high_steps_rule11_m_within": sum(bool(r.get("rule11_m_within")) for r in test),
           "rule12_heldout5_split_high_steps_min_us": min((float(r["measured_E_res_us"]) for r in test), default=None)}
    for k in ("rule11_m", "rule11", "rule10", "rule9"):
        out[f"rule12_heldout5_{k}_median_within"] = med.get(k, {}).get("within")
    return out


def with_rule_keys(rows: list, data_dir: Path, rule: int, fit: str, heldout: str, heldout_keys) -> list:
    """``rows`` with a regime rule's keys on the one-GPU Triton rows of its fit record's platform: the record's
    fit-set answers per M as ``e_res_predicted_rule{rule}_<variant>_us``, ``rule{rule}_record`` / ``_held_out``,
    and ``heldout_keys(path, name)``'s figures of its held-out record when that exists (rules 11 and 12)."""
    f, h = Path(data_dir) / fit, Path(data_dir) / heldout
    if not f.is_file():
        return rows
    rec = json.loads(f.read_text())
    pred = {}
    for r in rec.get("rows", []):
        if r.get("set") == FIT_SET and f"rule{rule}_E_res_us" in r:
            pred.setdefault(int(r["M"]), {})[f"e_res_predicted_rule{rule}_{r['variant'][len('fused_'):]}_us"] = \
                float(r[f"rule{rule}_E_res_us"])
    held = heldout_keys(h, heldout) if h.is_file() else {}
    out = []
    for row in rows:
        at = pred.get(int(row.get("M", -1)))
        if at and row.get("ranks", 1) == 1 and row.get("platform") == rec.get("platform") and row.get("fa_core") == "triton":
            row = {**row, **at, f"rule{rule}_record": fit, f"rule{rule}_held_out": False, **held}
        out.append(row)
    return out


def with_rule12(rows: list, data_dir: Path, fit=RULE12_FIT, heldout=RULE12_HELDOUT) -> list:
    """``rows`` with the twelfth rule's keys on the one-GPU Triton rows (module docstring)."""
    return with_rule_keys(rows, data_dir, 12, fit, heldout, _heldout)
