"""The retry policy one request or one task runs under, shared by the live comparison of paths (`k3 paths`, which
retries by it) and the renewal review (which fixes it before any result is read and judges tasks against it).

A foundation module: it depends on pydantic only, so an axis and the renewal review can both use it without one
importing the other.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class RetryPolicy(BaseModel):
    """The same retry policy on both paths: a task retried more often than this was not run under it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: Annotated[int, Field(ge=0)] = 2
    timeout_s: Annotated[float, Field(gt=0)] = 3600.0  # a request not answered within this is a timeout
    description: str = ""
    # how the live comparison (`k3 paths`) retries one request, identically on every path: wait backoff_s, then
    # backoff_s × backoff_factor, … before each retry; only these HTTP statuses (and, when set, a refused
    # connection or a timeout) are retried — any other error is final
    backoff_s: Annotated[float, Field(ge=0)] = 1.0
    backoff_factor: Annotated[float, Field(ge=1)] = 2.0
    retry_statuses: tuple[Annotated[int, Field(ge=400, le=599)], ...] = (408, 429, 500, 502, 503, 504)
    retry_unreachable: bool = True  # a refused connection or a request timeout counts as retryable
