"""The (K, B) grids of a calibration sweep: ``default`` (today's 4 x 4 grid), ``wide`` (issue 15) and fresh ones.

A grid names the producer counts K and per-producer sizes B of the rate / plateau / free-rate phases,
the (K, B) pairs of the gap sweeps, the isolated sweep's K and B, and how many of the gap sweeps are
also run free-running (``free_gaps``; the first ones of ``gap_configs``).

``wide`` adds pairs between and beyond the default grid -- K in {4, 8, 16, 24, 33, 48, 66, 99, 132},
B in {2, 4, 8, 16, 24, 32, 48, 64, 128, 256} KiB -- so that held-out pairs (see
``xstage.sim.platform_fit.split_pairs``) fall between fitted ones in both K and B; ten gap sweeps (the
default five plus five at new K and B), each also free-running; the isolated sweep at every K.

``fresh`` (session 7): K in {6, 12, 20, 40, 56, 80, 120} x B in {3, 6, 12, 20, 40, 96, 192} KiB, five gap sweeps
(each also free-running) and the isolated sweep at every K on 13 sizes of 3-224 KiB: no (K, B) pair of it is in
``wide``, so a model fitted on wide records is tested on pairs it never saw.

``fresh2`` (session 7, cal4): K in {10, 28, 44, 72, 104} x B in {5, 10, 28, 56, 160} KiB, four gap sweeps (each
also free-running), the isolated sweep at every K on 9 sizes of 5-160 KiB: no (K, B) pair of ``wide`` or ``fresh``.
``fresh3`` (session 8, cal5): K in {4, 11, 18, 26, 36, 52, 64, 88, 112, 132} x B in {3, 6, 14, 22, 36, 56, 80, 144, 224}
KiB, fourteen gap sweeps (each also free-running), ten of them capacity-limited under the session-7 gated host
platform (V - R T_iss0 > Q(K); ``capacity_limited``) at K from 11 to 132 and V from 2.0 to 29 MiB, and the isolated
sweep at every K on 12 sizes of 3-224 KiB. No (K, B) pair of ``wide``, ``fresh`` or ``fresh2``: K = 4 and 132 are
wide's, so every B of fresh3 (rate and isolated) is outside wide's sizes. Three of the capacity-limited sweeps sit
at B = 224 KiB, the largest B of their K, which the ``pairs`` split always keeps fitted (its per-K extremes), so
the fit half keeps at least three of them for every seed (seed 0: seven of ten); docs/calibration/fresh3.md.
``fresh4`` (session 8, cal6): a small grid for one short run testing the free-running law (``Platform.free_capacity_bound``;
docs/calibration/free-running.md): K in {14, 60, 128} x B in {9, 48, 176} KiB, four gap sweeps, each also
free-running -- (128, 176 KiB) = 22 MiB, (60, 96 KiB), (14, 176 KiB), (96, 9 KiB) -- and the isolated sweep on the
grid's three sizes. Every K is new to wide, fresh, fresh2 and fresh3, so no (K, B) pair of it is in any of them.
``fresh5`` (session 8, cal7): a small lockstep grid for one short run testing ``--model two-stage-gated2`` (the start
skew overlapping the aggregate ceiling; docs/calibration/issue-law.md): K in {7, 30, 76, 124} x B in {9, 18, 30, 68,
200} KiB, four gap sweeps -- (124, 18 KiB) and (124, 30 KiB), large K and mid B where the two laws differ most,
(76, 68 KiB), (30, 200 KiB) -- and the isolated sweep at every K on 7 sizes. Every K is new to wide, fresh, fresh2,
fresh3 and fresh4, so no (K, B) pair of it is in any of them.
``fresh7`` (session 9, cal9): a small grid for one short run testing the free-running law's own terms on local HBM
(``Platform.free_*``: no aggregate ceiling, the free drain rate; docs/calibration/free-local.md) and the host's
free law beyond the volumes measured so far: K in {22, 46, 94, 130} x B in {13, 40, 120, 200} KiB, three gap sweeps,
each also free-running -- (130, 320 KiB) = 40.6 MiB, a free burst larger than any measured after a gap (28.9 MiB),
(94, 288 KiB) = 26.4 MiB, and (130, 24 KiB) = 3.0 MiB at large K and short B -- and the isolated sweep on
{13, 40, 120} KiB (host sweep about 44 s, local 12 s by calib_fresh3_heldout's time model). Every K is new to every
earlier grid, so no (K, B) pair of it is in any.
``fresh10`` (session 10, knee10): a small lockstep grid for one short run testing a pooled host fit (``xstage calibrate
--pool``; docs/calibration/knee10.md) on a grid whose held-out half holds knee pairs at every split seed: K in {9, 34,
58, 84, 116} x B in {6, 16, 26, 36, 44, 88, 150} KiB -- under the session-7 gated host platform the knee ratio (V - R
T_iss0)/Q(K) steps across 1 at every K (9 x 150 KiB 1.07, 34 x 44 KiB 0.94, 58 x 36 KiB 1.06, 84 x 26 KiB 0.92,
116 x 26 KiB 1.04) -- eight gap sweeps, lockstep only, at the knee of the four larger K: (116, 26), (116, 44), (84, 26),
(84, 36), (58, 36), (58, 44), (34, 44), (34, 88) KiB (ratios 0.92-1.9; the ``pairs`` split holds out two to four of
them at seeds 0-4), and the isolated sweep at every K on {6, 16, 26, 44, 64, 88, 150} KiB. Every K is new to every
earlier grid, so no (K, B) pair of it is in any (host sweep about 31 s, local 19 s by calib_fresh3_heldout's time
model).
``fresh11`` (session 13): a small lockstep grid for one short run, the first fresh test of ``--model
two-stage-gated2-span-cc``'s own-fit refit under ``--split-rule bracket`` (docs/calibration/fresh11.md): K in {13, 38,
62, 92, 122} x B in {6, 14, 22, 26, 30, 36, 40, 56, 170} KiB -- three B <= 24 KiB (the span law's band) and, under the
session-7 gated host platform, the knee ratio (V - R T_iss0)/Q(K) across 1 at every K (13 x 170 KiB 1.73, 38 x 40 /
56 KiB 0.92 / 1.30, 62 x 30 / 40 KiB 0.92 / 1.22, 92 x 26 / 36 KiB 0.95 / 1.32, 122 x 22 / 30 KiB 0.89 / 1.22) --
eight gap sweeps, lockstep only, at those two pairs of each of the four larger K, and the isolated sweep at every K on
{6, 14, 22, 30, 48, 96, 170} KiB. Every K is new to every earlier grid, so no (K, B) pair of it is in any (host sweep
about 33 s, local 20 s by calib_fresh3_heldout's time model).
``fresh12`` (session 14, knee17): a small lockstep grid for one short run, the first fresh test of ``--model
two-stage-lockq``'s own-fit refit under ``--split-rule bracket`` (docs/calibration/knee17.md), built as fresh11: K in
{17, 42, 68, 100, 126} x B in {6, 14, 20, 24, 28, 32, 38, 44, 52, 160} KiB -- four B <= 24 KiB and, under the session-7
gated host platform, the knee ratio (V - R T_iss0)/Q(K) across 1 at every K (17 x 160 KiB 2.05, 42 x 38 / 52 KiB
0.93 / 1.28, 68 x 28 / 38 KiB 0.90 / 1.22, 100 x 24 / 32 KiB 0.91 / 1.21, 126 x 20 / 32 KiB 0.82 / 1.32) with one or
two B between those two at each of the four larger K (ratio 0.99-1.15: where fresh11's held-out pairs missed) --
eight gap sweeps, lockstep only, at those two pairs of each of the four larger K, and the isolated sweep at every K
on {6, 14, 20, 28, 48, 96, 160} KiB. Every K is new to every earlier grid, so no (K, B) pair of it is in any.
``fresh13`` (session 15, knee21): a small lockstep grid measured twice in one call, the fresh test of the
``repeat-median`` protocol (``two-stage-lockq`` fitted on the point-wise median of two runs; docs/calibration/knee21.md),
built as fresh12: K in {21, 47, 74, 106, 125} x B in {11, 19, 23, 27, 31, 35, 41, 47, 54, 180} KiB -- three B <= 24 KiB
and, under the session-7 gated host platform, the knee ratio (V - R T_iss0)/Q(K) across 1 at every K (21 x 180 KiB
2.74, 47 x 35 / 47 KiB 0.92 / 1.24, 74 x 27 / 35 KiB 0.90 / 1.17, 106 x 23 / 31 KiB 0.89 / 1.20, 125 x 23 / 31 KiB
0.94 / 1.27) with one B between those two at each of the four larger K (47 x 41 1.08, 74 x 31 1.03, 106 x 27 1.05,
125 x 27 1.11) -- eight gap sweeps, lockstep only, at those two pairs of each of the four larger K, and the isolated
sweep at every K on {11, 19, 27, 35, 58, 100, 180} KiB. Every K and every B is new to every earlier grid, so no (K, B)
pair of it is in any.
``fresh14`` (session 17): a small lockstep grid for the first fresh test of the product's ``xstage calibrate --repeat
2`` (the grid measured twice in one command, fitted on the point-wise median; data/calibration-extra/
fresh14-preregistration.md), built as fresh13: K in {19, 51, 79, 111, 127} x B in {15, 17, 21, 25, 29, 33, 34, 37, 43,
190} KiB -- three B <= 24 KiB and, under the session-7 gated host platform, the knee ratio across 1 at every K (19 x
190 KiB 2.67, 51 x 34 / 43 KiB 0.94 / 1.19, 79 x 25 / 34 KiB 0.86 / 1.17, 111 x 21 / 33 KiB 0.83 / 1.30, 127 x 21 / 29
KiB 0.87 / 1.20) with six pairs between those two (51 x 37 1.02, 79 x 29 / 33 0.99 / 1.13, 111 x 25 / 29 0.98 / 1.14,
127 x 25 1.03) -- eight gap sweeps, lockstep only, and the isolated sweep at every K on {15, 21, 29, 37, 62, 110, 190}
KiB. Every K and every B is new to every earlier grid.
``fresh15`` (session 18): a small lockstep grid for the fresh test of ``combo18`` (data/calibration-extra/
fresh15-preregistration.md), built as fresh14 on K in {25, 57, 85, 115, 129} x B in {12.5, 18.5, 22.5, 24.5, 26.5,
28.5, 30.5, 33.5, 40.5, 200.5} KiB: every whole KiB up to 38 is a B of an earlier grid, so the B are half-KiB (each a
multiple of 16 bytes) -- three B <= 24 KiB and, under the session-7 gated host platform, the knee ratio across 1 at
every K (25 x 200.5 KiB above 1, 57 x 30.5 / 40.5 KiB 0.89 / 1.19, 85 x 26.5 / 33.5 KiB 0.94 / 1.19, 115 x 22.5 /
30.5 KiB 0.90 / 1.22, 129 x 22.5 / 28.5 KiB 0.93 / 1.18) with seven pairs between those two (57 x 33.5 0.98, 85 x
28.5 / 30.5 1.01 / 1.08, 115 x 24.5 / 26.5 / 28.5 0.98 / 1.06 / 1.14, 129 x 24.5 / 26.5 1.02 / 1.10) -- eight gap
sweeps, lockstep only, and the isolated sweep at every K on {12.5, 22.5, 28.5, 40.5, 64.5, 120.5, 200.5} KiB. Every K
and every B is new to every earlier grid.
``fresh16`` (session 21): a second fresh test of ``combo18``, pre-registered after fresh15 met
(data/calibration-extra/fresh16-preregistration.md), built as fresh15 on K in {23, 55, 83, 113, 131} x B in {11.75,
21.25, 23.25, 25.25, 29.25, 31.25, 32.25, 35.25, 45.25, 210.25} KiB: every B a quarter-KiB (x.25 or x.75 KiB, each a
multiple of 256 bytes) new to every earlier grid -- three B <= 24 KiB and, under the session-7 gated host platform, the
knee ratio across 1 at every K (23 x 210.25 KiB above 1, 55 x 32.25 / 45.25 KiB 0.92 / 1.30, 83 x 25.25 / 35.25 KiB
0.88 / 1.24, 113 x 23.25 / 31.25 KiB 0.92 / 1.24, 131 x 21.25 / 29.25 KiB 0.88 / 1.22) with eight pairs between those
two (55 x 35.25 1.01, 83 x 29.25 / 31.25 / 32.25 1.03 / 1.10 / 1.13, 113 x 25.25 / 29.25 1.00 / 1.16, 131 x 23.25 /
25.25 0.97 / 1.05) -- eight gap sweeps, lockstep only, and the isolated sweep at every K on {11.75, 23.25, 29.25,
45.25, 66.25, 118.25, 210.25} KiB. Every K and every B is new to every earlier grid.
``quick`` shortens the runs (bursts, trials, volume) and the gap sweeps; on the default grid it also
shrinks the grid (the old ``--quick``), on the wide grid it keeps every (K, B) pair, so a dry run on the
simulator exercises the whole wide grid.
"""

from xstage.errors import InputError
from xstage.units import KiB, MiB

ISO_SIZES = tuple(k * KiB for k in (2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256))
DEFAULT_GAPS = ((132, 32 * KiB), (66, 64 * KiB), (33, 16 * KiB), (132, 8 * KiB), (16, 64 * KiB))
WIDE_K = (4, 8, 16, 24, 33, 48, 66, 99, 132)
FRESH_K = (6, 12, 20, 40, 56, 80, 120)
FRESH2_K = (10, 28, 44, 72, 104)
FRESH3_K = (4, 11, 18, 26, 36, 52, 64, 88, 112, 132)
# fresh3's gap sweeps: ten capacity-limited under the session-7 gated host platform, then four that are not
FRESH3_CAPACITY_SWEEPS = tuple((k, b * KiB) for k, b in ((11, 224), (18, 144), (26, 80), (36, 56), (36, 224), (64, 144),
                                                         (88, 36), (112, 80), (132, 36), (132, 224)))
FRESH4_K = (14, 60, 128)
FRESH5_K = (7, 30, 76, 124)
FRESH7_K = (22, 46, 94, 130)
FRESH10_K = (9, 34, 58, 84, 116)
FRESH11_K = (13, 38, 62, 92, 122)
FRESH12_K = (17, 42, 68, 100, 126)
FRESH13_K = (21, 47, 74, 106, 125)
FRESH14_K = (19, 51, 79, 111, 127)
FRESH15_K = (25, 57, 85, 115, 129)
FRESH16_K = (23, 55, 83, 113, 131)
FRESH3_OTHER_SWEEPS = tuple((k, b * KiB) for k, b in ((4, 224), (26, 14), (64, 6), (132, 14)))

GRIDS = {
    "default": dict(producers=(16, 33, 66, 132), sizes=(8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB),
                    gap_configs=DEFAULT_GAPS, iso_producers=(16, 33, 66, 132), iso_sizes=ISO_SIZES, free_gaps=1),
    "wide": dict(producers=WIDE_K, sizes=tuple(k * KiB for k in (2, 4, 8, 16, 24, 32, 48, 64, 128, 256)),
                 gap_configs=DEFAULT_GAPS + ((4, 256 * KiB), (8, 128 * KiB), (24, 48 * KiB), (48, 24 * KiB),
                                             (99, 16 * KiB)),
                 iso_producers=WIDE_K, iso_sizes=ISO_SIZES, free_gaps=10),
    # fresh (issue 15, session 7): (K, B) pairs none of which is in ``wide`` -- every K is new -- for one device run
    # that tests a model fitted on the committed wide records; about half the wide grid's configurations
    "fresh": dict(producers=FRESH_K, sizes=tuple(k * KiB for k in (3, 6, 12, 20, 40, 96, 192)),
                  gap_configs=((120, 40 * KiB), (56, 96 * KiB), (80, 12 * KiB), (20, 192 * KiB), (40, 20 * KiB)),
                  iso_producers=FRESH_K, iso_sizes=tuple(k * KiB for k in (3, 6, 10, 14, 20, 28, 36, 44, 56, 80, 112,
                                                                            160, 224)), free_gaps=5),
    # fresh2 (session 7, cal4): a small grid for one short run -- every K new to both wide and fresh
    "fresh2": dict(producers=FRESH2_K, sizes=tuple(k * KiB for k in (5, 10, 28, 56, 160)),
                   gap_configs=((104, 28 * KiB), (28, 160 * KiB), (44, 56 * KiB), (10, 10 * KiB)),
                   iso_producers=FRESH2_K, iso_sizes=tuple(k * KiB for k in (5, 10, 18, 28, 40, 56, 80, 120, 160)),
                   free_gaps=4),
    # fresh3 (session 8, cal5): about the wide grid's size, with many capacity-limited gap sweeps (module doc)
    "fresh3": dict(producers=FRESH3_K, sizes=tuple(k * KiB for k in (3, 6, 14, 22, 36, 56, 80, 144, 224)),
                   gap_configs=FRESH3_CAPACITY_SWEEPS + FRESH3_OTHER_SWEEPS, iso_producers=FRESH3_K,
                   iso_sizes=tuple(k * KiB for k in (3, 5, 7, 10, 18, 26, 36, 44, 72, 112, 160, 224)), free_gaps=14),
    # fresh4 (session 8, cal6): free-running bursts after long gaps at large V (module doc)
    "fresh4": dict(producers=FRESH4_K, sizes=tuple(k * KiB for k in (9, 48, 176)),
                   gap_configs=((128, 176 * KiB), (60, 96 * KiB), (14, 176 * KiB), (96, 9 * KiB)), iso_producers=FRESH4_K,
                   iso_sizes=tuple(k * KiB for k in (9, 48, 176)), free_gaps=4),
    # fresh5 (session 8, cal7): lockstep, large K x mid B, for two-stage-gated2's issue law (module doc)
    "fresh5": dict(producers=FRESH5_K, sizes=tuple(k * KiB for k in (9, 18, 30, 68, 200)),
                   gap_configs=((124, 18 * KiB), (124, 30 * KiB), (76, 68 * KiB), (30, 200 * KiB)), iso_producers=FRESH5_K,
                   iso_sizes=tuple(k * KiB for k in (9, 18, 30, 48, 68, 120, 200)), free_gaps=0),
    # fresh7 (session 9, cal9): free-running bursts, large V after gaps, several K (module doc)
    "fresh7": dict(producers=FRESH7_K, sizes=tuple(k * KiB for k in (13, 40, 120, 200)),
                   gap_configs=((130, 320 * KiB), (94, 288 * KiB), (130, 24 * KiB)), iso_producers=FRESH7_K,
                   iso_sizes=tuple(k * KiB for k in (13, 40, 120)), free_gaps=3),
    # fresh10 (session 10, knee10): lockstep, knee pairs at every K, for a pooled host fit (module doc)
    "fresh10": dict(producers=FRESH10_K, sizes=tuple(k * KiB for k in (6, 16, 26, 36, 44, 88, 150)),
                    gap_configs=tuple((k, b * KiB) for k, b in ((116, 26), (116, 44), (84, 26), (84, 36), (58, 36),
                                                                 (58, 44), (34, 44), (34, 88))),
                    iso_producers=FRESH10_K, iso_sizes=tuple(k * KiB for k in (6, 16, 26, 44, 64, 88, 150)),
                    free_gaps=0),
    # fresh11 (session 13): lockstep, the knee straddled at every K, a fresh test of span-cc's own fit (module doc)
    "fresh11": dict(producers=FRESH11_K, sizes=tuple(k * KiB for k in (6, 14, 22, 26, 30, 36, 40, 56, 170)),
                    gap_configs=tuple((k, b * KiB) for k, b in ((122, 22), (122, 30), (92, 26), (92, 36), (62, 30),
                                                                 (62, 40), (38, 40), (38, 56))),
                    iso_producers=FRESH11_K, iso_sizes=tuple(k * KiB for k in (6, 14, 22, 30, 48, 96, 170)),
                    free_gaps=0),
    # fresh12 (session 14, knee17): lockstep, as fresh11 on five new K, a fresh test of two-stage-lockq (module doc)
    "fresh12": dict(producers=FRESH12_K, sizes=tuple(k * KiB for k in (6, 14, 20, 24, 28, 32, 38, 44, 52, 160)),
                    gap_configs=tuple((k, b * KiB) for k, b in ((126, 20), (126, 32), (100, 24), (100, 32), (68, 28),
                                                                 (68, 38), (42, 38), (42, 52))),
                    iso_producers=FRESH12_K, iso_sizes=tuple(k * KiB for k in (6, 14, 20, 28, 48, 96, 160)),
                    free_gaps=0),
    # fresh13 (session 15, knee21): lockstep, as fresh12 on new K and B, measured twice for repeat-median (module doc)
    "fresh13": dict(producers=FRESH13_K, sizes=tuple(k * KiB for k in (11, 19, 23, 27, 31, 35, 41, 47, 54, 180)),
                    gap_configs=tuple((k, b * KiB) for k, b in ((125, 23), (125, 31), (106, 23), (106, 31), (74, 27),
                                                                 (74, 35), (47, 35), (47, 47))),
                    iso_producers=FRESH13_K, iso_sizes=tuple(k * KiB for k in (11, 19, 27, 35, 58, 100, 180)),
                    free_gaps=0),
    # fresh14 (session 17): lockstep, as fresh13 on new K and B, for `xstage calibrate --repeat 2` (module doc)
    "fresh14": dict(producers=FRESH14_K, sizes=tuple(k * KiB for k in (15, 17, 21, 25, 29, 33, 34, 37, 43, 190)),
                    gap_configs=tuple((k, b * KiB) for k, b in ((127, 21), (127, 29), (111, 21), (111, 33), (79, 25),
                                                                 (79, 34), (51, 34), (51, 43))),
                    iso_producers=FRESH14_K, iso_sizes=tuple(k * KiB for k in (15, 21, 29, 37, 62, 110, 190)),
                    free_gaps=0),
    # fresh15 (session 18): lockstep, as fresh14 on new K and new (half-KiB) B, for combo18's fresh test (module doc)
    "fresh15": dict(producers=FRESH15_K, sizes=tuple(int(k * KiB) for k in (12.5, 18.5, 22.5, 24.5, 26.5, 28.5, 30.5,
                                                                            33.5, 40.5, 200.5)),
                    gap_configs=tuple((k, int(b * KiB)) for k, b in ((129, 22.5), (129, 28.5), (115, 22.5), (115, 30.5),
                                                                      (85, 26.5), (85, 33.5), (57, 30.5), (57, 40.5))),
                    iso_producers=FRESH15_K, iso_sizes=tuple(int(k * KiB) for k in (12.5, 22.5, 28.5, 40.5, 64.5, 120.5,
                                                                                    200.5)),
                    free_gaps=0),
    # fresh16 (session 21): lockstep, as fresh15 on new K and new (quarter-KiB) B, combo18's second fresh test
    "fresh16": dict(producers=FRESH16_K, sizes=tuple(int(k * KiB) for k in (11.75, 21.25, 23.25, 25.25, 29.25, 31.25,
                                                                            32.25, 35.25, 45.25, 210.25)),
                    gap_configs=tuple((k, int(b * KiB)) for k, b in ((131, 21.25), (131, 29.25), (113, 23.25),
                                                                      (113, 31.25), (83, 25.25), (83, 35.25),
                                                                      (55, 32.25), (55, 45.25))),
                    iso_producers=FRESH16_K, iso_sizes=tuple(int(k * KiB) for k in (11.75, 23.25, 29.25, 45.25, 66.25,
                                                                                    118.25, 210.25)),
                    free_gaps=0),
}

# what each grid is for, for `xstage calibrate --grids`: (role, page under docs/calibration/, one line)
GRID_ROLE = {
    "default": ("default", "first-runs.md", "the first 4 x 4 grid; enough for the default model v1"),
    "wide": ("recommended", "wide-rerun.md", "pairs between and beyond the default grid, every gap sweep also "
             "free-running; with --model two-stage-gated2 it met the held-out targets on host and local"),
    "fresh": ("study", "two-stage-gated.md", "session 7: every K new to wide, to test a wide-fitted platform"),
    "fresh2": ("study", "two-stage-gated.md", "session 7: a small grid new to wide and fresh"),
    "fresh3": ("study", "fresh3.md", "session 8: about wide's size, ten capacity-limited gap sweeps"),
    "fresh4": ("study", "free-running.md", "session 8: free-running bursts at large volume after long gaps"),
    "fresh5": ("study", "issue-law.md", "session 8: lockstep, large K x mid B, for two-stage-gated2's issue law"),
    "fresh7": ("study", "free-local.md", "session 9: free-running law's own terms on local HBM, larger volumes"),
    "fresh10": ("study", "knee10.md", "session 10: lockstep knee pairs at every K, for a pooled host fit (--pool)"),
    "fresh11": ("study", "fresh11.md", "session 13: the knee straddled at every K, for two-stage-gated2-span-cc"),
    "fresh12": ("study", "knee17.md", "session 14: as fresh11 on new K, for two-stage-lockq's own-split refit"),
    "fresh13": ("study", "knee21.md", "session 15: as fresh12 on new K and B, measured twice (repeat-median)"),
    "fresh14": ("study", "fresh14.md", "session 17: as fresh13 on new K and B, for --repeat 2"),
    "fresh15": ("study", "combo18.md", "session 18: as fresh14 on new K and half-KiB B, combo18's fresh test "
                "(met, 4 of 5 seeds)"),
    "fresh16": ("study", "combo18.md", "session 21: as fresh15 on new K and quarter-KiB B, combo18's second fresh "
                "test"),
}


def grid_rows() -> list[dict]:
    """One row per grid, as ``xstage calibrate --grids`` prints them: its role (default, recommended, study), what it
    is for, its page, and its shape (``describe_grid``)."""
    return [{"grid": name, "role": GRID_ROLE[name][0], "what": GRID_ROLE[name][2],
             "page": "docs/calibration/" + GRID_ROLE[name][1], "shape": describe_grid(name)} for name in GRIDS]


QUICK_RUNS = dict(gap_fractions=(0.25, 0.5, 0.75, 1.0, 1.5), bursts=12, iso_bursts=4, trials=2,
                  steady_bytes=16 * MiB, max_bursts=128)
QUICK_GRIDS = {
    "default": dict(producers=(16, 132), sizes=(8 * KiB, 64 * KiB), gap_configs=((132, 32 * KiB),),
                    iso_producers=(132,), iso_sizes=tuple(k * KiB for k in (8, 32, 64, 128, 256)), free_gaps=1),
    "wide": dict(gap_configs=((132, 32 * KiB), (24, 48 * KiB)), free_gaps=2),
    "fresh": dict(gap_configs=((120, 40 * KiB), (20, 192 * KiB)), free_gaps=2),
    "fresh2": dict(gap_configs=((104, 28 * KiB), (10, 10 * KiB)), free_gaps=2),
    "fresh3": dict(gap_configs=((132, 36 * KiB), (26, 14 * KiB)), free_gaps=2),
    "fresh4": dict(gap_configs=((128, 176 * KiB), (96, 9 * KiB)), free_gaps=2),
    "fresh5": dict(gap_configs=((124, 18 * KiB), (76, 68 * KiB)), free_gaps=0),
    "fresh7": dict(gap_configs=((130, 320 * KiB), (130, 24 * KiB)), free_gaps=2),
    "fresh10": dict(gap_configs=((116, 26 * KiB), (58, 44 * KiB)), free_gaps=0),
    "fresh11": dict(gap_configs=((122, 22 * KiB), (62, 40 * KiB)), free_gaps=0),
    "fresh12": dict(gap_configs=((126, 20 * KiB), (68, 38 * KiB)), free_gaps=0),
    "fresh13": dict(gap_configs=((125, 23 * KiB), (74, 35 * KiB)), free_gaps=0),
    "fresh14": dict(gap_configs=((127, 21 * KiB), (79, 34 * KiB)), free_gaps=0),
    "fresh15": dict(gap_configs=((129, int(22.5 * KiB)), (85, int(33.5 * KiB))), free_gaps=0),
    "fresh16": dict(gap_configs=((131, int(21.25 * KiB)), (83, int(35.25 * KiB))), free_gaps=0),
}


def capacity_limited(k: int, b: int, platform) -> bool:
    """Whether a lockstep burst of K producers x B bytes is capacity-limited under ``platform``: what is left after
    one backpressure-free issue at the drain rate, V - R T_iss0(K, B), exceeds the capacity Q(K)."""
    return k * b - platform.drain_rate_GBps * 1e3 * platform.issue_time0_us(k, b) > platform.capacity_bytes(k)


def describe_grid(grid: str) -> str:
    """One line for ``--help``: the grid's K and B, its gap sweeps (how many also free-running) and the isolated
    sweep's K and sizes, read from ``GRIDS`` (the module doc says what each grid is for)."""
    g = grid_fields(grid)
    kib = lambda sizes: ",".join(f"{b / KiB:g}" for b in sizes)   # noqa: E731  (fresh15-16: half, quarter KiB)
    iso = "at every K" if tuple(g["iso_producers"]) == tuple(g["producers"]) else \
        "at K " + ",".join(map(str, g["iso_producers"]))
    return (f"{grid} (K {','.join(map(str, g['producers']))} x B {kib(g['sizes'])} KiB; {len(g['gap_configs'])} gap "
            f"sweeps, {g['free_gaps']} also free-running; isolated sweep {iso} on {len(g['iso_sizes'])} sizes)")


def grid_fields(grid: str, quick: bool = False) -> dict:
    """The CalibConfig fields of a grid (and of its quick variant)."""
    if grid not in GRIDS:
        raise InputError("--grid", grid, f"must be one of {', '.join(GRIDS)}")
    fields = dict(GRIDS[grid])
    if quick:
        fields.update(QUICK_RUNS, **QUICK_GRIDS[grid])
    return fields
