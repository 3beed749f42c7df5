"""What the kit cannot observe: an operator's attestation (who, when, how, a link) and the rollback drill.

Two checklist items depend on them: the operator knows the context limit, the concurrency limit and the rollback
signal; the rollback to the previous image was rehearsed. Without an attestation or a drill they stay open.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shlex
import time
from typing import Any, Sequence, TypedDict
from urllib.parse import urlsplit

import httpx

from ..core.attested import (  # noqa: F401 - public here too
    AttestationRecord,
    AttestedItems,
    LimitsKnownItem,
    RollbackRehearsedItem,
    parse_attestation,
    parse_attestation_text,
    read_attestation,
)
from ..core.errors import ArtifactError
from ..core.evidence import Finding, FindingStatus
from ..core.numbers import figure
from ..core.operator import DrillCommand, HttpAction, parse_drill_command, run_command, run_operator_command  # noqa: F401 - public here too
from ..core.outcomes import REEXAMINE_AFTER_DAYS
from ..core.versions import parse_version
from ..io import addresses
from ..io.claims import metrics_claims
from .environment.run import fetch_text
from .environment.sources import parse_image_inspect, substitute

RULE_LIMITS = "attestation.operator_knows_limits"
RULE_ROLLBACK = "attestation.rollback_rehearsed"


@dataclasses.dataclass(frozen=True)
class Served:
    """What the target serves at one moment: its `/version` and, when an inspect source is configured, the image
    reference and digest of the running container. `error` says why something could not be observed."""

    vllm_version: str | None = None
    image: str | None = None
    digest: str | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return any((self.vllm_version, self.image, self.digest))

    @property
    def image_known(self) -> bool:
        return bool(self.image or self.digest)

    def same_image(self, other: "Served") -> bool | None:
        """Whether both serve the same image: by digest where both show one (a retag is the same image), else by
        reference; None when either side shows neither."""
        if self.digest and other.digest:
            return self.digest == other.digest
        if self.image and other.image and not (self.digest or other.digest):
            return self.image == other.image
        return None

    def identical_to(self, other: "Served") -> bool:
        """Every figure `other` shows is shown here too, and equal: the same release, not merely one field alike."""
        pairs = [(getattr(self, f), getattr(other, f)) for f in ("vllm_version", "image", "digest")
                 if getattr(other, f)]
        return bool(pairs) and all(a == b for a, b in pairs)

    def same_as(self, other: "Served") -> bool:
        """Every figure known on both sides is equal (and at least one was compared)."""
        pairs = [(a, b) for a, b in ((self.vllm_version, other.vllm_version), (self.image, other.image),
                                     (self.digest, other.digest)) if a and b]
        return bool(pairs) and all(a == b for a, b in pairs)

    def matches(self, ref: str) -> bool:
        """`ref` names this release: its vLLM version (with or without a leading v), its image or its digest."""
        ref = ref.strip()
        return ref.lstrip("v") == (self.vllm_version or "").lstrip("v") or ref in (self.image, self.digest) or (
            ref == self.image.rsplit(":", 1)[-1] if self.image else False)

    def __str__(self) -> str:
        parts = [f"vLLM {self.vllm_version}" if self.vllm_version else None,
                 (f"image {self.image}" + (f"@{self.digest[:19]}…" if self.digest else "")) if self.image else
                 (f"digest {self.digest[:19]}…" if self.digest else None)]
        return ", ".join(p for p in parts if p) or f"nothing observable ({self.error})"


class RollForward(TypedDict):
    """The drill's roll-forward: the command shown, its detail, whether the target served again, and what."""

    command: str
    detail: str
    serving: bool
    error: str | None
    served: Served | None


class ServerIdentity(TypedDict):
    """What a server says of itself that another cannot share (`server_identity`)."""

    roots: frozenset[str]
    start: float | None


@dataclasses.dataclass(frozen=True)
class DrillResult:
    command: str
    check_url: str
    command_ok: bool
    command_detail: str  # exit status or HTTP status, with the start of the output
    health_status: int | None
    chat_ok: bool
    error: str | None
    duration_s: float
    before: Served | None = None  # served before the command
    after: Served | None = None  # served once the target answered again after the rollback
    rollback_to: str | None = None  # the previous release the operator names, if any
    forward: RollForward | None = None  # the roll-forward: command, detail, serving, served

    @property
    def serving(self) -> bool:
        return self.command_ok and self.health_status == 200 and self.chat_ok

    def judged(self) -> tuple[FindingStatus, str]:
        """(status, why): pass only when a change of image was shown (its digest, or its reference where no digest
        is shown, differs before and after the command), the previous release served, and the roll-forward shown
        serving the accepted release again — the same image, digest and version as before the drill."""
        if not self.serving:
            return "fail", f"rollback drill failed: `{self.command}`: {self.error or self.command_detail}"
        before, after = self.before or Served(error="not observed"), self.after or Served(error="not observed")
        if not before.known or not after.known:
            return "not-observable", (f"open: the drill ran `{self.command}` and the target serves, but which release "
                                      f"it serves could not be shown (before: {before}; after: {after})")
        if before.same_as(after):
            return "not-observable", (f"open: `{self.command}` changed nothing — the target serves {after} as "
                                      "before: no rollback to a previous release was shown")
        same = before.same_image(after)
        if same is None:
            return "not-observable", (f"open: which image the target serves could not be compared before and after "
                                      f"`{self.command}` (before: {before}; after: {after}); a changed /version alone "
                                      "does not show a restore to the previous image (set axes.environment."
                                      "image_inspect)")
        if same:
            what = f"digest {before.digest}" if before.digest and after.digest else f"image {before.image}"
            return "fail", (f"the {what} never changed across `{self.command}` (before: {before}; after: {after}): "
                            "no restore to a previous image was shown")
        if self.rollback_to and not after.matches(self.rollback_to):
            return "fail", (f"after `{self.command}` the target serves {after}, not the previous release "
                            f"{self.rollback_to} (before: {before})")
        if not self.rollback_to and _newer(after.vllm_version, before.vllm_version):
            return "fail", f"`{self.command}` moved forward ({before} → {after}), not back to a previous release"
        if self.forward is None:
            return "fail", (f"rolled back to {after}, but no roll-forward ran (axes.operations.roll_forward): the "
                            f"target was left on the previous release, not the accepted {before}")
        again = self.forward.get("served")
        if not self.forward.get("serving"):
            return "fail", (f"rolled back to {after}, but the roll-forward `{self.forward.get('command')}` did "
                            f"not serve again: {self.forward.get('error')}")
        if not isinstance(again, Served) or not again.identical_to(before):
            return "fail", (f"rolled back to {after}, but the roll-forward serves {again}, not the accepted "
                            f"{before}")
        return "pass", (f"rollback drill: served {before}; after `{self.command}` ({self.command_detail}) it served "
                        f"the previous release {after} — /health 200 and a chat completion; rolled forward with "
                        f"`{self.forward.get('command')}`: serving the accepted {again} again "
                        f"({figure(self.duration_s, ' s')})")

    @property
    def ok(self) -> bool:
        return self.judged()[0] == "pass"

    def finding(self) -> Finding:
        status, message = self.judged()
        evidence = dataclasses.asdict(self)
        observed = {"before": str(self.before) if self.before else None,
                    "after": str(self.after) if self.after else None}
        return Finding(rule=RULE_ROLLBACK, status=status, message=message, observed=observed,
                       expected={"after": self.rollback_to or "a previous release, then serving"}, evidence=evidence)


def _newer(a: str | None, b: str | None) -> bool:
    va, vb = parse_version(a), parse_version(b)
    return va is not None and vb is not None and va > vb


def served_by_target(location: str | None, base: str, *, timeout_s: float = 3.0) -> bool:
    """Whether a source's URL (`{base_url}` allowed) is served by the target under test itself: what the deployment
    says of itself proves nothing about it, except from the kit's own demo stand-in. The host is compared by what
    its name resolves to (`localhost`, `127.0.0.1`, `::1`, any address of this machine's interfaces, another DNS
    name of the same address are one host, `k3lib.io.addresses`); on the same host at another port, the server there
    is the target when it states the target's own identity (its process start time, or the root of a model it
    serves); under a name that resolves elsewhere (a proxy, a NAT, another view of the DNS), when it states the
    target's process start time."""

    if not location:
        return False
    url = substitute(location, base)
    if urlsplit(url).scheme not in ("http", "https"):
        return False
    if addresses.same_origin(url, base):
        return True
    here = addresses.same_host(urlsplit(url).hostname, urlsplit(base).hostname)
    mine, theirs = server_identity(base, timeout_s), server_identity(addresses.origin(url), timeout_s)
    # a model root is shared by every deployment of one model: it names the target on this host only
    return bool(here and theirs["roots"] & mine["roots"]) or (
        mine["start"] is not None and theirs["start"] == mine["start"])


def server_identity(base: str, timeout_s: float = 3.0) -> ServerIdentity:
    """What a server says of itself that another cannot share: the roots of the models `/v1/models` lists and the
    process start time its `/metrics` states (either may be absent: a server that is not a model server)."""

    roots: set[str] = set()
    start = None
    with httpx.Client(base_url=base, timeout=timeout_s) as http:
        try:
            body = http.get("/v1/models").json()
            cards = body.get("data", []) if isinstance(body, dict) else []
            roots = {str(c.get("root")) for c in cards if isinstance(c, dict) and c.get("root")}
        except (httpx.HTTPError, ValueError):
            pass
        try:
            resp = http.get("/metrics")
            start = metrics_claims([resp.text]).get("start_time") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            pass
    return {"roots": frozenset(roots), "start": start}


def served_release(http: Any, inspect: str | None, base: str, *, trust_target: bool = True) -> Served:
    """`/version` and, when `inspect` (a path or URL, `{base_url}` allowed) is set, the running image and digest.
    With `trust_target` False, an inspect served by the target itself is not read: it proves nothing."""

    version = image = digest = None
    errors = []
    if inspect and not trust_target and served_by_target(inspect, base):
        errors.append(f"image_inspect {inspect} is served by the target under test: not evidence of the image it "
                      "runs (only the kit's own emulator stand-in may serve it)")
        inspect = None
    try:
        resp = http.get("/version")
        version = resp.json().get("version") if resp.status_code == 200 else None
        if version is None:
            errors.append(f"/version answered {resp.status_code}")
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        errors.append(f"/version: {type(exc).__name__}")
    if inspect:
        src = fetch_text("image_inspect", inspect, base, http)
        if src.ok:
            try:
                ref = parse_image_inspect(src.text or "")
                image, digest = ref.reference, ref.digest
            except ArtifactError as exc:
                errors.append(f"image_inspect: {exc}")
        else:
            errors.append(f"image_inspect: {src.error}")
    return Served(str(version) if version else None, image, digest, "; ".join(errors) or None)


def accepted_release(base_url: str, inspect: str | None, api_key: str | None = None,
                     timeout_s: float = 10.0, *, trust_target: bool = True) -> Served:
    """The release the target serves now (the accepted one, when no drill moves it): `/version` and the image."""

    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base, headers=headers, timeout=max(1.0, timeout_s)) as http:
        return served_release(http, inspect, base, trust_target=trust_target)


def _serve_check(http: Any, deadline: float, poll_s: float, model: str | None) -> tuple[int | None, bool, str | None]:
    """Poll /health until 200 or the deadline, then send one chat completion: (health, chat ok, error)."""

    health: int | None = None
    last_error = "no answer"
    # A restarted server refuses connections, then answers 503 while loading: poll until 200 or the deadline.
    while True:
        try:
            health = http.get("/health").status_code
            last_error = f"/health answered {health}"
        except httpx.HTTPError as exc:
            health, last_error = None, f"/health: {type(exc).__name__}"
        if health == 200 or time.monotonic() + poll_s > deadline:
            break
        time.sleep(poll_s)
    if health != 200:
        return health, False, f"did not serve in time ({last_error})"
    try:
        if model is None:
            cards = http.get("/v1/models").json().get("data") or []
            model = cards[0]["id"] if cards else None
        if model is None:
            return health, False, "/v1/models lists no model to send a chat completion to"
        resp = http.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "Reply with OK."}],
            "max_tokens": 8, "temperature": 0})
        body = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return health, False, f"chat completion: {type(exc).__name__}: {exc}"
    choices = (body or {}).get("choices") if isinstance(body, dict) else None
    chat_ok = choices is not None and bool(choices) and isinstance(choices[0], dict) \
        and isinstance(choices[0].get("message"), dict)
    return health, chat_ok, None if chat_ok else f"chat completion answered HTTP {resp.status_code} without a message"


def rollback_drill(command: Sequence[str] | str, check_url: str, timeout_s: float = 120.0, *,
                   model: str | None = None, api_key: str | None = None, poll_s: float = 0.25,
                   inspect: str | None = None, rollback_to: str | None = None,
                   roll_forward: Sequence[str] | str | None = None, trust_target: bool = True) -> DrillResult:
    """Show the release served (`/version`, the inspected image and digest), run the operator's rollback command,
    wait until the target serves again (/health 200, one chat completion), show the release served now — the
    previous one — and, with `roll_forward`, return to the accepted release and show it served again."""

    base = check_url.rstrip("/")
    cmd = parse_drill_command(command, base)
    fwd = parse_drill_command(roll_forward, base) if roll_forward else None
    shown = str(cmd) if isinstance(cmd, HttpAction) else shlex.join(cmd)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.monotonic()

    with httpx.Client(base_url=base, headers=headers, timeout=max(1.0, min(10.0, timeout_s))) as http:
        before = served_release(http, inspect, base, trust_target=trust_target)

        def result(command_ok: bool, detail: str, health: int | None, chat_ok: bool, error: str | None,
                   after: Served | None = None, forward: RollForward | None = None) -> DrillResult:
            return DrillResult(shown, base, command_ok, detail, health, chat_ok, error,
                               round(time.monotonic() - t0, 3), before, after, rollback_to, forward)

        command_ok, detail = run_command(cmd, timeout_s, headers)
        if not command_ok:
            return result(False, detail, None, False, f"the rollback command failed ({detail})")
        health, chat_ok, error = _serve_check(http, t0 + timeout_s, poll_s, model)
        if error and health != 200:
            within = "within " + figure(timeout_s, " s")
            error = f"{base} {error.replace('in time', within)}"
        after = served_release(http, inspect, base, trust_target=trust_target) if health == 200 else None
        forward: RollForward | None = None
        if fwd is not None and health == 200 and chat_ok:
            shown_fwd = str(fwd) if isinstance(fwd, HttpAction) else shlex.join(fwd)
            t1 = time.monotonic()
            f_ok, f_detail = run_command(fwd, timeout_s, headers)
            f_health, f_chat, f_error = _serve_check(http, t1 + timeout_s, poll_s, model) if f_ok else \
                (None, False, f"the roll-forward command failed ({f_detail})")
            forward = {"command": shown_fwd, "detail": f_detail, "serving": f_ok and f_health == 200 and f_chat,
                       "error": f_error, "served": served_release(http, inspect, base, trust_target=trust_target)
                       if f_health == 200 else None}
    return result(True, detail, health, chat_ok, error, after, forward)


# -- findings -----------------------------------------------------------------------------------------------------

def _by(att: AttestationRecord) -> str:
    return f"attested by {att.who} on {att.when.isoformat()} ({att.how}; {att.link})"


def _date_problem(attestation: AttestationRecord | None, today: dt.date) -> str | None:
    """Why the attestation's date cannot vouch for this run: after today, or older than the re-examination window
    (`REEXAMINE_AFTER_DAYS`, the interval at which a limited decision is looked at again)."""
    if attestation is None:
        return None
    if attestation.when > today:
        return f"dated {attestation.when} which is after today {today}"
    oldest = today - dt.timedelta(days=REEXAMINE_AFTER_DAYS)
    if attestation.when < oldest:
        return (f"dated {attestation.when}, older than the {REEXAMINE_AFTER_DAYS}-day re-examination window "
                f"(from {oldest} to {today}): attest again")
    return None


def _names(ref: str, served: Served) -> bool:
    """`ref` (an image reference, possibly with @digest, or a digest) names the release `served`."""
    name, _, digest = ref.partition("@")
    return served.matches(ref) or (bool(digest) and digest == served.digest) or (
        bool(served.image) and name == served.image) or served.matches(name)


def attestation_findings(attestation: AttestationRecord | None, *, drill: DrillResult | None = None,
                         contract_context_tokens: int | None = None, planned_concurrency: int | None = None,
                         today: dt.date | None = None, accepted: Served | None = None,
                         unread: str | None = None) -> list[Finding]:
    """One finding per item. An item with neither attestation nor drill is `not-observable`: open, never a pass.
    An attestation counts only dated inside the re-examination window; an attested rehearsal only when its
    previous image is shown to differ from `accepted`, the release the target serves (before any drill). `unread`:
    why a configured attestation could not be read (its items stay open, and say so)."""

    today = today or dt.date.today()
    items = attestation.items if attestation else None
    dated = _date_problem(attestation, today)
    out: list[Finding] = []

    limits = items.operator_knows_limits if items else None
    if limits is None:
        out.append(Finding(rule=RULE_LIMITS, status="not-observable",
                           message="open: no attestation that the operator knows the context limit, the concurrency "
                                   "limit and the rollback signal "
                                   + (f"({unread})" if unread else "(see parameters/attestation.example.yaml)")))
    else:
        assert attestation is not None  # the limits are one of its items
        problems = []
        if dated:
            problems.append(dated)
        if contract_context_tokens is not None and limits.context_limit_tokens != contract_context_tokens:
            problems.append(f"the operator's context limit {limits.context_limit_tokens} tokens is not the accepted "
                            f"contract's {contract_context_tokens}")
        if planned_concurrency is not None and limits.concurrency_limit > planned_concurrency:
            problems.append(f"the operator's concurrency limit {limits.concurrency_limit} is above the accepted "
                            f"planned concurrency {planned_concurrency}")
        observed = limits.model_dump()
        expected = {"context_limit_tokens": contract_context_tokens, "concurrency_limit": planned_concurrency}
        if problems:
            out.append(Finding(rule=RULE_LIMITS, status="fail",
                               message="; ".join(problems) + f" — {_by(attestation)}",
                               observed=observed, expected=expected))
        else:
            out.append(Finding(rule=RULE_LIMITS, status="pass",
                               message=f"operator knows context {limits.context_limit_tokens} tokens, concurrency "
                                       f"{limits.concurrency_limit}, rollback signal \"{limits.rollback_signal}\" — "
                                       + _by(attestation), observed=observed, expected=expected))

    rehearsed = items.rollback_rehearsed if items else None
    if drill is not None:
        # A drill just run is stronger evidence than a statement: a failed drill fails the item whatever was attested.
        out.append(drill.finding())
    elif rehearsed is not None:
        assert attestation is not None
        if dated:
            out.append(Finding(rule=RULE_ROLLBACK, status="fail",
                               message=f"rollback rehearsal {dated} — {_by(attestation)}",
                               observed=rehearsed.model_dump()))
        elif accepted is None or not accepted.known:
            out.append(Finding(rule=RULE_ROLLBACK, status="not-observable",
                               message=f"open: the rollback to {rehearsed.previous_image} is attested, but the release "
                                       "the target serves could not be shown "
                                       f"({accepted.error if accepted else 'not read'}), so the previous image cannot "
                                       "be shown to differ from the accepted one — " + _by(attestation),
                               observed=rehearsed.model_dump()))
        elif _names(rehearsed.previous_image, accepted):
            out.append(Finding(rule=RULE_ROLLBACK, status="fail",
                               message=f"the attested previous image {rehearsed.previous_image} is the accepted release "
                                       f"the target serves ({accepted}): no rollback to a previous image — "
                                       + _by(attestation),
                               observed=rehearsed.model_dump(), expected={"different_from": str(accepted)}))
        else:
            out.append(Finding(rule=RULE_ROLLBACK, status="pass",
                               message=f"rollback to {rehearsed.previous_image} (not the accepted {accepted}) "
                                       f"rehearsed: {rehearsed.result} — " + _by(attestation),
                               observed=rehearsed.model_dump(), expected={"different_from": str(accepted)}))
    else:
        out.append(Finding(rule=RULE_ROLLBACK, status="not-observable",
                           message="open: the rollback to the previous image was neither rehearsed by a drill nor "
                                   "attested"))
    return out
