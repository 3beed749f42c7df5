"""Operator commands named in parameters — `target.restart`, the rollback drill, a roll-forward — and how the kit runs
them: an argv list, a command line split like a shell (never run by one), or `http:METHOD:URL[:JSON]`. A foundation
module: the target, the capacity axis and the attestation all run commands through it, and it imports none of them.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
from typing import Any, Sequence

import httpx

from .errors import BadInputError

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@dataclasses.dataclass(frozen=True)
class HttpAction:
    """`http:METHOD:URL[:JSON]` — e.g. `http:POST:{base_url}/_emulator/restart:{"profile": "demo"}`."""

    method: str
    url: str
    body: Any = None

    def __str__(self) -> str:
        return f"{self.method} {self.url}" + (f" {json.dumps(self.body)}" if self.body is not None else "")


DrillCommand = HttpAction | tuple[str, ...]


def parse_drill_command(command: Sequence[str] | str, base_url: str = "") -> DrillCommand:
    """An argv list, an `http:METHOD:URL[:JSON]` string, or a command line split like a shell (never run by one).

    `{base_url}` anywhere is replaced by the URL the drill checks.
    """
    if isinstance(command, str):
        text = command.strip().replace("{base_url}", base_url.rstrip("/"))
        if text.lower().startswith("http:"):
            method, sep, rest = text[5:].partition(":")
            if not sep or method.upper() not in HTTP_METHODS:
                raise BadInputError(f"expected http:METHOD:URL[:JSON] with METHOD one of {', '.join(HTTP_METHODS)}, "
                                    f"got {command!r}", source="rollback drill")
            # The URL has colons of its own (scheme, port): the JSON body starts at the first ":{" or ":[".
            cut = min((i for i in (rest.find(":{"), rest.find(":[")) if i >= 0), default=-1)
            url, raw = (rest[:cut], rest[cut + 1:]) if cut >= 0 else (rest, "")
            if not url.startswith(("http://", "https://")):
                raise BadInputError(f"expected an http(s) URL after http:{method}:, got {url!r}",
                                    source="rollback drill")
            try:
                body = json.loads(raw) if raw else None
            except ValueError as exc:
                raise BadInputError(f"the body after the URL is not JSON ({exc})", source="rollback drill") from None
            return HttpAction(method.upper(), url, body)
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise BadInputError(f"cannot split the command: {exc}", source="rollback drill") from None
    else:
        argv = [str(a).replace("{base_url}", base_url.rstrip("/")) for a in command]
    if not argv:
        raise BadInputError("the rollback drill command is empty", source="rollback drill")
    return tuple(argv)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def run_command(cmd: DrillCommand, timeout_s: float, headers: dict[str, str]) -> tuple[bool, str]:
    if isinstance(cmd, HttpAction):
        try:
            resp = httpx.request(cmd.method, cmd.url, json=cmd.body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return resp.is_success, f"HTTP {resp.status_code} {_short(resp.text)}".strip()
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return False, f"command not found: {cmd[0]}"
    except subprocess.TimeoutExpired:
        return False, f"did not finish within {timeout_s:.0f} s"
    out = _short(proc.stdout or proc.stderr or "")
    return proc.returncode == 0, f"exit status {proc.returncode}" + (f": {out}" if out else "")


def run_operator_command(command: Sequence[str] | str, base_url: str, timeout_s: float,
                         headers: dict[str, str] | None = None) -> tuple[bool, str]:
    """Run an operator command given in parameters (argv, a command line, or `http:METHOD:URL[:JSON]`)."""
    return run_command(parse_drill_command(command, base_url.rstrip("/")), timeout_s, headers or {})
