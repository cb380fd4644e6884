#!/usr/bin/env bash
# fresh11 (session 13): one device call, pre-registered in data/calibration-extra/fresh11-preregistration.md:
# xstage calibrate --grid fresh11 on host and local, as knee10.sh does for fresh10. Writes $OUT/res.tgz.
GRID=fresh11 exec bash "$(dirname "$0")/knee10.sh"
