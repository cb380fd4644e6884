#!/usr/bin/env bash
# fresh12 (session 14, knee17): one device call, pre-registered in data/calibration-extra/fresh12-preregistration.md:
# xstage calibrate --grid fresh12 on host and local, as knee10.sh does for fresh10. Writes $OUT/res.tgz.
GRID=fresh12 exec bash "$(dirname "$0")/knee10.sh"
