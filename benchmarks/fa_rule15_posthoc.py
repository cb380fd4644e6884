"""Rule 15 post hoc (tri15, session 11): calibrate-then-predict per build, leave-one-in on the d128 bn128 in-pair points.
Each point in turn calibrates the drift (fit_drift on its L) and beta_c; the others are scored on L and on
fused - FA-only = L_hat - beta_c * (measured FA-only event time). Run: python benchmarks/fa_rule15_posthoc.py"""
import sys; sys.path.insert(0, "benchmarks")
import fa_link_cost as F
from xstage.sim.predict_link import link_cost, within
platform, base, laws = F.inputs()
pts = []
for r in ("0dfa499-inpair", "de0efae-rule13", "a86e88c-rule14"):
    pts += [p for p in F.measured_points(base / "attention-runs" / r, r) if p["head_dim"] == 128 and p["block_n"] == 128]
nL = nF = n = nS = nSn = 0
for c in pts:
    d = F.stall_fit([c], platform)["drift"]
    for p in pts:
        if p is c: continue
        Lh = link_cost(F.kernel(p), platform, F.Q_C_BYTES, d)["link_us"]
        fh = Lh - c["beta_c"] * p["fa_event_us"]
        n += 1; nL += within(Lh, p["link_us"]); nF += within(fh, p["d_split_us"])
        if p["s_us"] is not None: nSn += 1; nS += within(fh, p["s_us"])
    print(c["run"], c["M"], c["heads"], d, flush=True)
print("L", nL, "/", n, " fused-FA inpair", nF, "/", n, " fused-FA standard", nS, "/", nSn)
