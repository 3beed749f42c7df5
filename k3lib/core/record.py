"""The base of the kit's small frozen records: a pydantic model written with `model_dump()` and read back with
`model_validate`, that also takes its fields positionally in their declared order, as the frozen dataclasses it
replaces did (`CheckResult("function_name", True, "get_weather")`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A frozen record; positional arguments fill its fields in declared order, keywords as usual."""

    model_config = ConfigDict(frozen=True)

    def __init__(self, *args: Any, **fields: Any) -> None:
        names = list(type(self).model_fields)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments, got {len(args)}")
        super().__init__(**dict(zip(names, args)), **fields)
