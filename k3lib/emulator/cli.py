"""The `k3 emulator` options and their translation into an EmulatorConfig (wired into the main CLI elsewhere)."""

from __future__ import annotations

import argparse
import os

from ..core.errors import BadInputError
from .config import EmulatorConfig
from .faults import FAULTS
from .profiles import PROFILES


def _port(text: str) -> int:
    """A TCP port, 0–65535, checked before anything binds (argparse turns the error into one line, exit 2)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port number 0-65535, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port number 0-65535, got {port}")
    return port


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _node(text: str) -> tuple[int, int]:
    node, sep, total = text.partition("/")
    if not sep or not node.strip().isdigit() or not total.strip().isdigit() or not 0 <= int(node) < int(total):
        raise argparse.ArgumentTypeError(f"expected N/M with 0 <= N < M (e.g. 1/2), got {text!r}")
    return int(node), int(total)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="port to bind; 0 picks a free one (default 0)")
    parser.add_argument("--profile", default="demo", choices=sorted(PROFILES),
                        help="deployment to impersonate (default demo)")
    parser.add_argument("--fault", action="append", default=[], metavar="NAME[=VALUE]",
                        help="inject a fault; repeatable. Known: " + ", ".join(sorted(FAULTS)))
    parser.add_argument("--vllm-version", default=None, help="vLLM version to report and imitate (default 0.33.0)")
    parser.add_argument("--time-scale", type=_positive, default=None,
                        help="multiply every modelled duration by this (e.g. 0.05 runs 20x faster)")
    parser.add_argument("--log-dir", default=None, help="also write the server log and collect_env report here")
    parser.add_argument("--node", default=None, metavar="N/M", type=_node,
                        help="serve node N of M of a multi-node profile: its share of the DP ranks, labelled by their "
                             "global rank (as vLLM's --data-parallel-start-rank)")
    parser.add_argument("--api-key-env", default=None, metavar="VAR",
                        help="require `Authorization: Bearer $VAR` on /v1/* (the key is read from that variable)")


def config_from_args(ns: argparse.Namespace) -> EmulatorConfig:
    overrides: dict = {"faults": tuple(ns.fault or ())}
    if ns.vllm_version:
        overrides["vllm_version"] = ns.vllm_version
    if ns.time_scale is not None:
        overrides["time_scale"] = ns.time_scale
    if ns.log_dir:
        overrides["log_dir"] = ns.log_dir
    if ns.api_key_env:
        key = os.environ.get(ns.api_key_env)
        if not key:
            raise BadInputError(f"environment variable {ns.api_key_env} is empty or unset", field="--api-key-env")
        overrides["api_key"] = key
    cfg = EmulatorConfig.from_profile(ns.profile, **overrides)
    if getattr(ns, "node", None):
        cfg = cfg.node_layout(*ns.node)
    return cfg
