"""The capacity axis' configuration: the parameter sections it reads and the fixed settings it does not let a
parameters file change.

The sections are `axes.capacity` (`CapacityParams`: the phases' bounds, the step and soak sizes, the saturation
tolerances, the client's self-calibration) and `axes.capacity.roofline` (`RooflineParams`: the memory-bandwidth
bound's GPU, bandwidth, parameters and dtype), declared once in `k3lib.core.params`, where the whole parameters file
is validated at once, and read from there. The constants below are the axis' own bounds, counts, intervals and
tolerances."""

from __future__ import annotations

__all__ = [
    "CALIBRATION_BOUND_S",
    "CHUNKS",
    "DECODE_SHARE_MIN",
    "DEFAULT_ITL_MS",
    "DEFAULT_TTFT_MS",
    "HEALTH_TIMEOUT_S",
    "HIT_RATE_FLOOR",
    "HIT_SHARE_MIN",
    "ITL_RANGE_MS",
    "KV_FULL",
    "MIN_GAPS",
    "OOM_AFTER_S",
    "OOM_BEFORE_S",
    "PHASE_OVERHEAD_S",
    "POOL_SHARE_MIN",
    "ROUNDS_BUDGET_S",
    "SESSION_MAX_TURNS",
    "SESSION_MIN_TURNS",
    "SESSION_REUSE_MIN",
    "TTFT_RANGE_MS",
]

# -- the run's bounds ----------------------------------------------------------------------------------------
# One /health (or /v1/models) poll, and the /v1/models read at ready.
HEALTH_TIMEOUT_S = 5.0
# Headroom each phase is granted on top of its load bounds: prompt sizing with /tokenize, boundary scrapes,
# health checks, and the load generator's grace for cancelled requests (load.CANCEL_GRACE_S).
PHASE_OVERHEAD_S = 10.0
# The client self-calibration before the steps, whatever the local server does: its start, a warm-up and one round
# per calibrated concurrency (each at most 0.5 s + 19 × 50 ms of schedule, see trust.py), then its stop.
CALIBRATION_BOUND_S = 30.0

# -- the client's self-calibration (trust.py) ----------------------------------------------------------------
# The known-timing schedule is taken from what the long-context phase measured, clamped so a calibration stays
# cheap (≤ 0.5 s + 19 gaps × 50 ms per round) and never faster than a real engine streams.
TTFT_RANGE_MS = (20.0, 500.0)
ITL_RANGE_MS = (5.0, 50.0)
DEFAULT_TTFT_MS = 50.0
DEFAULT_ITL_MS = 10.0
CHUNKS = 20
# Rounds per calibrated concurrency: enough inter-chunk gaps that their p99 is not just the single worst one, within
# a few seconds of schedule whatever the known timing is.
MIN_GAPS = 200
ROUNDS_BUDGET_S = 3.0

# -- saturation (analysis.py) --------------------------------------------------------------------------------
KV_FULL = 0.9  # KV usage at or above this: the engine cannot admit a new request without evicting

# -- ranks of one deployment (ranks.py) ----------------------------------------------------------------------
POOL_SHARE_MIN = 0.9    # a rank's KV pool below this share of its peers' median is not the same deployment
DECODE_SHARE_MIN = 0.5  # nor one decoding a sequence at less than half its peers' median rate
HIT_SHARE_MIN = 0.5     # nor one reusing prefixes at less than half its peers' median hit rate (soak)
HIT_RATE_FLOOR = 0.1    # ...when the peers reuse at all

# -- agent sessions (sessionjudge.py, sessions.py) -------------------------------------------------------------
SESSION_REUSE_MIN = 0.5  # later turns must find at least this share of their own history in the prefix cache
SESSION_MAX_TURNS = 16  # user and tool-result turns of one generated session, at most (the longest exchange first)
# a session plays at least this many turns, past its level's duration if need be: its history resent twice (the
# tool exchange included), so even a slow server shows whether sessions hold and reuse their history
SESSION_MIN_TURNS = 3

# -- the OOM event (result.py) -------------------------------------------------------------------------------
# The memory curve kept around an OOM (seconds before and after the failure).
OOM_BEFORE_S = 60.0
OOM_AFTER_S = 30.0
