"""What stands between a run and `production`, said once per item: the decision's reasons grouped by checklist item
(or by rule where no item takes it), their repeats dropped, each open item with the one parameter or file that would
close it. The terminal (`k3 validate`) and the index print the same list; `decision.json` keeps every reason.

A finding and the sheet item it leaves open say the same thing twice in the raw reasons ("C04 …: still open
(nothing compared: nothing compared: no host-side source …)" beside "environment.host_container: nothing compared:
…"); here the item is stated once, in the finding's words.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import textwrap

from ..core.roles import Loosened
from ..verdict.shapes import ChecklistRow, DecisionDoc
from ..verdict.sheet import ITEMS
from .markup import esc

__all__ = ["OpenItem", "group_reasons", "missing_lines"]

_LEVELS = ("environment-rebuild", "capacity-extension", "limited-observation", "production")
_REASON = re.compile(r"^(?P<level>" + "|".join(_LEVELS) + r"): (?P<rest>.*)$", re.S)
_ITEM = re.compile(r"^(?P<id>C\d\d) (?P<title>.*?): (?P<text>still open.*)$", re.S)
_INFO = " (info: compares nothing, proves nothing)"
_OPEN = re.compile(r"^still open \((?P<why>.*)\)$", re.S)
_SET = re.compile(r"\bset ((?:target|recipe|axes|contract|load|run)\.[A-Za-z_.]+[A-Za-z_])")
_REPEAT = re.compile(r"\b(nothing compared: )(?:nothing compared: )+")

# The parameter or file that closes an open item when its finding does not name one itself.
CLOSERS: dict[str, str] = {
    "C01": "axes.environment.image_inspect (the running container's `docker inspect` JSON) and recipe.image_digest",
    "C02": "axes.environment.collect_env (`vllm collect-env` run inside the container)",
    "C03": "axes.environment.nvidia_smi (the host's `nvidia-smi -q` output)",
    "C04": "axes.environment.nvidia_smi (the host's `nvidia-smi -q` output), beside axes.environment.collect_env",
    "C05": "axes.environment.server_log (the server's log from its start)",
    "C08": "target.restart (the command that restarts this deployment, so that the kit sees its cold load)",
    "C09": "target.gpu_metrics (dcgm-exporter, NVML on the host, or Prometheus)",
    "C11": "target.gpu_metrics (dcgm-exporter, NVML on the host, or Prometheus)",
    "C15": "axes.operations.attestation (see parameters/attestation.example.yaml)",
    "C16": "axes.operations.rollback_drill with rollback_to and roll_forward (or the attestation's rollback item)",
    "loosened threshold": "the attestation's items.thresholds_accepted (who accepted it and why), or the default",
}


@dataclasses.dataclass
class OpenItem:
    """One item of the list: a checklist item, or a rule no item takes, with every reason it gathered."""

    key: str  # C04, or the rule / label
    title: str
    level: str  # the decision level its reasons raise to (the strongest)
    # "measured": the target failed a check; "missing": evidence or a setting to provide; "nothing-to-compare": the
    # recipe or this deployment gives the item nothing to compare (a CPU build's CUDA), no parameter closes it
    kind: str = "missing"
    texts: list[str] = dataclasses.field(default_factory=list)
    rules: list[str] = dataclasses.field(default_factory=list)
    closes: str | None = None

    @property
    def text(self) -> str:
        return "; ".join(self.texts)

    def line(self) -> str:
        """The item whole: a reason is never cut (the terminal wraps it, `wrapped`)."""
        head = self.key if self.title in ("", self.key) else f"{self.key} {self.title}"
        return f"{head}: {self.text}" + (f" → {self.closes}" if self.closes and self.kind == "missing" else "")


def _clean(text: str) -> str:
    text = _REPEAT.sub(r"\1", " ".join(text.split()))
    m = _OPEN.match(text)
    return _REPEAT.sub(r"\1", m.group("why")) if m else text


def _item_of(rule: str, checklist: list[ChecklistRow]) -> ChecklistRow | None:
    """The checklist row whose rules take this finding rule (as the sheet matched them), if any."""

    for row in checklist:
        if rule in (row.get("rules") or ()):
            return row
    for item in ITEMS:
        if any(fnmatch.fnmatchcase(rule, p) for p in item.rules):
            return next((r for r in checklist if r.get("id") == item.id),
                        ChecklistRow(id=item.id, title=item.title, status="open"))
    return None


def _loosened(decision: DecisionDoc) -> list[str]:
    """The settings looser than their floor that nobody accepted, each in a few words (`path = value (floor x)`)."""

    out = []
    for d in decision.get("loosened_thresholds") or ():
        try:
            t = Loosened.model_validate(d)
        except (TypeError, ValueError):
            continue
        if not t.accepted:
            out.append(t.short())
    return out


def _parse(reason: str) -> tuple[str, str, str, str | None] | None:
    """(level, key, text, the item's title when the reason is a sheet item's own) of a raw reason, or None for a
    reason that raises nothing (the traffic cap, accepted thresholds, a production's closing sentence)."""
    m = _REASON.match(reason)
    if not m:
        return None
    level, rest = m.group("level"), m.group("rest")
    item = _ITEM.match(rest)
    if item:
        return level, item.group("id"), _clean(item.group("text")), item.group("title")
    key, sep, text = rest.partition(": ")
    return (level, key.strip(), _clean(text), None) if sep else (level, rest.strip(), "", None)


def _stronger(a: str, b: str) -> str:
    return a if _LEVELS.index(a) <= _LEVELS.index(b) else b


def group_reasons(decision: DecisionDoc) -> list[OpenItem]:
    """The decision's reasons, one `OpenItem` per checklist item or rule, in the order they first appear. The
    traffic cap, accepted thresholds and the closing sentence of a `production` are not items (they are printed
    as they are)."""
    checklist = [r for r in decision.get("checklist") or [] if isinstance(r, dict)]
    items: dict[str, OpenItem] = {}
    own_text: dict[str, str] = {}
    status: dict[str, str] = {}
    info: set[str] = set()
    for reason in decision.get("reasons") or []:
        parsed = _parse(str(reason))
        if parsed is None:
            continue
        level, key, text, own = parsed
        row: ChecklistRow | None = {"id": key, "title": own} if own is not None else _item_of(key, checklist)
        gid = str(row["id"]) if row else key
        entry = items.setdefault(gid, OpenItem(gid, str(row.get("title", "")) if row else key, level))
        entry.level = _stronger(level, entry.level)
        if row:
            status[gid] = next((str(r.get("status")) for r in checklist if r.get("id") == gid), "open")
        if _INFO in text:
            info.add(gid)
        text = text.replace(_INFO, "")
        if own is not None:
            own_text.setdefault(gid, text)  # used only when no finding of the item gave a reason
            continue
        text = text.split("; no attestation")[0] if key == "loosened threshold" else text
        if text not in entry.texts:
            entry.texts.append(text)
        entry.rules.append(key)
    if "loosened threshold" in items:
        items["loosened threshold"].texts = _loosened(decision) or items["loosened threshold"].texts
    for gid, entry in items.items():
        entry.texts = entry.texts or [own_text.get(gid, "")]
        found = _SET.search(entry.text) or _UNSET.search(entry.text)
        entry.closes = (found.group(1) if found and found.re is _SET else
                        f"axes.environment.{found.group(1)}" if found else CLOSERS.get(gid))
        entry.kind = _kind(entry, gid, status.get(gid), gid in info, found is not None)
    return list(items.values())


def _kind(entry: OpenItem, gid: str, status: str | None, info: bool, named: bool) -> str:
    """Which group an item is in: the kit's own limits on this machine (its client's calibration: not the
    target's), a defect measured on the target (a failing item, or any reason stronger than limited observation:
    no parameter closes it), a source the operator has not configured, or nothing to compare here."""
    if entry.rules and all(any(fnmatch.fnmatchcase(r, p) for p in KIT_RULES) for r in entry.rules):
        return "kit"
    if status == "fail" or entry.level != "limited-observation":
        return "measured"
    if info and not named:
        return "nothing-to-compare"
    return "missing" if entry.closes is not None else "measured"


# The rules about the kit itself on the machine it ran on (how well its client kept time under this host's load),
# not about the target: their own group, so that a loaded machine is not read as a defect of the deployment.
KIT_RULES = ("capacity.client_calibration", "*.client_calibration")
# A source the environment axis names as not configured: the parameter that would provide it.
_UNSET = re.compile(r"\b(collect_env|server_log|image_inspect|nvidia_smi): not configured\b")

GROUPS = (("measured", "the target's defects, measured on it"),
          ("missing", "sources not configured: provide each and run again"),
          ("kit", "the kit's own limits on this machine (not the target's)"),
          ("nothing-to-compare", "open, with nothing to compare on this deployment"))


def _ordered(items: list[OpenItem], kind: str) -> list[OpenItem]:
    """One group's items: the sheet's items in their order, then the rules no item takes, as they came."""
    mine = [i for i in items if i.kind == kind]
    return sorted((i for i in mine if _ITEM_ID.match(i.key)), key=lambda i: i.key) + \
        [i for i in mine if not _ITEM_ID.match(i.key)]


_ITEM_ID = re.compile(r"^C\d\d$")


def missing_lines(decision: DecisionDoc, *, width: int = 160) -> list[str]:
    """The short list the terminal prints under `decision:`: measured defects first, then what to provide, then
    what this deployment gives nothing to compare; the reasons that raise nothing (the traffic cap…) and the
    re-examination date. Every reason stays in decision.json and the report."""
    items = group_reasons(decision)
    out: list[str] = []
    for kind, words in GROUPS:
        group = _ordered(items, kind)
        if group:
            out.append(f"{words} ({len(group)}):")
            out += [line for i in group for line in wrapped(i.line(), width, "  - ", "    ")]
    for reason in decision.get("reasons") or []:
        if _parse(str(reason)) is None:
            out += wrapped(" ".join(str(reason).split()), width, "", "  ")
    if decision.get("reexamine_on"):
        out.append(f"re-examine on: {decision['reexamine_on']}")
    return out


def wrapped(text: str, width: int, first: str, then: str) -> list[str]:
    """`text` whole, over as many lines of `width` as it takes (words never split, nothing cut)."""

    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=then, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def missing_html(decision: DecisionDoc) -> str:
    """The same list for the index, above the fold: the groups in the terminal's order, each under its heading and
    in its own colour (`k3-missing-<group>`), one row per item in the checklist's order, the parameter that
    closes it."""

    items = group_reasons(decision)
    if not items:
        return ""
    blocks = []
    for kind, words in GROUPS:
        group = _ordered(items, kind)
        if not group:
            continue
        rows = "".join(
            f"<li><b>{esc(i.key)}</b> {esc(i.title) if i.title != i.key else ''}: {esc(i.text)}"
            + (f" <b>→ {esc(i.closes)}</b>" if i.closes and i.kind == "missing" else "")
            + f" <small>({esc(i.level)})</small></li>" for i in group)
        blocks.append(f"<p class='k3-group k3-missing-{kind}'><b>{esc(words[0].upper() + words[1:])}</b> "
                      f"({len(group)}):</p><ul class='k3-missing k3-missing-{kind}'>{rows}</ul>")
    measured = sum(1 for i in items if i.kind == "measured")
    return (f"<p><b>What stands between this run and production</b> ({len(items)} items, {measured} measured on the "
            f"target, {len(items) - measured} to provide or not the target's):</p>" + "".join(blocks))
