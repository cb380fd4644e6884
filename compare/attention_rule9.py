"""The ninth FA rule beside the one-GPU Triton rows of ``xstage results attention`` (issue 15 item 5;
``benchmarks/predict_fa_rule9.py``), as new keys only.

On each one-GPU Triton row of ``data/attention`` (``ranks`` 1, the record's platform) at an M of the fit record:
``e_res_predicted_rule9_<tag>_us`` (tag: the variant less ``fused_``) and ``rule9_held_out`` False (its split-kernel
drift is fitted on these residuals), and the fresh run's figures from the judged record: ``rule9_heldout2_run``,
``_record``, ``_within``, ``_n``, ``_median_abs_error_us``, ``_prereg_within`` (the pre-registered answers), and the
eighth and seventh rules' ``_within`` on the same rows. A record that is not there adds nothing; other rows unchanged.
"""

import json
from pathlib import Path

from xstage.compare.attention_rule10 import with_rule10

RULE9_FIT = "predictions/fa-rule9-fit-h200-pcie-host.json"
RULE9_HELDOUT = "predictions/fa-rule9-heldout2-6c1c349-h200-pcie-host.json"
FIT_SET = "attention"


def with_rule9(rows: list, data_dir: Path, fit=RULE9_FIT, heldout=RULE9_HELDOUT) -> list:
    """``rows`` with the ninth rule's keys on the one-GPU Triton rows (module docstring)."""
    f, h = Path(data_dir) / fit, Path(data_dir) / heldout
    if not f.is_file():
        return with_rule10(rows, data_dir)
    rec = json.loads(f.read_text())
    pred = {}
    for r in rec.get("rows", []):
        if r.get("set") == FIT_SET and "rule9_E_res_us" in r:
            pred.setdefault(int(r["M"]), {})[f"e_res_predicted_rule9_{r['variant'][len('fused_'):]}_us"] = \
                float(r["rule9_E_res_us"])
    held = {}
    if h.is_file():
        hr = json.loads(h.read_text())
        a = hr.get("summary", {}).get("all", {})
        held = {"rule9_heldout2_record": heldout,
                "rule9_heldout2_run": ",".join(sorted({str(r.get("set")) for r in hr.get("rows", [])})),
                "rule9_heldout2_within": a.get("rule9", {}).get("within"), "rule9_heldout2_n": a.get("rule9", {}).get("n"),
                "rule9_heldout2_median_abs_error_us": a.get("rule9", {}).get("median_abs_error_us"),
                "rule9_heldout2_prereg_within": a.get("prereg_rule9", {}).get("within"),
                "rule9_heldout2_rule8_within": a.get("rule8", {}).get("within"),
                "rule9_heldout2_rule7_within": a.get("rule7", {}).get("within")}
    out = []
    for row in rows:
        at = pred.get(int(row.get("M", -1)))
        if at and row.get("ranks", 1) == 1 and row.get("platform") == rec.get("platform") and row.get("fa_core") == "triton":
            row = {**row, **at, "rule9_record": fit, "rule9_held_out": False, **held}
        out.append(row)
    return with_rule10(out, data_dir)          # the tenth rule's keys beside (compare/attention_rule10.py)
