"""Axis 2's fixed settings: the bounds and defaults the runner and the checks use that no parameter sets.

The `axes.agent` section of the parameters file is `AgentParams`, declared once in `k3lib/core/params.py`, where the
whole parameters file is validated at once; the axis reads it as `params.axes.agent`.
"""

from __future__ import annotations

from ...core.params import AgentParams

__all__ = [
    "CANCEL_GRACE_S",
    "DEFAULT_MIN_PASS_RATE",
    "ECHO_WORDS",
    "MAX_FILLER_LINES",
    "TOKENS_PER_LINE_GUESS",
]

#: After a level's deadline, how long in-flight requests get to hand back their (cancelled) records.
CANCEL_GRACE_S = 5.0
#: First guess of tokens per filler log line; refined from `usage` as the long exchange grows.
TOKENS_PER_LINE_GUESS = 48  # on the high side: the first filler turn undershoots rather than overflows
#: The most filler log lines one turn of the long exchange carries.
MAX_FILLER_LINES = 4000
#: A run of this many words copied from the tool error the kit sent is an echo, not the model's words.
ECHO_WORDS = 3
#: The pass rate a check must reach when a run's settings do not name one (`axes.agent.min_pass_rate`'s default).
DEFAULT_MIN_PASS_RATE: float = AgentParams.model_fields["min_pass_rate"].default
