"""Deterministic three-week demo reviews: a load history in OpenMetrics text plus the task log, costs,
incidents, hours and a parameters file, for four scenarios that end in the four decisions.

The window ends at a fixed anchor (the seed's date) so the files are byte-identical run to run; a Prometheus
backfill keeps them because retention counts back from the newest block, not from the wall clock. Samples sit in
the middle of each 5-minute slot, never on an evaluation instant, so no lookback boundary rule can differ.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import math
from pathlib import Path
from typing import NotRequired, TypedDict

import yaml

from ..core.errors import BadInputError
from ..core.store import atomic_write_bytes
from .params import load_review_params, tracked_keys
from .rules import DEFAULT

SCENARIOS = ("steady", "idle-heavy", "spiky", "poor")
EXPECTED = {"steady": "renew", "idle-heavy": "reduce", "spiky": "dual-circuit", "poor": "exit-to-api"}
ANCHOR_END = dt.datetime(2026, 8, 14, tzinfo=dt.timezone.utc)
WINDOW_DAYS = 21
STEP_S = 300
CAPACITY = 16  # concurrent tasks the reserved capacity serves (max_num_seqs x engines)
GPUS = 4
MODEL_NAME, HOSTNAME = "kimi-k3", "node-a"  # the demo deployment's labels in its history
GPU_MIB = 143_771
PREVIOUS_VERSION = "0.32.0"  # the release the demo drill rolls back to (the emulator serves 0.33.0 by default)
FILES = {"history": "history.om", "tasks": "tasks.csv", "costs": "costs.yaml", "incidents": "incidents.csv",
         "hours": "hours.csv", "params": "review.yaml"}


@dataclasses.dataclass(frozen=True)
class Scenario:
    business_rate_h: float  # arrivals per hour, weekdays 09-18 UTC
    night_rate_h: float
    weekend_rate_h: float
    campaigns: tuple[tuple[int, int, float], ...]  # (day, start hour, arrivals/h) of 4-hour bursts
    mix: tuple[float, float, float, float, float]  # batch, agent, peak, test, maintenance outside campaigns
    accept: float
    retries: float
    tool_error: float
    timeout: float
    manual: float
    api_accept: float
    api_delivery_factor: float  # API time to delivery / self-hosted
    incidents: tuple[tuple[int, int, str, float, bool], ...]  # (day, hour, category, minutes, answers all yes)
    ops_hours_week: float
    benefits: dict
    costs: dict


_SCENARIOS = {
    "steady": Scenario(48, 22, 14, (), (0.35, 0.5, 0.0, 0.1, 0.05), 0.9, 0.15, 0.04, 0.02, 0.05, 0.85, 1.3,
                       ((5, 14, "vllm-engine", 18, True), (15, 3, "network-timeout", 9, True)), 12.0, {},
                       {"capacity": 21000, "storage": 600, "network": 350, "monitoring": 400,
                        "install_upgrade_rollback_hours": 14, "on_call": 1800, "failed_requests": 420,
                        "tasks_transferred_to_api": 90, "teams_waiting_time": 300, "api_bill_same_tasks": 2400,
                        "delivered_tasks_value": None, "hourly_rate": 95}),
    "idle-heavy": Scenario(7, 0.2, 0.1, (), (0.2, 0.6, 0.0, 0.15, 0.05), 0.9, 0.15, 0.04, 0.02, 0.05, 0.86, 1.2,
                           ((9, 11, "memory-cache", 25, True),), 8.0, {},
                           {"capacity": 21000, "storage": 600, "network": 150, "monitoring": 400,
                            "install_upgrade_rollback_hours": 10, "on_call": 1500, "failed_requests": 60,
                            "tasks_transferred_to_api": 20, "teams_waiting_time": None, "api_bill_same_tasks": 700,
                            "delivered_tasks_value": None, "hourly_rate": 95}),
    "spiky": Scenario(2, 0.3, 0.3, ((3, 10, 110.0), (8, 13, 130.0), (12, 9, 120.0), (18, 11, 140.0)),
                      (0.2, 0.6, 0.0, 0.15, 0.05), 0.88, 0.2, 0.05, 0.03, 0.06, 0.87, 1.1,
                      ((8, 15, "memory-cache", 35, True), (18, 13, "vllm-engine", 22, True)), 14.0,
                      {"data_control": True, "residency_requirement": True,
                       "note": "campaign assets may not leave the EU tenancy"},
                      {"capacity": 21000, "storage": 900, "network": None, "monitoring": 400,
                       "install_upgrade_rollback_hours": 16, "on_call": 1500, "failed_requests": 300,
                       "tasks_transferred_to_api": 260, "teams_waiting_time": 800, "api_bill_same_tasks": 1900,
                       "delivered_tasks_value": None, "hourly_rate": 95}),
    "poor": Scenario(18, 6, 3, (), (0.25, 0.6, 0.0, 0.1, 0.05), 0.55, 1.3, 0.3, 0.1, 0.25, 0.88, 0.9,
                     ((2, 10, "vllm-engine", 190, False), (6, 2, "human-upgrade", 240, False),
                      (9, 16, "tool-call-format", 75, False), (13, 11, "memory-cache", 120, True),
                      (16, 20, "version-dependency", 300, False), (19, 9, "node/accelerator", 150, False)), 36.0,
                     {}, {"capacity": 21000, "storage": 600, "network": None, "monitoring": 500,
                          "install_upgrade_rollback_hours": 40, "on_call": None, "failed_requests": 2100,
                          "tasks_transferred_to_api": 700, "teams_waiting_time": None, "api_bill_same_tasks": 2600,
                          "delivered_tasks_value": None, "hourly_rate": None}),
}
_DURATION_MIN = {"batch": 16.0, "agent": 11.0, "peak": 9.0, "test": 2.0, "maintenance": 6.0}
_CATEGORIES = ("batch", "agent", "peak", "test", "maintenance")


def _rate(sc: Scenario, t: dt.datetime) -> tuple[float, bool]:
    """Arrivals per hour at t (diurnal + weekly shape), and whether a campaign is running."""
    day = (t - (ANCHOR_END - dt.timedelta(days=WINDOW_DAYS))).days
    for c_day, c_hour, c_rate in sc.campaigns:
        if day == c_day and c_hour <= t.hour < c_hour + 4:
            return c_rate, True
    if t.weekday() >= 5:
        return sc.weekend_rate_h, False
    if 9 <= t.hour < 18:
        return sc.business_rate_h * (0.75 + 0.5 * math.sin(math.pi * (t.hour + t.minute / 60 - 9) / 9)), False
    return sc.night_rate_h, False


def _outages(sc: Scenario, start: dt.datetime) -> list[tuple[float, float, tuple]]:
    out = []
    for inc in sc.incidents:
        t0 = (start + dt.timedelta(days=inc[0], hours=inc[1])).timestamp()
        out.append((t0, t0 + inc[3] * 60, inc))
    return out


def _down(outages, t: float) -> tuple[float, float, tuple] | None:
    return next((o for o in outages if o[0] <= t < o[1]), None)


class SimTask(TypedDict):
    """One simulated task: drawn (id, category, submission, duration), then scheduled and judged."""

    task_id: str
    category: str
    submit: float
    dur: float
    routed: NotRequired[bool]  # finished by the API during an outage
    start: NotRequired[float | None]
    end: NotRequired[float | None]
    retries: NotRequired[int]
    timed_out: NotRequired[bool]
    tool_errors: NotRequired[int]
    accepted: NotRequired[bool]
    manual: NotRequired[bool]
    prompt: NotRequired[int]
    gen: NotRequired[int]


def simulate(scenario: str, seed: int = 7) -> dict:
    """Tasks, outages and per-slot series of one scenario (pure: the same seed gives the same figures)."""
    import numpy as np

    sc = _SCENARIOS[scenario]
    rng = np.random.default_rng([seed, SCENARIOS.index(scenario)])
    start = ANCHOR_END - dt.timedelta(days=WINDOW_DAYS)
    n_slots = WINDOW_DAYS * 86400 // STEP_S
    outages = _outages(sc, start)
    tasks: list[SimTask] = []
    n = 0
    for k in range(n_slots):
        t = start + dt.timedelta(seconds=k * STEP_S)
        rate, campaign = _rate(sc, t)
        for _ in range(int(rng.poisson(rate * STEP_S / 3600))):
            n += 1
            cat = "peak" if campaign else _CATEGORIES[int(rng.choice(5, p=sc.mix))]
            submit = t.timestamp() + float(rng.uniform(0, STEP_S))
            dur = float(rng.lognormal(math.log(_DURATION_MIN[cat] * 60), 0.5))
            tasks.append({"task_id": f"T{n:05d}", "category": cat, "submit": submit, "dur": dur})
    # FIFO over CAPACITY slots; nothing starts during an outage, and what runs when the engine dies is retried.
    free: list[float] = [start.timestamp()] * CAPACITY
    for task in tasks:
        begin = max(task["submit"], heapq.heappop(free))
        retries = int(rng.poisson(sc.retries))
        down = _down(outages, begin)
        task["routed"] = down is not None and bool(rng.random() < 0.7)
        if down is not None and not task["routed"]:
            begin = down[1]
        end = begin + task["dur"] * (1 + 0.3 * retries)
        hit = next((o for o in outages if begin < o[0] < end), None)
        if hit is not None:  # in flight when the engine died: restarted from scratch after the restore
            retries += 1
            begin = hit[1]
            end = begin + task["dur"]
        if task["routed"]:
            heapq.heappush(free, begin)
            task.update({"start": None, "end": None, "retries": 0})
            continue
        heapq.heappush(free, end)
        task.update({"start": begin, "end": end, "retries": retries})
    for task in tasks:
        timed_out = task["start"] is not None and bool(rng.random() < sc.timeout)
        tool_errors = int(rng.random() < sc.tool_error) * (1 + int(rng.poisson(0.5))) if task["category"] in (
            "agent", "peak") else 0
        accepted = (task["start"] is not None and not timed_out and bool(rng.random() < sc.accept))
        task.update({"timed_out": timed_out, "tool_errors": tool_errors, "accepted": accepted,
                     "manual": accepted and bool(rng.random() < sc.manual),
                     "prompt": int(rng.integers(2_000, 30_000)), "gen": int(rng.integers(300, 4_000))})
    return {"scenario": sc, "start": start, "tasks": tasks, "outages": outages, "rng": rng, "n_slots": n_slots}


def _series(sim: dict) -> dict[str, list]:
    """Per-slot samples at mid-slot: gauges, cumulative counters (reset by each restart) and GPU readings."""
    import numpy as np

    rng, start, n_slots = sim["rng"], sim["start"].timestamp(), sim["n_slots"]
    mids = start + STEP_S * (np.arange(n_slots) + 0.5)
    run_d, wait_d = np.zeros(n_slots + 1), np.zeros(n_slots + 1)
    prompt_add, gen_add, ok_add = np.zeros(n_slots), np.zeros(n_slots), np.zeros(n_slots)

    def idx(t: float) -> int:  # first slot whose mid-point is at or after t
        return int(min(max(math.ceil((t - start) / STEP_S - 0.5), 0), n_slots))

    for task in sim["tasks"]:
        if task["start"] is None:
            continue
        wait_d[idx(task["submit"])] += 1
        wait_d[idx(task["start"])] -= 1
        run_d[idx(task["start"])] += 1
        run_d[idx(task["end"])] -= 1
        i0, i1 = min(idx(task["start"]), n_slots - 1), min(idx(task["end"]), n_slots - 1)
        prompt_add[i0] += task["prompt"] * (1 + task["retries"])
        gen_add[i1] += task["gen"] * (1 + task["retries"])
        ok_add[i1] += 0 if task["timed_out"] else 1
    running, waiting = np.cumsum(run_d)[:n_slots], np.cumsum(wait_d)[:n_slots]
    down = np.array([_down(sim["outages"], t) is not None for t in mids])
    load = np.clip(running / CAPACITY, 0, 1)
    kv = np.clip(load * 0.85 + rng.normal(0, 0.02, n_slots), 0, 0.99) * (running > 0)
    util = [np.clip(load * 95 + rng.normal(0, 3, n_slots) * (running > 0) + rng.uniform(0, 1.5, n_slots), 0, 100)
            for _ in range(GPUS)]
    mem = [np.where(down, rng.uniform(400, 600, n_slots), GPU_MIB * 0.93 + rng.normal(0, 150, n_slots))
           for _ in range(GPUS)]
    counters = {}
    for name, add in (("prompt", prompt_add), ("gen", gen_add), ("ok", ok_add)):
        values, total = [], 0.0
        for i in range(n_slots):
            if down[i]:
                total = 0.0  # the restarted server starts its counters from zero
                values.append(math.nan)
                continue
            total += add[i]
            values.append(total)
        counters[name] = values
    gauge = lambda a: [math.nan if d else float(v) for v, d in zip(a, down)]  # noqa: E731 - local shorthand
    return {"mids": [int(m) for m in mids], "running": gauge(running), "waiting": gauge(waiting), "kv": gauge(kv),
            "util": [[0.0 if d else round(float(v), 2) for v, d in zip(u, down)] for u in util],
            "mem": [[round(float(v), 1) for v in m] for m in mem], **counters}


def _fmt(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def write_history(series: dict, path: Path) -> None:
    """One family at a time, each series in ascending time, counters named *_total, `# EOF` last."""
    mids = series["mids"]
    base = f'model_name="{MODEL_NAME}",engine="0"'
    families = [
        ("vllm:num_requests_running", "gauge", [(f"vllm:num_requests_running{{{base}}}", series["running"])]),
        ("vllm:num_requests_waiting", "gauge", [(f"vllm:num_requests_waiting{{{base}}}", series["waiting"])]),
        ("vllm:kv_cache_usage_perc", "gauge", [(f"vllm:kv_cache_usage_perc{{{base}}}", series["kv"])]),
        ("vllm:prompt_tokens", "counter", [(f"vllm:prompt_tokens_total{{{base}}}", series["prompt"])]),
        ("vllm:generation_tokens", "counter", [(f"vllm:generation_tokens_total{{{base}}}", series["gen"])]),
        ("vllm:request_success", "counter",
         [(f'vllm:request_success_total{{{base},finished_reason="stop"}}', series["ok"])]),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge",
         [(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="{HOSTNAME}",modelName="NVIDIA H200"}}', series["util"][g])
          for g in range(GPUS)]),
        ("DCGM_FI_DEV_FB_USED", "gauge",
         [(f'DCGM_FI_DEV_FB_USED{{gpu="{g}",Hostname="{HOSTNAME}",modelName="NVIDIA H200"}}', series["mem"][g])
          for g in range(GPUS)]),
    ]
    lines = []
    for family, kind, members in families:
        lines.append(f"# TYPE {family} {kind}")
        for head, values in members:
            lines += [f"{head} {_fmt(v)} {t}" for t, v in zip(mids, values) if not math.isnan(v)]
    lines.append("# EOF")
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def _iso(t: float | None) -> str:
    return "" if t is None else dt.datetime.fromtimestamp(round(t), dt.timezone.utc).isoformat().replace(
        "+00:00", "Z")


def _write_tasks(sim: dict, path: Path) -> None:
    sc, rng = sim["scenario"], sim["rng"]
    rows = ["task_id,category,path,submitted_at,started_at,finished_at,accepted,retries,tool_call_errors,"
            "timed_out,manual_correction,routed_to_api,wait_s"]
    replay: list[SimTask] = []
    for t in sim["tasks"]:
        wait = 0.0 if t["start"] is None else t["start"] - t["submit"]
        b = lambda x: "true" if x else "false"  # noqa: E731
        rows.append(f"{t['task_id']},{t['category']},self-hosted,{_iso(t['submit'])},{_iso(t['start'])},"
                    f"{_iso(t['end'])},{b(t['accepted'])},{t['retries']},{t['tool_errors']},{b(t['timed_out'])},"
                    f"{b(t['manual'])},{b(t['routed'])},{wait:.1f}")
        if t["category"] in ("agent", "batch") and t["start"] is not None and len(replay) < 300 and \
                rng.random() < 0.2:
            replay.append(t)
    for t in replay:  # the same task set, replayed on the API with the same request format and retry policy
        dur = t["dur"] * sc.api_delivery_factor * float(rng.uniform(0.8, 1.2))
        begin = t["submit"] + float(rng.uniform(1, 5))
        accepted = bool(rng.random() < sc.api_accept)
        tool = int(rng.random() < 0.03) if t["category"] == "agent" else 0
        rows.append(f"{t['task_id']},{t['category']},api,{_iso(t['submit'])},{_iso(begin)},{_iso(begin + dur)},"
                    f"{'true' if accepted else 'false'},{int(rng.poisson(0.1))},{tool},false,"
                    f"{'true' if accepted and rng.random() < 0.04 else 'false'},false,{begin - t['submit']:.1f}")
    atomic_write_bytes(path, ("\n".join(rows) + "\n").encode("utf-8"))


def _write_incidents(sim: dict, path: Path) -> None:
    rows = ["id,started_at,category,detected_automatically,previous_version_restored,in_flight_resumed_or_cancelled,"
            "api_failover_without_contract_change,fields_preserved,minutes_to_recover"]
    for n, (t0, _t1, inc) in enumerate(sim["outages"], start=1):
        yes = "true" if inc[4] else "false"
        # a failed recovery still answers some questions: detection works, the rest did not
        rows.append(f"INC-{n:03d},{_iso(t0)},{inc[2]},true,{yes},{yes},{yes if inc[4] else ''},{yes},{inc[3]:g}")
    atomic_write_bytes(path, ("\n".join(rows) + "\n").encode("utf-8"))


def _window_weeks() -> dict[str, int]:
    """Every ISO week the window touches (YYYY-Www) → its days inside the window (the first and last in part)."""
    start = ANCHOR_END - dt.timedelta(days=WINDOW_DAYS)
    out: dict[str, int] = {}
    for d in range(WINDOW_DAYS):
        day = (start + dt.timedelta(days=d)).isocalendar()
        key = f"{day.year}-W{day.week:02d}"
        out[key] = out.get(key, 0) + 1
    return out


def _write_hours(sc: Scenario, path: Path) -> None:
    split = {"install": 0.1, "vllm-tuning": 0.15, "monitoring": 0.25, "upgrades": 0.1, "failed-task-diagnosis": 0.15,
             "documentation": 0.05, "product-communication": 0.08, "out-of-hours": 0.07, "api-comparison": 0.05}
    rows = ["week,category,hours"]
    for n, (week, days) in enumerate(sorted(_window_weeks().items())):
        # the hours of the window's days only (as `k3 import` writes worklogs dated inside it); installation weighs
        # on the first week
        total = sc.ops_hours_week * (1.4 if n == 0 else 0.9) * days / 7
        rows += [f"{week},{cat},{total * share:.1f}" for cat, share in split.items()]
    atomic_write_bytes(path, ("\n".join(rows) + "\n").encode("utf-8"))


def _write_costs(sc: Scenario, path: Path) -> None:
    lines = ["# Amounts for the three weeks, in EUR. A blank item stays blank in every output."]
    lines.append("currency: EUR")
    lines += [f"{k}: {'' if v is None else v}" for k, v in sc.costs.items()]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def _write_params(scenario: str, sc: Scenario, start: dt.datetime, path: Path) -> None:
    data = {
        "review": {
            "demo": scenario,
            "inputs": {k: FILES[k] for k in ("tasks", "costs", "incidents", "hours")},
            "series": {"history_file": FILES["history"], "start": _iso(start.timestamp()),
                       "end": _iso(ANCHOR_END.timestamp()), "step_s": STEP_S},
            # the one deployment the history's series are selected by (its vLLM model_name, its node's Hostname)
            "deployment": {"model_name": MODEL_NAME, "hostnames": [HOSTNAME], "gpus": GPUS},
            "benefits": dict(sc.benefits),
            # the emulator's kill: arm its crash fault, then one request makes the engine die under load;
            # against a real server this is e.g. {argv: [kubectl, delete, pod, vllm-0]}
            "drill": {"kill": [{"http": {"method": "POST", "path": "/_emulator/faults",
                                         "json": {"faults": ["crash=1"]}}},
                               {"http": {"method": "POST", "path": "/v1/chat/completions",
                                         "json": {"messages": [{"role": "user", "content": "ping"}],
                                                  "max_tokens": 4}}}],
                      # a rollback, not a restart: the previous release comes back (against a real server e.g.
                      # {argv: [helm, rollback, vllm]}); the drill shows it from GET /version before and after
                      "restore": [{"http": {"method": "POST", "path": "/_emulator/restart",
                                            "json": {"profile": "demo", "faults": [],
                                                     "vllm_version": PREVIOUS_VERSION}}}],
                      "previous_version": PREVIOUS_VERSION},
        },
        "target": {"base_url": None, "emulator": {"profile": "demo", "time_scale": 0.05}},
        "run": {"label": f"review-{scenario}", "notebook_timeout_s": 300},
    }
    header = (f"# Generated by k3lib.renewal.demo for the {scenario!r} scenario (expected: {EXPECTED[scenario]}).\n"
              "# Paths are relative to this file.\n")
    atomic_write_bytes(path, (header + yaml.safe_dump(data, sort_keys=False)).encode("utf-8"))


def generate(scenario: str, out_dir: str | Path, *, seed: int = 7) -> dict[str, Path]:
    """Write the scenario's history, task log, costs, incidents, hours and review.yaml into `out_dir`."""
    if scenario not in _SCENARIOS:
        raise BadInputError(f"unknown demo scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}",
                            source="--demo")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / v for k, v in FILES.items()}
    sim = simulate(scenario, seed)
    write_history(_series(sim), paths["history"])
    _write_tasks(sim, paths["tasks"])
    _write_incidents(sim, paths["incidents"])
    _write_hours(sim["scenario"], paths["hours"])
    _write_costs(sim["scenario"], paths["costs"])
    _write_params(scenario, sim["scenario"], sim["start"], paths["params"])
    return paths


def materialise(params, folder: str | Path):
    """Parameters whose `review.demo` names a scenario but no inputs: generate them into `folder` and return the
    generated parameters, keeping what the user set explicitly (rules, benefits, drill, target, run)."""

    if params.review.inputs is not None and params.review.series is not None:
        return params
    paths = generate(params.review.demo, folder)
    generated = load_review_params([paths["params"]])
    user = params.review
    keep = {f: getattr(user, f) for f in user.model_fields_set if f not in ("inputs", "series", "demo", "origins")}
    # what the user's files set keeps their origin; the rest comes from the generated file (or the default)
    keep["origins"] = {k: user.origin(k) if user.origin(k) != DEFAULT else generated.review.origin(k)
                       for k in tracked_keys()}
    review = generated.review.model_copy(update=keep)
    update = {"review": review}
    for section in ("target", "run"):
        if section in params.model_fields_set:
            update[section] = getattr(params, section)
    return generated.model_copy(update=update)
