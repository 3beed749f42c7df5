"""The signed sheet: `signature.json` (reviewer, time, decision, manifest sha256) and an SSH signature of the manifest.

Both sit beside manifest.json, unlisted: signing closes the manifest, so any later write to the run changes it and
`verify_run` names what changed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError, EvidenceError
from ..core.numbers import figure
from ..core.plan import run_kind
from ..core.record import Record
from ..core.store import MANIFEST, RunStore, atomic_write_bytes, to_json_bytes
from ..verdict.decision import decision_line, is_demo
from ..verdict.recompute import decision_problems, recomputed
from .pdf import pdf_problems
from .shapes import VerifyCounts

SIGNATURE = "signature.json"
SSH_SIG = MANIFEST + ".sig"
NAMESPACE = "k3kit-manifest"
# Files that live in a run folder without being listed in its manifest, by design.
UNLISTED_BY_DESIGN = frozenset({MANIFEST, SIGNATURE, SSH_SIG})
SSH_TIMEOUT_S = 60.0


class SignatureRecord(Record):
    """`signature.json`: who signed which manifest, when, for which decision (`model_dump()`)."""

    run_id: str
    reviewer: str
    identity: str  # the principal an allowed-signers file names (defaults to the reviewer)
    signed_at: str
    decision: str | None
    manifest_sha256: str
    namespace: str | None = None  # set when an SSH signature was made
    key_fingerprint: str | None = None
    demo: bool = False  # a demo run (its target the kit's emulator), signed as one with --demo


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    run_id: str
    changed: tuple[str, ...]  # one line per problem, each naming the file
    notes: tuple[str, ...]  # what was and was not checked
    signature_mode: str  # allowed-signers | check-novalidate | unsigned-key | not-signed | unreadable
    files_checked: int = 0
    manifest_path: str = MANIFEST

    @property
    def ok(self) -> bool:
        return not self.changed

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def lines(self) -> list[str]:
        """The verdict first (`OK n files match …` keeps the unsigned output of `k3 verify`), then each change."""
        if self.ok:
            head = f"OK {self.files_checked} files match {self.manifest_path} (signature: {self.signature_mode})"
        else:
            head = f"FAILED {len(self.changed)} problem(s) in {self.run_id} (signature: {self.signature_mode})"
        return [head] + [f"CHANGED {line}" for line in self.changed] + [f"NOTE {line}" for line in self.notes]


def _ssh_keygen() -> str:
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise BadInputError("ssh-keygen not found; install openssh-client (apt-get install openssh-client) "
                            "or sign without --key", source="ssh-keygen")
    return exe


def _run_ssh(args: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run([_ssh_keygen(), *args], input=stdin, capture_output=True, timeout=SSH_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        # A passphrase prompt would wait forever; a signing key for CI must be unencrypted or held by an agent.
        raise BadInputError(f"ssh-keygen did not finish within {figure(SSH_TIMEOUT_S, ' s')} (a passphrase prompt?); "
                            "use an unencrypted key or one held by ssh-agent", source="ssh-keygen") from None


def _first_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    text = (proc.stderr or proc.stdout or b"").decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else f"exit status {proc.returncode}"


def _fingerprint(key: Path) -> str | None:
    proc = _run_ssh(["-l", "-f", str(key)], b"")
    parts = proc.stdout.decode("utf-8", "replace").split()
    return parts[1] if proc.returncode == 0 and len(parts) > 1 else None


def _refuse_thin(store: RunStore) -> None:
    """A renewal decision fired on a premise the evidence does not show (`review.thin`) is not signed: the data is
    too thin for any of the four decisions (removing the finding is a decision its evidence does not give, which
    the check below refuses)."""
    if not store.path("decision.json").is_file():
        return
    stored = store.read_json("decision.json")
    findings = stored.get("findings") if isinstance(stored, dict) else None
    thin = next((f for f in findings or () if isinstance(f, dict) and f.get("rule") == "review.thin"), None)
    if thin is not None:
        raise BadInputError(f"refusing to sign: {thin.get('sentence')}", source=str(store.root))


def sign_run(run_dir: str | Path, reviewer: str, *, key: str | Path | None = None, identity: str | None = None,
             now: dt.datetime | None = None, force: bool = False, demo: bool = False) -> SignatureRecord:
    """Sign a finished run: it must verify, hold decision.json, and not be signed already (unless `force`). A run
    against the kit's emulator is a demo, not an acceptance: refused, unless `demo` signs it as one (marked so in
    signature.json)."""
    store = RunStore.open(run_dir)
    reviewer = " ".join(str(reviewer or "").split())
    if not reviewer:
        raise BadInputError("a reviewer name is required", source="--reviewer")
    identity = " ".join((identity or reviewer).split())
    if '"' in identity or "," in identity:
        # an allowed-signers principal with spaces is written in double quotes ("Camille Durand" ssh-ed25519 …),
        # and principals are comma-separated: neither character can be part of one
        raise BadInputError(f"identity {identity!r} holds a double quote or a comma, which an allowed-signers "
                            "principal cannot; pass --identity (e.g. an e-mail address)", source="--identity")
    if (store.root / SIGNATURE).exists() and not force:
        prior = store.read_json(SIGNATURE) or {}
        raise BadInputError(f"already signed by {prior.get('reviewer')!r} at {prior.get('signed_at')}; "
                            "re-sign only with --force", source=str(store.root / SIGNATURE))
    _refuse_thin(store)
    problems = list(store.verify()) + [f"{rel}: a rewrite cut by a kill (resume the run first)"
                                       for rel, entry in store.manifest()["files"].items() if entry.get("pending")]
    if problems:
        raise EvidenceError(f"{store.root}: refusing to sign a run that does not verify: " + "; ".join(problems))
    problems = decision_problems(store, _decide_again(store))
    if problems:
        raise EvidenceError(f"{store.root}: refusing to sign a decision its evidence does not give: "
                            + "; ".join(problems))
    manifest = store.manifest()
    if "decision.json" not in manifest["files"]:
        raise BadInputError("no decision.json in the manifest: run `k3 validate` to the end before signing",
                            source=str(store.root))
    decided = store.read_json("decision.json") or {}
    decision = decided.get("decision")
    is_demo_run = is_demo(decided.get("target_kind"))
    if is_demo_run and not demo:
        raise BadInputError(f"{store.run_id} is a demo: its target is the kit's emulator ({decided.get('target_kind')})"
                            f", so `{decision_line(str(decision), decided.get('target_kind'))}` is a demonstration, "
                            "not an acceptance; sign a run against the real deployment (--demo signs a demo as one)",
                            source=str(store.root))
    # Hash and sign the same bytes: read once, feed ssh-keygen from memory.
    manifest_bytes = (store.root / MANIFEST).read_bytes()
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    sig_bytes = None
    fingerprint = None
    if key is not None:
        key = Path(key)
        if not key.is_file():
            raise BadInputError("SSH key not found", source=str(key))
        proc = _run_ssh(["-Y", "sign", "-f", str(key), "-n", NAMESPACE], manifest_bytes)
        if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
            raise BadInputError(f"ssh-keygen -Y sign failed: {_first_line(proc)}", source=str(key))
        sig_bytes = proc.stdout
        fingerprint = _fingerprint(key)
    if (store.root / MANIFEST).read_bytes() != manifest_bytes:
        raise EvidenceError(f"{store.root / MANIFEST} changed while signing: the run is still being written")
    when = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    stamp = when.isoformat(timespec="seconds").replace("+00:00", "Z")
    record = SignatureRecord(run_id=store.run_id, reviewer=reviewer, identity=identity, signed_at=stamp,
                             decision=decision, manifest_sha256=digest, namespace=NAMESPACE if sig_bytes else None,
                             key_fingerprint=fingerprint, demo=is_demo_run)
    # Written beside the manifest, never through RunStore.write_*: that would add them to the manifest just signed.
    if sig_bytes is not None:
        atomic_write_bytes(store.root / SSH_SIG, sig_bytes)
    elif (store.root / SSH_SIG).exists():
        (store.root / SSH_SIG).unlink()  # a --force re-sign without key must not leave a stale signature behind
    atomic_write_bytes(store.root / SIGNATURE, to_json_bytes(record.model_dump()))
    return record


def _unlisted(store: RunStore, listed: set[str]) -> list[str]:
    out = []
    for path in sorted(store.root.rglob("*")):
        rel = path.relative_to(store.root).as_posix()
        if path.is_file() and rel not in listed and rel not in UNLISTED_BY_DESIGN \
                and not any(part.startswith(".") for part in Path(rel).parts):
            out.append(rel)
    return out


def _decide_again(store: RunStore) -> Any:
    """How this run's decision is decided again: a review's by the renewal rules, an acceptance run's by the
    table (both pure, in the layers below)."""
    if run_kind(store) == "renewal":
        from ..renewal.records import decided_again

        return decided_again
    return recomputed


def verify_run(run_dir: str | Path, *, allowed_signers: str | Path | None = None) -> VerifyResult:
    """Every hash, then signature.json against the manifest, then the SSH signature when there is one; when all
    of them hold, decision.json against the decision its evidence gives (`k3lib.verdict.recompute`)."""
    result = _verify_files(run_dir, allowed_signers=allowed_signers)
    if not result.ok:
        return result
    store = RunStore.open(run_dir)
    problems = decision_problems(store, _decide_again(store))
    return dataclasses.replace(result, changed=tuple(problems)) if problems else result


def _verify_files(run_dir: str | Path, *, allowed_signers: str | Path | None = None) -> VerifyResult:
    store = RunStore.open(run_dir)
    changed = list(store.verify())
    notes: list[str] = []
    pdf_changed, notes = pdf_problems(store)  # the archived PDF against the sha256 report.json recorded
    changed += pdf_changed
    listed = set(store.manifest()["files"])
    counts: VerifyCounts = {"files_checked": len(listed), "manifest_path": str(store.root / MANIFEST)}
    sig_path, ssh_path = store.root / SIGNATURE, store.root / SSH_SIG
    unlisted = _unlisted(store, listed)
    if not sig_path.exists():
        if ssh_path.exists():
            changed.append(f"{SIGNATURE}: missing while {SSH_SIG} exists")
        if allowed_signers is not None:
            changed.append(f"{SIGNATURE}: missing; the run is not signed, nothing to check against "
                           f"{allowed_signers}")
        notes.append("not signed: file hashes checked against manifest.json only")
        notes += [f"{rel}: not in the manifest (a run still being written?)" for rel in unlisted]
        return VerifyResult(store.run_id, tuple(changed), tuple(notes), "not-signed", **counts)
    # Once signed, the manifest is closed: a file it does not list was added afterwards.
    changed += [f"{rel}: added after signing (not in the manifest)" for rel in unlisted]
    try:
        sig = json.loads(sig_path.read_text(encoding="utf-8"))
        expected = sig["manifest_sha256"]
        identity = sig.get("identity") or sig["reviewer"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        changed.append(f"{SIGNATURE}: unreadable ({type(exc).__name__}: {exc})")
        return VerifyResult(store.run_id, tuple(changed), tuple(notes), "unreadable", **counts)
    actual = store.manifest_sha256()
    if actual != expected:
        changed.append(f"{MANIFEST}: changed after signing (sha256 {actual[:12]}… ≠ signed "
                       f"{str(expected)[:12]}…)")
    decision = (store.read_json("decision.json") or {}).get("decision")
    if sig.get("decision") != decision:
        changed.append(f"{SIGNATURE}: records decision {sig.get('decision')!r} but decision.json holds {decision!r}")
    notes.append(f"signed by {sig.get('reviewer')} ({identity}) at {sig.get('signed_at')}, "
                 f"decision {sig.get('decision')}")
    if not ssh_path.exists():
        if allowed_signers is not None:
            changed.append(f"{SSH_SIG}: missing; signed without a key, so {allowed_signers} cannot vouch for it")
        notes.append("no SSH signature: the reviewer's name is recorded, not proven")
        return VerifyResult(store.run_id, tuple(changed), tuple(notes), "unsigned-key", **counts)
    manifest_bytes = (store.root / MANIFEST).read_bytes()
    if allowed_signers is not None:
        if not Path(allowed_signers).is_file():
            raise BadInputError("allowed-signers file not found", source=str(allowed_signers))
        mode = "allowed-signers"
        args = ["-Y", "verify", "-f", str(allowed_signers), "-I", identity, "-n", NAMESPACE, "-s", str(ssh_path)]
    else:
        mode = "check-novalidate"
        args = ["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(ssh_path)]
    proc = _run_ssh(args, manifest_bytes)
    said = _first_line(proc) if proc.returncode else (proc.stdout or proc.stderr).decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        changed.append(f"{SSH_SIG}: does not verify ({mode}): {said}")
    elif mode == "allowed-signers":
        notes.append(f"SSH signature verified for {identity!r} against {allowed_signers}: {said}")
    else:
        notes.append(f"SSH signature is intact but the signer is NOT authenticated (no --allowed-signers): {said}")
    return VerifyResult(store.run_id, tuple(changed), tuple(notes), mode, **counts)
