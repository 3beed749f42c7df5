"""Re-validations over time: a trend page over every run folder under a folder, and the last run's results for
node_exporter's textfile collector."""

from __future__ import annotations

from typing import Any


def history_main(ns: Any) -> int:
    raise NotImplementedError
