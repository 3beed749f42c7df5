"""What the go-live kit is asked and what it gives back: the operator's choices (`GoliveOptions`, stated in
ROLLBACK.md, never thresholds), the kit written (`GoliveKit`) and its file names."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..core.errors import BadInputError


ALERTS_FILE = "alerts.yml"
DASHBOARD_FILE = "dashboard.json"
ROLLBACK_FILE = "ROLLBACK.md"
ACCEPTED_DECISIONS = ("production", "limited-observation")
_DURATION = re.compile(r"^[1-9][0-9]*[smhd]$")
GRAFANA_SCHEMA_VERSION = 39  # Grafana 10.4 / 11 dashboards; older servers migrate forward, newer ones read it


@dataclasses.dataclass(frozen=True)
class GoliveOptions:
    """How the alerts are scoped and timed: operator choices, stated in ROLLBACK.md, never thresholds."""

    job: str = "vllm"  # Prometheus `job` label of the vLLM scrape
    matchers: str = ""  # extra label matchers on vLLM series, e.g. 'model_name="kimi-k3"'
    dcgm_matchers: str = ""  # label matchers on dcgm-exporter series, e.g. 'Hostname=~"gpu-node-.*"'
    sustained_for: str = "10m"  # "a continuous period" before a queue/KV/preemption/error alert fires
    down_for: str = "2m"
    rate_window: str = "5m"
    hit_rate_window: str = "30m"  # hit rates are traffic-shaped: a longer window smooths single sessions
    hit_rate_fraction: float = 0.5  # "far below": alert under this share of the hit rate ordinary traffic reaches
    # the prefix-cache hit rate this deployment's ordinary traffic reaches (hits/queries tokens over a normal day):
    # the controlled warm requests' rate is no threshold for real traffic. Unset: the hit-rate alert is not armed.
    traffic_hit_rate: float | None = None

    def __post_init__(self) -> None:
        for name in ("sustained_for", "down_for", "rate_window", "hit_rate_window"):
            value = getattr(self, name)
            if not _DURATION.match(value):
                raise BadInputError(f"expected a Prometheus duration such as 10m, got {value!r}", source=name)
        if not 0 < self.hit_rate_fraction < 1:
            raise BadInputError(f"expected a share between 0 and 1, got {self.hit_rate_fraction}",
                                source="hit_rate_fraction")
        if self.traffic_hit_rate is not None and not 0 < self.traffic_hit_rate <= 1:
            raise BadInputError(f"expected a hit rate between 0 and 1, got {self.traffic_hit_rate}",
                                source="--traffic-hit-rate")
        for name in ("job", "matchers", "dcgm_matchers"):
            if any(c in getattr(self, name) for c in "{}\n"):
                raise BadInputError("label matchers go without braces, e.g. model_name=\"kimi-k3\"", source=name)


@dataclasses.dataclass(frozen=True)
class GoliveKit:
    out_dir: Path
    files: tuple[Path, ...]
    alerts: tuple[str, ...]  # alert names written
    omitted: dict[str, str]  # alert name → why no threshold could be derived
    metric_names: dict[str, str]
    warnings: tuple[str, ...] = ()  # what the operator must know before arming them (`golive_warnings`)
