"""`k3 init URL`: a commented parameters file for one target, written from what the server shows.

The server is asked what it can tell (a few GETs, no load): its kind and version (`/version`, `/metrics`), the served
models and their context limit (`/v1/models`), its cache configuration (`vllm:cache_config_info`), whether it asks
for a key, and whether a dcgm-exporter answers beside it (port 9400). Those values are filled in; what only the
operator can provide (collect_env, the server log, the image inspect, the host's nvidia-smi, the restart command,
the attestation, the rollback drill) is listed in the file, commented, with the command that produces it. The file
is checked as `k3 validate` would read it before it is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..batch.preflight import BUDGET_S, _Clock, _models, check_host, server_kind
from ..batch.shapes import ServedModelCard
from ..core.errors import BadInputError, K3Error
from ..core.guards import api_key, is_loopback_url
from ..core.params import _check_url, load_params
from ..io.metrics.parse import parse_exposition

PROBE_TIMEOUT_S = 5.0
DCGM_PORT = 9400


@dataclasses.dataclass
class Found:
    """What the server showed (None: it did not say)."""

    base_url: str
    kind: str = "an OpenAI-compatible server (engine unknown)"
    version: str | None = None
    models: list[ServedModelCard] = dataclasses.field(default_factory=list)
    cache: dict[str, str] = dataclasses.field(default_factory=dict)
    metrics: bool = False
    dcgm_url: str | None = None

    @property
    def model(self) -> ServedModelCard:
        return self.models[0] if self.models else ServedModelCard()

    @property
    def k3(self) -> bool:
        names = f"{self.model.get('id', '')} {self.model.get('root', '')}".lower()
        return "kimi-k3" in names or "kimi_k3" in names


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return client.get(url, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return None


def probe(base_url: str, headers: dict[str, str], key_env: str | None = None) -> Found:
    """Ask the server what it can tell. The checks `k3 validate`'s preflight makes of a target come first, with its
    lines: the host resolves, something answers, the key (if any) is accepted and `/v1/models` lists what is
    served. A server whose model list cannot be read is refused, one line saying what is missing: a file written
    without the served model would miss its recipe (a Kimi K3 read as generic)."""

    clock = _Clock(BUDGET_S)
    check_host(base_url, clock)
    found = Found(base_url)
    with httpx.Client(headers=headers) as client:
        cards, status = _models(client, base_url, clock, key_env)
        if status >= 500:
            raise BadInputError(f"{base_url}/v1/models answers {status}: the engine is not ready or dead, so the "
                                "served model (and with it the recipe) cannot be read; run `k3 init` again once it "
                                "serves", field="target.base_url")
        found.models = cards
        version = _get(client, f"{base_url}/version")
        metrics = _get(client, f"{base_url}/metrics")
        text = metrics.text if metrics is not None and metrics.status_code == 200 else ""
        found.kind = server_kind(version, [text] if text else [])
        vbody = _json(version) if version is not None and version.status_code == 200 else None
        found.version = str(vbody["version"]) if isinstance(vbody, dict) and vbody.get("version") else None
        found.metrics = "vllm:" in text
        found.cache = _cache_config(text, parse_exposition)
        host = urlsplit(base_url)
        dcgm = f"{host.scheme}://{host.hostname}:{DCGM_PORT}/metrics"
        resp = _get(client, dcgm)
        found.dcgm_url = dcgm if resp is not None and "DCGM_FI_DEV_FB_USED" in resp.text else None
    return found


def _json(resp: httpx.Response | None) -> Any:
    try:
        return resp.json() if resp is not None else None
    except ValueError:
        return None


def _cache_config(text: str, parse: Any) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels (block size, prefix caching, memory share), or {} when absent."""
    try:
        exposition = parse(text)
    except Exception:  # noqa: BLE001 - an exposition the parser refuses: the cache settings stay unknown
        return {}
    for sample in exposition.samples:
        if sample.name == "vllm:cache_config_info":
            return {str(k): str(v) for k, v in sample.labels.items()}
    return {}


# -- the file ------------------------------------------------------------------------------------------------------

def render(found: Found, api_key_env: str | None) -> str:
    """The parameters file, commented: what the server showed filled in, what it cannot show listed."""
    m = found.model
    limit = m.get("max_model_len") if isinstance(m.get("max_model_len"), int) else None
    remote = not is_loopback_url(found.base_url)
    lines = [f"# Parameters for {found.base_url}, written by `k3 init` from what the server showed: {found.kind}"
             + (f" {found.version}" if found.version else "") + f", serving {m.get('id', '?')}.",
             "# Check it with `k3 validate -p THIS_FILE --plan` (no load), then run `k3 validate -p THIS_FILE`.",
             "# Values marked TODO are the contract you accept the deployment under: the server cannot tell them.",
             "# The commented sources below are what a `production` needs and only the operator can provide;",
             "# each left out keeps its checklist item open (docs/first-run.md).",
             "extends: kimi-k3.yaml   # Kimi K3's recipe (found beside this file, else among the kit's profiles)"
             if found.k3 else "", "target:", f"  base_url: {found.base_url}",
             f"  model: {_quote(m.get('id'))}" + "                # from /v1/models"]
    if api_key_env:
        lines.append(f"  api_key_env: {api_key_env}   # the NAME of the variable holding the key, never its value")
    if remote:
        lines += ["  # this server is not on this machine: the agent, capacity and prefix-cache axes send it load;",
                  "  # set true once it may take that load (the preflight refuses it until then)",
                  "  allow_remote_load: false"]
    lines += _gpu_lines(found) + _restart_lines()
    lines += _recipe_lines(found) + _contract_lines(found, limit) + _source_lines()
    lines += ["run:", f"  label: {_quote(_label(found))}", ""]
    return "\n".join(line for line in lines if line != "") + "\n"


def _quote(value: Any) -> str:
    return json.dumps(str(value)) if value is not None else "null"


def _label(found: Found) -> str:
    host = urlsplit(found.base_url).hostname or "target"
    return f"{host}-acceptance".replace(".", "-")


def _gpu_lines(found: Found) -> list[str]:
    if found.dcgm_url:
        return ["  gpu_metrics:             # per-GPU memory curves (C09, C11): a dcgm-exporter answered beside it",
                "    source: dcgm", f"    url: {found.dcgm_url}"]
    return ["  # gpu_metrics:           # per-GPU memory curves (C09, C11): none answered on port 9400; one of",
            "  #   source: dcgm         # dcgm (url: the exporter's /metrics), prometheus (url, selector),",
            "  #   url: http://GPU-HOST:9400/metrics   # or nvml (the kit running on the GPU host)"]


def _restart_lines() -> list[str]:
    return ["  # restart: \"ssh GPU-HOST sudo systemctl restart vllm\"   # times the cold load (C08); argv, a command",
            "  # restart_timeout_s: 3600                               # line or http:METHOD:URL[:JSON]"]


def _recipe_lines(found: Found) -> list[str]:
    caching = found.cache.get("enable_prefix_caching")
    out = ["recipe:"]
    if not found.k3:
        out += ["  name: generic", "  # vllm_min: \"0.29.0\"      # the vLLM the deployment must run at least"
                + (f" (it runs {found.version})" if found.version else ""),
                "  required_flags: []        # e.g. [\"--enable-auto-tool-choice\", \"--tool-call-parser hermes\"]"]
        if caching is not None:
            out.append(f"  prefix_caching: {str(caching == 'True').lower()}    # vllm:cache_config_info "
                       f"enable_prefix_caching={caching}")
    out += ["  build: official           # or custom: two products, two sheets",
            "  # image: vllm/vllm-openai:vX.Y.Z            # the image and digest the sheet is signed for (C01)",
            "  # image_digest: sha256:..."]
    return out


def _contract_lines(found: Found, limit: int | None) -> list[str]:
    out = ["contract:"]
    if limit:
        out.append(f"  max_context_tokens: {limit}   # the server's max_model_len (/v1/models): lower it to what "
                   "clients send")
    else:
        out.append("  max_context_tokens: 4096    # TODO: the context clients send (the server did not say)")
    out += ["  planned_concurrency: 4      # TODO: concurrent requests planned (at most the server's --max-num-seqs)",
            "  max_output_tokens: 16384    # TODO: the longest answer clients ask for (K3 reasons first: room for both)",
            "  typical_output_tokens: 1024 # TODO: a typical answer, what the load phases ask (at most the longest)"]
    if found.cache.get("block_size"):
        out.append(f"  # the KV cache: block_size {found.cache['block_size']}"
                   + (f", gpu_memory_utilization {found.cache['gpu_memory_utilization']}"
                      if found.cache.get("gpu_memory_utilization") else "") + " (vllm:cache_config_info)")
    return out


def _source_lines() -> list[str]:
    """What only the operator can provide, commented: uncomment a block and fill it in."""
    return ["# axes:",
            "#   environment:",
            "#     collect_env: collect_env.txt      # `docker exec CONTAINER vllm collect-env > collect_env.txt` (C02)",
            "#     server_log: server.log            # the server's log from its start: `docker logs CONTAINER` (C05)",
            "#     image_inspect: inspect.json       # `docker container inspect CONTAINER > inspect.json` (C01)",
            "#     nvidia_smi: nvidia-smi.txt        # on the host: `nvidia-smi -q > nvidia-smi.txt` (C03, C04)",
            "#   operations:",
            "#     attestation: attestation.yaml     # who briefed the on-call team (C15), see "
            "parameters/attestation.example.yaml",
            "#     rollback_drill: \"kubectl rollout undo deployment/vllm\"   # the restore, rehearsed by the kit (C16)",
            "#     rollback_to: \"0.28.1\"             # the release the drill must bring back",
            "#     roll_forward: \"kubectl rollout undo deployment/vllm\"     # back to the accepted release"]


def cmd_init(ns: argparse.Namespace) -> int:
    """`k3 init URL [--out FILE] [--api-key-env VAR] [--force]`: write the file, say what was filled and what not."""

    url = ns.url.strip().rstrip("/")
    try:
        _check_url(url)  # the same check, and line, as `target.base_url` in a parameters file
    except ValueError as exc:
        raise BadInputError(str(exc), source="k3 init", field="target.base_url") from None
    if urlsplit(url).path.endswith("/v1"):
        url = url[: -len("/v1")]
        print(f"init: {ns.url} ends in /v1: the file names the server root {url} (the kit adds /v1 itself)",
              file=sys.stderr)
    key = api_key(ns.api_key_env, source="--api-key-env")
    found = probe(url, {"Authorization": f"Bearer {key}"} if key else {}, ns.api_key_env if key else None)
    out = Path(ns.out or f"{_label(found)}.yaml")
    if out.exists() and not ns.force:
        raise BadInputError("exists; choose another --out or pass --force to replace it", source=str(out))
    text = render(found, ns.api_key_env)
    out.write_text(text, encoding="utf-8")
    try:
        load_params([out])
    except BadInputError as exc:  # the kit wrote something it cannot read: its own bug, said as such
        raise K3Error(f"k3 init wrote {out} but it does not validate: {exc.one_line()}") from None
    print(f"wrote {out}: {found.kind}{' ' + found.version if found.version else ''}, model "
          f"{found.model.get('id')}, context {found.model.get('max_model_len', '?')}"
          + (", dcgm-exporter found" if found.dcgm_url else ""))
    print("to provide for production (commented in the file): collect_env, server_log, image_inspect, nvidia_smi, "
          "restart, attestation, rollback_drill" + ("" if found.dcgm_url else ", gpu_metrics")
          + "; to decide: contract.planned_concurrency, contract.max_output_tokens, contract.typical_output_tokens")
    print(f"next: k3 validate -p {out} --plan")
    return 0
