"""The command line's logging: the library only logs (`logging.getLogger(__name__)` under `k3lib`, no handler of its
own); `k3` shows those records on stderr at the level the user asks for.

The level: `-v` INFO, `-vv` DEBUG; else the environment variable `K3_LOG_LEVEL` (a name: DEBUG, INFO, WARNING,
ERROR, or a number); else WARNING. A bad `K3_LOG_LEVEL` is a bad input (one line, exit 2). Only the `k3lib` logger
gets the handler: the libraries below keep their own settings.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ..core.errors import BadInputError

LOG_LEVEL_ENV = "K3_LOG_LEVEL"
FORMAT = "k3 %(levelname)s %(name)s: %(message)s"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever `sys.stderr` is when it writes (a redirected or captured stream included)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def level_for(verbose: int, environ: dict[str, str] | os._Environ[str] | None = None) -> int:
    """The level the user asked for: `-v` flags first, then K3_LOG_LEVEL, then WARNING."""
    if verbose:
        return logging.INFO if verbose == 1 else logging.DEBUG
    text = (os.environ if environ is None else environ).get(LOG_LEVEL_ENV, "").strip()
    if not text:
        return logging.WARNING
    if text.isdigit():
        return int(text)
    level = logging.getLevelName(text.upper())
    if not isinstance(level, int):
        raise BadInputError(f"{text!r} is not a log level (DEBUG, INFO, WARNING, ERROR or a number)",
                            source=LOG_LEVEL_ENV)
    return level


def configure(verbose: int = 0) -> None:
    """Show the `k3lib` records at the level asked for on stderr; called once per `k3` command (idempotent)."""
    logger = logging.getLogger("k3lib")
    for handler in [h for h in logger.handlers if isinstance(h, _Stderr)]:
        logger.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    logger.setLevel(level_for(verbose))
