"""The eleventh FA rule beside the one-GPU Triton rows of ``xstage results attention`` (issue 15 item 5;
``benchmarks/predict_fa_rule11.py``), as new keys only.

On each one-GPU Triton row of ``data/attention`` (``ranks`` 1, the record's platform) at an M of the fit record:
``e_res_predicted_rule11_<tag>_us`` (tag: the variant less ``fused_``) and ``rule11_held_out`` False (its regime
drifts are fitted on these residuals), and the judged run with repeats from the judged record:
``rule11_heldout4_run``, ``_record``, ``_median_within`` / ``_median_n`` (per configuration and variant, the rule's
answer at the median FA-only time against the median residual over repeats), ``_single_within`` / ``_single_n``
(each repeat alone), ``_prereg_median_within`` (the pre-registered answers, FA-only estimated), the declared
alternative's and the tenth and ninth rules' ``_median_within`` (``_rule11_m_``, ``_rule10_``, ``_rule9_``), and
``_split_max_range_us`` (the largest range over repeats of ``fused_wb_split``'s residual at one configuration).
A record that is not there adds nothing; other rows unchanged.
"""

import json
from pathlib import Path

from xstage.compare.attention_rule12 import with_rule12, with_rule_keys

RULE11_FIT = "predictions/fa-rule11-fit-h200-pcie-host.json"
RULE11_HELDOUT = "predictions/fa-rule11-heldout4-ad8f0af-h200-pcie-host.json"
SPLIT = "fused_wb_split"


def _heldout(path: Path, name: str) -> dict:
    rec = json.loads(path.read_text())
    s = rec.get("summary", {})
    med, one = s.get("median", {}), s.get("single", {})
    runs = sorted({str(r.get("set")).split("#")[0] for r in rec.get("rows", [])})
    ranges = [r["spread"]["range"] for r in rec.get("rows", []) if r.get("variant") == SPLIT and "spread" in r]
    out = {"rule11_heldout4_record": name, "rule11_heldout4_run": ",".join(runs),
           "rule11_heldout4_median_within": med.get("rule11", {}).get("within"),
           "rule11_heldout4_median_n": med.get("rule11", {}).get("n"),
           "rule11_heldout4_single_within": one.get("rule11", {}).get("within"),
           "rule11_heldout4_single_n": one.get("rule11", {}).get("n"),
           "rule11_heldout4_prereg_median_within": med.get("prereg_rule11", {}).get("within"),
           "rule11_heldout4_split_max_range_us": max(ranges) if ranges else None}
    for k in ("rule11_m", "rule10", "rule9"):
        out[f"rule11_heldout4_{k}_median_within"] = med.get(k, {}).get("within")
    return out


def with_rule11(rows: list, data_dir: Path, fit=RULE11_FIT, heldout=RULE11_HELDOUT) -> list:
    """``rows`` with the eleventh rule's keys on the one-GPU Triton rows (module docstring), then the twelfth's."""
    return with_rule12(with_rule_keys(rows, data_dir, 11, fit, heldout, _heldout), data_dir)
