#!/usr/bin/env bash
# knee21 (session 15): one device call, pre-registered in data/calibration-extra/knee21-preregistration.md: the new
# host grid fresh13 measured twice in separate processes (r1, r2: the repeat-median protocol's two runs), then
# knee18's pending fresh11 repeat (r2) if the budget leaves room -- knee18.sh's command for each sweep
# (`xstage calibrate --target host --grid G --model v1 --no-copy`); a sweep starts only while BUDGET_S (230 s)
# leaves ~50 s for it. Run from the staged copy's root with $OUT set; writes $OUT/res.tgz.
SWEEPS="fresh13:r1 fresh13:r2 fresh11:r2" BUDGET_S=${BUDGET_S:-230} exec bash "$(dirname "$0")/knee18.sh"
