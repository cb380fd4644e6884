"""The tenth FA rule beside the one-GPU Triton rows of ``xstage results attention`` (issue 15 item 5;
``benchmarks/predict_fa_rule10.py``), as new keys only.

On each one-GPU Triton row of ``data/attention`` (``ranks`` 1, the record's platform) at an M of the fit record:
``e_res_predicted_rule10_<tag>_us`` (tag: the variant less ``fused_``) and ``rule10_held_out`` False (its split-kernel
drift is fitted on these residuals), and the run that judged it from the judged record: ``rule10_heldout3_run``,
``_record``, ``_within``, ``_n`` (every row, the 6-head rows included, FA-only measured), ``_prereg_within`` /
``_prereg_n`` (the pre-registered 3-head rows, FA-only interpolated), ``_rule9_within`` on the same rows as
``_within``. A record that is not there adds nothing; other rows unchanged.
"""

import json
from pathlib import Path

from xstage.compare.attention_rule11 import with_rule11

RULE10_FIT = "predictions/fa-rule10-fit-h200-pcie-host.json"
RULE10_HELDOUT = "predictions/fa-rule10-heldout3-63fb3ec-h200-pcie-host.json"
FIT_SET = "attention"


def with_rule10(rows: list, data_dir: Path, fit=RULE10_FIT, heldout=RULE10_HELDOUT) -> list:
    """``rows`` with the tenth rule's keys on the one-GPU Triton rows (module docstring)."""
    f, h = Path(data_dir) / fit, Path(data_dir) / heldout
    if not f.is_file():
        return with_rule11(rows, data_dir)
    rec = json.loads(f.read_text())
    pred = {}
    for r in rec.get("rows", []):
        if r.get("set") == FIT_SET and "rule10_E_res_us" in r:
            pred.setdefault(int(r["M"]), {})[f"e_res_predicted_rule10_{r['variant'][len('fused_'):]}_us"] = \
                float(r["rule10_E_res_us"])
    held = {}
    if h.is_file():
        hr = json.loads(h.read_text())
        a, p = hr.get("summary", {}).get("all", {}), hr.get("summary", {}).get("pre-registered rows", {})
        held = {"rule10_heldout3_record": heldout,
                "rule10_heldout3_run": ",".join(sorted({str(r.get("set")) for r in hr.get("rows", [])})),
                "rule10_heldout3_within": a.get("rule10", {}).get("within"), "rule10_heldout3_n": a.get("rule10", {}).get("n"),
                "rule10_heldout3_prereg_within": p.get("prereg_rule10", {}).get("within"),
                "rule10_heldout3_prereg_n": p.get("prereg_rule10", {}).get("n"),
                "rule10_heldout3_rule9_within": a.get("rule9", {}).get("within")}
    out = []
    for row in rows:
        at = pred.get(int(row.get("M", -1)))
        if at and row.get("ranks", 1) == 1 and row.get("platform") == rec.get("platform") and row.get("fa_core") == "triton":
            row = {**row, **at, "rule10_record": fit, "rule10_held_out": False, **held}
        out.append(row)
    return with_rule11(out, data_dir)        # the eleventh rule's keys beside (compare/attention_rule11.py)
