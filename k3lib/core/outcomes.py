"""The four acceptance outcomes and THE finding → outcome table, shared by the axes and the decision.

An axis reads the table to say what its failing finding forces (`rule_for`, `level_for`, `strongest`); the
decision (`k3lib.verdict.decision`) reads it to combine the records. Both sit above this module, which imports only the
evidence model.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from typing import Iterable

from .evidence import Finding


class Outcome(str, enum.Enum):
    """The four acceptance decisions, weakest first, each with the exit code `k3 validate` ends with."""

    PRODUCTION = "production"
    LIMITED = "limited-observation"
    EXTENSION = "capacity-extension"
    REBUILD = "environment-rebuild"

    @property
    def exit_code(self) -> int:
        codes = {"production": 0, "limited-observation": 3, "capacity-extension": 4, "environment-rebuild": 5}
        return codes[self.value]

    @property
    def strength(self) -> int:
        return list(Outcome).index(self)


DECISIONS = tuple(o.value for o in Outcome)
STRENGTH = {o.value: o.strength for o in Outcome}
EXIT_CODES = {o.value: o.exit_code for o in Outcome}
REEXAMINE_AFTER_DAYS = 14


@dataclasses.dataclass(frozen=True)
class Rule:
    """A failing finding whose rule id matches `pattern` (fnmatch) forces `level`, for the reason `why`."""

    pattern: str
    level: Outcome
    why: str


# THE finding → decision table, first matching pattern wins. Only a failing finding reads it: a warning or a
# finding that could not be observed is limited observation whatever its rule (missing evidence is never a pass,
# never more than limited). The seed's rules: CUDA/driver/image or a required recipe flag out of scope → rebuild;
# memory saturating on nominal traffic → extension; tool calls unstable → agents blocked; no cache reuse → gain
# not counted (both limited observation).
RULES: tuple[Rule, ...] = (
    Rule("*.notebook", Outcome.LIMITED, "the axis did not complete: missing evidence, not a measured defect"),
    Rule("probe.health", Outcome.REBUILD, "the server is not healthy"),
    Rule("probe.context_limit", Outcome.EXTENSION, "the contract promises more than the server's limits"),
    Rule("environment.build_method", Outcome.LIMITED, "not the declared build: re-run as recipe.build custom, on its "
                                                      "own sheet"),
    Rule("environment.prefix_caching", Outcome.LIMITED, "prefix caching off: the expected cache gain is not counted"),
    Rule("environment.*", Outcome.REBUILD, "compatibility chain out of the recipe's scope"),
    Rule("agent.auto_tool_choice", Outcome.REBUILD, "a required recipe flag is missing"),
    Rule("agent.*", Outcome.LIMITED, "unstable tool calls: block the agents concerned, plain text may go live"),
    Rule("capacity.cold_load", Outcome.REBUILD, "the server never became ready: rework the topology or the image"),
    Rule("capacity.startup_oom", Outcome.REBUILD, "an OOM at startup: the weights, activations and KV pool do not "
                                                  "fit the cards as started"),
    Rule("capacity.engine_death", Outcome.REBUILD, "a fatal engine error that is not a memory error: image, driver "
                                                   "or topology"),
    Rule("capacity.context_refusal", Outcome.REBUILD, "an out-of-contract request broke the engine instead of being "
                                                      "refused"),
    Rule("capacity.memory_growth", Outcome.LIMITED, "memory grows steadily: not stable, more GPUs won't fix it"),
    Rule("capacity.server_errors", Outcome.LIMITED, "5xx while the engine stayed up"),
    Rule("capacity.incomplete_load", Outcome.EXTENSION, "requests refused, timed out, unreachable or cut at or below "
                                                        "the planned concurrency: the deployment as reached does not "
                                                        "serve the planned load"),
    Rule("capacity.rank_balance", Outcome.REBUILD, "one data-parallel rank is not like its peers (KV pool, decode rate "
                                                   "or prefix reuse): repair that rank's GPU or node, then re-measure"),
    Rule("capacity.roofline", Outcome.LIMITED, "the decode rate is above the hardware's bandwidth bound (a "
                                               "measurement error) or far below it (a probable misconfiguration)"),
    Rule("capacity.session_prefix_reuse", Outcome.LIMITED, "agent sessions lose their cached history between turns: "
                                                           "the cache gain is not counted, every turn pays its whole "
                                                           "prefill"),
    Rule("capacity.session_tool_calls", Outcome.LIMITED, "tool calls break under session load: block the agents "
                                                         "concerned"),
    Rule("capacity.latency_*", Outcome.EXTENSION, "client latency p95 at nominal load above the contract's objective "
                                                  "(its whole interval)"),
    Rule("capacity.*", Outcome.EXTENSION, "memory or queue saturates at nominal load"),
    Rule("prefix_cache.*", Outcome.LIMITED, "no measured cache reuse: the expected gain is not counted"),
    Rule("attestation.*", Outcome.LIMITED, "an operational prerequisite is not proven"),
    Rule("*", Outcome.LIMITED, "a non-critical check failed"),
)
NOT_PROVEN = "not proven: limited observation until the evidence exists"


def rule_for(rule_id: str) -> Rule:
    return next(r for r in RULES if fnmatch.fnmatchcase(rule_id, r.pattern))


def level_for(finding: Finding) -> tuple[str, str]:
    """The decision a finding forces (production for a pass or an info) and why, from the one table."""
    if finding.status in ("pass", "info"):
        return Outcome.PRODUCTION.value, "passed"
    if finding.status != "fail":
        return Outcome.LIMITED.value, NOT_PROVEN
    rule = rule_for(finding.rule)
    return rule.level.value, rule.why


def strongest(findings: Iterable[Finding]) -> str:
    """The strongest decision the findings force ("production" when none fails, warns or stays unobserved)."""
    return max((level_for(f)[0] for f in findings), key=STRENGTH.__getitem__, default=Outcome.PRODUCTION.value)
