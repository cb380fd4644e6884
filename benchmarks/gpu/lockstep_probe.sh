#!/usr/bin/env bash
# session 12 (skew17): one device call: the pre-registered lockstep finite runs with a same-process skew probe
# (benchmarks/gpu/lockstep_drained.py --probe: per target, one 2 KiB run per K of the grid before the grid) three
# times in three separate processes (data/calibration-extra/skew17-preregistration.md). Results: $OUT/probe.tgz.
exec bash "$(dirname "$0")/lockstep_repeat.sh" --probe
