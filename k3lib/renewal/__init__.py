"""The three-week renewal review (seed 004): load, useful production, API comparison, full cost, stability
drill, operations, and the renew / reduce / dual-circuit / exit-to-api decision."""

from .decision import DECISIONS, EXIT_CODES, RULES, Decision, Indicators, RenewalDecision, choose, decide_renewal
from .figures import rules_table
from .findings import RenewalFinding
from .notebook import axis_figure, axis_result, axis_table, drill_table, record_axis, review_drill
from .params import RenewalParams, load_any_review, load_review_params
from .records import decide_review
from .review import ReviewData, analyse, decide_from_axes, load_review
from .rules import DeclaredBenefits, RenewalRules
from .session import ReviewContext, open_review, open_review_summary

__all__ = [
    "DECISIONS",
    "Decision",
    "DeclaredBenefits",
    "EXIT_CODES",
    "Indicators",
    "RULES",
    "RenewalDecision",
    "RenewalFinding",
    "RenewalParams",
    "RenewalRules",
    "ReviewContext",
    "ReviewData",
    "analyse",
    "axis_figure",
    "axis_result",
    "axis_table",
    "choose",
    "decide_from_axes",
    "decide_renewal",
    "decide_review",
    "drill_table",
    "load_any_review",
    "load_review",
    "load_review_params",
    "open_review",
    "open_review_summary",
    "record_axis",
    "review_drill",
    "rules_table",
]
