"""One agent run as the run folder holds it (`k3lib.axes.agent.run.load_agent_result` rebuilds it): its settings,
the sample played, each level and each step, and what is derived from them alone (the check outcomes, the rates,
the highest clean concurrency). The judge (`judge.py`) and the tables (`figures.py`) both read it."""

from __future__ import annotations

import dataclasses
from collections import Counter

from . import checks as C
from .config import DEFAULT_MIN_PASS_RATE
from .shapes import (ContractRow, LevelRun, SampleSummary, SeriesSummary, ServedCounters, ServingRow, SettingsRow,
                     SkippedCase, SpecDecode, Step, TurnRow)

STEPS_FILE = "evidence/agent/requests.jsonl"
RUN_FILE = "evidence/agent/run.json"
TURNS_FILE = "evidence/agent/tool_turns.jsonl"  # the tool-turn series (k3lib.axes.agent.series)
CONTRACT_FILE = "evidence/agent/contract.jsonl"  # the vendor contract check (k3lib.axes.agent.contract)
#: The checks whose failures in the tool-turn series count as failures of the check itself: a leak is a defect
#: whatever its rate, while a missing or invalid call there is judged by the failure rate.
LEAK_CHECKS = ("no_markup_leak", "no_reasoning_leak", "reasoning_present")


@dataclasses.dataclass(frozen=True)
class AgentResult:
    """One agent run as written to the run folder: its settings, the sample played, each level and each step."""

    settings: SettingsRow
    sample: SampleSummary  # name, version, case ids and titles
    levels: list[LevelRun]
    skipped: list[SkippedCase]
    steps: list[Step]
    turns: list[TurnRow] = dataclasses.field(default_factory=list)  # the tool-turn series
    contract: list[ContractRow] = dataclasses.field(default_factory=list)  # the vendor contract check
    series: SeriesSummary = dataclasses.field(default_factory=lambda: SeriesSummary())  # how the series ran
    spec_decode: SpecDecode = dataclasses.field(default_factory=lambda: SpecDecode())  # spec-decode deltas, if any
    serving: ServingRow = dataclasses.field(default_factory=lambda: ServingRow())  # serving settings from the log
    served: ServedCounters = dataclasses.field(default_factory=lambda: ServedCounters())  # server counters, the run
    stopped: str | None = None  # why the axis stopped before its plan (the plan's at-most), if it did

    # -- derived -------------------------------------------------------------------------------------------------

    def outcomes(self) -> list[tuple[int, C.CheckResult]]:
        """Every check outcome with its concurrency level: per reply, then per repetition (stability)."""
        out = [(int(s["level"]), C.CheckResult(**o)) for s in self.steps for o in s.get("checks", ())]
        out += [(lvl, o) for lvl, _rep, o in C.stability_outcomes(self.steps)]
        # a leak in the tool-turn series is a leak like any other (its first attempt: the retry is the client's)
        out += [(int(t["level"]), C.CheckResult(**o)) for t in self.turns for o in t.get("checks", ())
                if o["check"] in LEAK_CHECKS]
        return out

    def levels_judged(self) -> list[int]:
        levels = {int(lv["level"]) for lv in self.levels} | {int(s["level"]) for s in self.steps}
        return sorted(levels | {int(t["level"]) for t in self.turns})

    def rate_rows(self) -> list[C.RateRow]:
        return C.rates(self.outcomes(), self.levels_judged())

    def environment_refusals(self) -> Counter[str]:
        return Counter(env for s in self.steps if (env := s.get("environment")))

    def max_clean_concurrency(self) -> int | None:
        """The highest level at which, like every level below it, every check held: the agents' traffic cap.
        None when the first level already failed (agents blocked) or a server flag is missing."""
        if self.environment_refusals():
            return None
        threshold = float(self.settings.get("min_pass_rate", DEFAULT_MIN_PASS_RATE))
        clean = None
        rows = self.rate_rows()
        for level in sorted({r.level for r in rows}):
            if any(r.total and (r.pass_rate or 0) < threshold for r in rows if r.level == level):
                break
            clean = level
        return clean
