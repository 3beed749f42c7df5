"""The three-week renewal review (seed 004): load, useful production, API comparison, full cost, stability
drill, operations, and the renew / reduce / dual-circuit / exit-to-api decision.

It stands on its own floor, just above the acceptance verdict: its inputs, analyses, records and decision import
only `core`, `io`, `axes` and `verdict` (the accepted run it reads), and nothing below imports it. The review notebooks'
entry point (their context, the axis recorded, the live drill) is `k3lib.renewal.notebook`; their opener, tables and
figures are `k3lib.review` (`k3lib.opening.review`); the review batch is `k3lib.batch.renewal`."""

from .decision import DECISIONS, EXIT_CODES, RULES, RenewalOutcome, Indicators, RenewalDecision, choose, decide_renewal
from .findings import RenewalFinding
from .params import RenewalParams, load_any_review, load_review_params
from .records import decide_review
from .review import ReviewData, analyse, decide_from_axes, load_review
from .rules import DeclaredBenefits, RenewalRules

__all__ = [
    "DECISIONS",
    "DeclaredBenefits",
    "EXIT_CODES",
    "Indicators",
    "RULES",
    "RenewalDecision",
    "RenewalFinding",
    "RenewalOutcome",
    "RenewalParams",
    "RenewalRules",
    "ReviewData",
    "analyse",
    "choose",
    "decide_from_axes",
    "decide_renewal",
    "decide_review",
    "load_any_review",
    "load_review",
    "load_review_params",
]
