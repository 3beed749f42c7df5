"""The three-week renewal review (seed 004): load, useful production, API comparison, full cost, stability
drill, operations, and the renew / reduce / dual-circuit / exit-to-api decision."""

from .decision import DECISIONS, EXIT_CODES, Indicators, RenewalDecision, choose, decide_renewal
from .params import RenewalParams, load_any_review, load_review_params
from .review import ReviewData, analyse, decide_from_axes, load_review
from .rules import DeclaredBenefits, RenewalRules

__all__ = [
    "DECISIONS",
    "DeclaredBenefits",
    "EXIT_CODES",
    "Indicators",
    "RenewalDecision",
    "RenewalParams",
    "RenewalRules",
    "ReviewData",
    "analyse",
    "choose",
    "decide_from_axes",
    "decide_renewal",
    "load_any_review",
    "load_review",
    "load_review_params",
]
