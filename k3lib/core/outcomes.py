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


class AcceptanceOutcome(str, enum.Enum):
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
        return list(AcceptanceOutcome).index(self)


DECISIONS = tuple(o.value for o in AcceptanceOutcome)
STRENGTH = {o.value: o.strength for o in AcceptanceOutcome}
EXIT_CODES = {o.value: o.exit_code for o in AcceptanceOutcome}
REEXAMINE_AFTER_DAYS = 14


@dataclasses.dataclass(frozen=True)
class Rule:
    """A failing finding whose rule id matches `pattern` (fnmatch) forces `level`, for the reason `why`."""

    pattern: str
    level: AcceptanceOutcome
    why: str


# THE finding → decision table, first matching pattern wins. Only a failing finding reads it: a warning or a
# finding that could not be observed is limited observation whatever its rule (missing evidence is never a pass,
# never more than limited). The seed's rules: CUDA/driver/image or a required recipe flag out of scope → rebuild;
# memory saturating on nominal traffic → extension; tool calls unstable → agents blocked; no cache reuse → gain
# not counted (both limited observation).
RULES: tuple[Rule, ...] = (
    Rule("*.notebook", AcceptanceOutcome.LIMITED, "the axis did not complete: missing evidence, not a measured defect"),
    Rule("probe.health", AcceptanceOutcome.REBUILD, "the server is not healthy"),
    Rule("probe.context_limit", AcceptanceOutcome.EXTENSION, "the contract promises more than the server's limits"),
    Rule("environment.build_method", AcceptanceOutcome.LIMITED, "not the declared build: re-run as recipe.build custom, on its "
                                                      "own sheet"),
    Rule("environment.prefix_caching", AcceptanceOutcome.LIMITED, "prefix caching off: the expected cache gain is not counted"),
    Rule("environment.*", AcceptanceOutcome.REBUILD, "compatibility chain out of the recipe's scope"),
    Rule("agent.auto_tool_choice", AcceptanceOutcome.REBUILD, "a required recipe flag is missing"),
    Rule("agent.*", AcceptanceOutcome.LIMITED, "unstable tool calls: block the agents concerned, plain text may go live"),
    Rule("capacity.cold_load", AcceptanceOutcome.REBUILD, "the server never became ready: rework the topology or the image"),
    Rule("capacity.startup_oom", AcceptanceOutcome.REBUILD, "an OOM at startup: the weights, activations and KV pool do not "
                                                  "fit the cards as started"),
    Rule("capacity.engine_death", AcceptanceOutcome.REBUILD, "a fatal engine error that is not a memory error: image, driver "
                                                   "or topology"),
    Rule("capacity.context_refusal", AcceptanceOutcome.REBUILD, "an out-of-contract request broke the engine instead of being "
                                                      "refused"),
    Rule("capacity.memory_growth", AcceptanceOutcome.LIMITED, "memory grows steadily: not stable, more GPUs won't fix it"),
    Rule("capacity.server_errors", AcceptanceOutcome.LIMITED, "5xx while the engine stayed up"),
    Rule("capacity.incomplete_load", AcceptanceOutcome.EXTENSION, "requests refused, timed out, unreachable or cut at or below "
                                                        "the planned concurrency: the deployment as reached does not "
                                                        "serve the planned load"),
    Rule("capacity.rank_balance", AcceptanceOutcome.REBUILD, "one data-parallel rank is not like its peers (KV pool, decode rate "
                                                   "or prefix reuse): repair that rank's GPU or node, then re-measure"),
    Rule("capacity.roofline", AcceptanceOutcome.LIMITED, "the decode rate is above the hardware's bandwidth bound (a "
                                               "measurement error) or far below it (a probable misconfiguration)"),
    Rule("capacity.session_prefix_reuse", AcceptanceOutcome.LIMITED, "agent sessions lose their cached history between turns: "
                                                           "the cache gain is not counted, every turn pays its whole "
                                                           "prefill"),
    Rule("capacity.session_tool_calls", AcceptanceOutcome.LIMITED, "tool calls break under session load: block the agents "
                                                         "concerned"),
    Rule("capacity.latency_*", AcceptanceOutcome.EXTENSION, "client latency p95 at nominal load above the contract's objective "
                                                  "(its whole interval)"),
    Rule("capacity.*", AcceptanceOutcome.EXTENSION, "memory or queue saturates at nominal load"),
    Rule("prefix_cache.*", AcceptanceOutcome.LIMITED, "no measured cache reuse: the expected gain is not counted"),
    Rule("attestation.*", AcceptanceOutcome.LIMITED, "an operational prerequisite is not proven"),
    Rule("*", AcceptanceOutcome.LIMITED, "a non-critical check failed"),
)
NOT_PROVEN = "not proven: limited observation until the evidence exists"


def rule_for(rule_id: str) -> Rule:
    return next(r for r in RULES if fnmatch.fnmatchcase(rule_id, r.pattern))


def level_for(finding: Finding) -> tuple[str, str]:
    """The decision a finding forces (production for a pass or an info) and why, from the one table."""
    if finding.status in ("pass", "info"):
        return AcceptanceOutcome.PRODUCTION.value, "passed"
    if finding.status != "fail":
        return AcceptanceOutcome.LIMITED.value, NOT_PROVEN
    rule = rule_for(finding.rule)
    return rule.level.value, rule.why


def strongest(findings: Iterable[Finding]) -> str:
    """The strongest decision the findings force ("production" when none fails, warns or stays unobserved)."""
    return max((level_for(f)[0] for f in findings), key=STRENGTH.__getitem__, default=AcceptanceOutcome.PRODUCTION.value)
