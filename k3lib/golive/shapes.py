"""The files the go-live kit writes, as JSON shapes: a Prometheus alerting rule (alerts.yml) and the Grafana
dashboard (dashboard.json) with its panels. TypedDicts: they change nothing at run time; the keys are Prometheus's
and Grafana's own (`for`, `gridPos`, `fieldConfig`...)."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["AlertRule", "GrafanaDashboard", "GrafanaPanel"]

AlertLabels = TypedDict("AlertLabels", {"severity": str, "rollback_trigger": str, "k3_accepted_run": str})
AlertAnnotations = TypedDict("AlertAnnotations", {"summary": str, "description": str, "runbook": str})
# `for` is a Python keyword: the functional form names it
AlertRule = TypedDict("AlertRule", {"alert": str, "expr": str, "for": str, "labels": AlertLabels,
                                    "annotations": AlertAnnotations})


class Datasource(TypedDict):
    type: str
    uid: str


class ThresholdStep(TypedDict):
    color: str
    value: float | None


class Thresholds(TypedDict):
    mode: str
    steps: list[ThresholdStep]


class ThresholdsStyle(TypedDict):
    mode: str


class LineStyle(TypedDict, total=False):
    drawStyle: str
    lineWidth: int
    fillOpacity: int
    thresholdsStyle: ThresholdsStyle


class FieldDefaults(TypedDict, total=False):
    unit: str
    custom: LineStyle
    thresholds: Thresholds


class FieldConfig(TypedDict):
    defaults: FieldDefaults
    overrides: list[FieldDefaults]


class PanelTarget(TypedDict):
    refId: str
    expr: str
    legendFormat: str
    datasource: Datasource


class GridPos(TypedDict):
    h: int
    w: int
    x: int
    y: int


class Legend(TypedDict):
    displayMode: str
    placement: str


class Tooltip(TypedDict):
    mode: str


class PanelOptions(TypedDict):
    legend: Legend
    tooltip: Tooltip


class GrafanaPanel(TypedDict):
    id: int
    type: str
    title: str
    description: str
    datasource: Datasource
    gridPos: GridPos
    targets: list[PanelTarget]
    fieldConfig: FieldConfig
    options: PanelOptions


class TemplateVariable(TypedDict):
    name: str
    label: str
    type: str
    query: str
    current: dict[str, str]
    hide: int
    refresh: int


class Templating(TypedDict):
    list: list[TemplateVariable]


class DashboardAnnotations(TypedDict):
    list: list[dict[str, str]]


GrafanaTime = TypedDict("GrafanaTime", {"from": str, "to": str})


class GrafanaDashboard(TypedDict):
    uid: str
    title: str
    description: str
    tags: list[str]
    timezone: str
    editable: bool
    graphTooltip: int
    refresh: str
    schemaVersion: int
    version: int
    time: GrafanaTime
    templating: Templating
    annotations: DashboardAnnotations
    panels: list[GrafanaPanel]
