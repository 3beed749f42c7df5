"""What every parameters model shares: a model that forbids unknown keys and is frozen, the positive number types,
the URL check (`k3lib.core.params`, `k3lib.core.params_axes`)."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

PositiveSeconds = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
    try:
        parts.port  # noqa: B018 - reading the port validates it
    except ValueError:
        raise ValueError(f"the port in {value!r} is not a number between 0 and 65535") from None
    return value.rstrip("/")
