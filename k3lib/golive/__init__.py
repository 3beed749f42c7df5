"""The go-live kit of an accepted run (`k3 golive`): Prometheus alerting rules (`alerts`), a Grafana dashboard
(`dashboard`) and ROLLBACK.md (`rollback`), written by `kit.write_golive_kit`.

Every threshold is a level the accepted run measured (read through `k3lib.verdict.accepted`); when a level is missing
the alert is left out and ROLLBACK.md says why. Metric names are those of the vLLM version the run observed
(`queries`). It stands just above the verdict, whose accepted run it reads; only the command line imports it."""

from .kit import golive_warnings, write_golive_kit
from .options import ACCEPTED_DECISIONS, ALERTS_FILE, DASHBOARD_FILE, ROLLBACK_FILE, GoliveKit, GoliveOptions
from .queries import error_reasons, metric_names

__all__ = ["ACCEPTED_DECISIONS", "ALERTS_FILE", "DASHBOARD_FILE", "ROLLBACK_FILE", "GoliveKit", "GoliveOptions",
           "error_reasons", "golive_warnings", "metric_names", "write_golive_kit"]
