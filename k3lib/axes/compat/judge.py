"""The compatibility chain's rules: host (driver, GPUs, fabric manager), container (CUDA build, image, build method)
and engine (vLLM version, flags, startup), each compared with the recipe and turned into one Finding that names
the sources it used. Pure functions over `CompatSources`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable

from packaging.version import InvalidVersion, Version

from ...core.outcomes import rule_for
from ...core.evidence import Finding, FindingStatus
from ...core.params import EnvironmentParams, RecipeParams
from ...io.readers._text import numbered_lines
from .startup import startup_lines
from .run import CompatSources

OFFICIAL_REPOS = ("vllm/vllm-openai",)  # Docker Hub's official vLLM server image (any registry mirror)
# HGX boards whose 8 GPUs talk through NVSwitch: the fabric manager must be up before CUDA can use them.
_NVSWITCH_GPU_RE = re.compile(r"\b(?:A100-SXM|A800-SXM|H100|H800|H200|H20|B200|B300|GB200|GB300)\b", re.IGNORECASE)
_NOT_NVSWITCH_RE = re.compile(r"PCIe|\bNVL\b", re.IGNORECASE)
_CU_TAG_RE = re.compile(r"(?<![A-Za-z0-9])cu(?P<digits>\d{2,3})(?![0-9])", re.IGNORECASE)
_TAG_VERSION_RE = re.compile(r"^v?(?P<v>\d+\.\d+(?:\.\d+)*(?:(?:rc|post|\.post|\.dev|a|b)\d+)*)")


@dataclasses.dataclass(frozen=True)
class RuleSpec:
    """A rule's place in the seed's evidence table and what a mismatch decides."""

    rule: str
    item: str
    level: str  # host | container | engine
    on_mismatch: str

    @property
    def decision(self) -> str:
        """What a failing finding of this rule decides: read from the one table (k3lib.verdict.decision.RULES)."""
        return rule_for(self.rule).level.value


RULES = {r.rule: r for r in (
    RuleSpec("compat.image", "Image and tag", "container",
             "do not mix this result with another image's: validate the image the sheet names"),
    RuleSpec("compat.vllm_version", "vLLM version", "engine",
             "go back to the official recipe if the version is out of range"),
    RuleSpec("compat.vllm_sources", "vLLM version", "engine",
             "the proofs come from different builds: collect them again from the running container"),
    RuleSpec("compat.cuda_build", "CUDA build", "container",
             "rebuild the image for the recipe's CUDA, or document an independent (experimental) build"),
    RuleSpec("compat.driver_branch", "Host driver", "host", "upgrade the host driver before any functional test"),
    RuleSpec("compat.host_container", "Host vs container", "host",
             "collect the host's nvidia-smi and the container's collect_env from the same node, same moment"),
    RuleSpec("compat.gpus_visible", "GPU visibility", "host",
             "fix the container runtime (devices, NVIDIA_VISIBLE_DEVICES) before measuring performance"),
    RuleSpec("compat.fabric_manager", "Fabric manager", "host",
             "start nvidia-fabricmanager (same branch as the driver) before any test"),
    RuleSpec("compat.build_method", "Build method", "container",
             "keep this result apart from the official image's acceptance (its own sheet and rollback)"),
    RuleSpec("compat.flags", "Server flags", "engine", "restart the server with the recipe's flags"),
    RuleSpec("compat.prefix_caching", "Server flags", "engine", "restart the server without --no-enable-prefix-caching"),
    RuleSpec("compat.startup", "Startup", "engine", "the engine never became ready: fix the topology or the image"),
    RuleSpec("compat.source", "Sources", "—", "provide the artifact again: the file given is not what it claims to be"),
)}
ROW_ORDER = ("Image and tag", "vLLM version", "CUDA build", "Host driver", "GPU visibility", "Build method",
             "Host vs container", "Server flags", "Fabric manager", "Startup", "Sources")


# ---------------------------------------------------------------------------------------------------------------
# Values


def parse_version(text: str | None) -> Version | None:
    """PEP 440 reading of what vLLM prints (`0.6.3.post2.dev174+g5b8a1fde`, `0.7.2+cpu`, `v0.33.0`); None if not one."""
    if not text:
        return None
    try:
        return Version(text.strip().lstrip("vV"))
    except InvalidVersion:
        return None


def in_range(version: Version, low: str | None, high: str | None) -> bool:
    """low ≤ version < high, on the public version (a `+cu129` local tag says nothing about the release)."""
    public = Version(version.public)
    if low and public < Version(low):
        return False
    return not (high and public >= Version(high))


def cuda_major_of_tag(text: str | None) -> int | None:
    """`+cu130` → 13, `cu129` → 12, `cu118` → 11: PyTorch's and vLLM's wheel tags keep the minor as the last digit."""
    m = _CU_TAG_RE.search(text or "")
    return int(m.group("digits")[:-1]) if m else None


def cuda_major(text: str | None) -> int | None:
    m = re.match(r"\s*(\d{1,3})\.", text or "")
    return int(m.group(1)) if m else None


def driver_branch_ok(branch: int, recipe: RecipeParams) -> bool:
    if branch in recipe.driver_branches_compatible:
        return True
    return recipe.driver_branch_min is None or branch >= recipe.driver_branch_min


def expected_driver(recipe: RecipeParams) -> str | None:
    parts = []
    if recipe.driver_branch_min is not None:
        parts.append(f"branch R{recipe.driver_branch_min} or newer")
    if recipe.driver_branches_compatible:
        parts.append("or R" + "/R".join(str(b) for b in recipe.driver_branches_compatible))
    return " ".join(parts) or None


def expected_version(recipe: RecipeParams) -> str | None:
    if recipe.vllm_min and recipe.vllm_max:
        return f">= {recipe.vllm_min}, < {recipe.vllm_max}"
    if recipe.vllm_min:
        return f">= {recipe.vllm_min}"
    if recipe.vllm_max:
        return f"< {recipe.vllm_max}"
    return None


def parse_flag(flag: str) -> tuple[str, Any]:
    """`--tool-call-parser kimi_k3` → ("tool_call_parser", "kimi_k3"); `--enable-x` → ("enable_x", True);
    `--no-enable-x` → ("enable_x", False), the BooleanOptionalAction spelling vLLM uses."""
    head, _, value = flag.strip().partition("=") if "=" in flag.split()[0] else flag.strip().partition(" ")
    name = head.strip().lstrip("-").replace("-", "_")
    value = value.strip().strip("'\"")
    if not value:
        if name.startswith("no_"):
            return name[3:], False
        return name, True
    return name, value


def _same(observed: Any, expected: Any) -> bool:
    if isinstance(expected, bool):
        return observed is expected or str(observed).lower() == str(expected).lower()
    if isinstance(observed, (list, tuple)):
        return any(str(o) == str(expected) for o in observed)
    return str(observed) == str(expected)


@dataclasses.dataclass(frozen=True)
class Proof:
    """One observation: which source said what, where in it, and the kept copy."""

    source: str
    value: Any
    where: str | None = None
    attachment: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def __str__(self) -> str:
        return f"{self.source}: {self.value}"


def line_of(text: str | None, pattern: str) -> str | None:
    """`line N: <the line>` of the first line matching the regex, for a reviewer to find the proof."""
    if not text:
        return None
    rx = re.compile(pattern, re.IGNORECASE)
    for number, line in numbered_lines(text):
        if m := rx.search(line):
            if len(line) > 240:  # a long config line: keep the part around the match
                start = max(m.start() - 100, 0)
                line = ("…" if start else "") + line[start:m.end() + 100] + ("…" if m.end() + 100 < len(line) else "")
            return f"line {number}: {line.strip()}"
    return None


def _finding(rule: str, status: FindingStatus, message: str, proofs: Iterable[Proof] = (), *, observed: Any = None,
             expected: Any = None, **extra: Any) -> Finding:
    spec = RULES[rule]
    evidence = {"item": spec.item, "level": spec.level, "on_mismatch": spec.on_mismatch,
                "proofs": [p.to_dict() for p in proofs], **extra}
    return Finding(rule=rule, status=status, message=message, observed=observed, expected=expected,
                   evidence=evidence)


def _missing(s: CompatSources, *names: str) -> str:
    """Why each named source is not there, for a not-observable message."""
    out = []
    for name in names:
        src = s.texts.get(name)
        if name in s.read_errors:
            out.append(f"{name}: unreadable ({s.read_errors[name]})")
        elif src is None or src.location is None:
            out.append(f"{name}: not configured")
        elif src.error:
            out.append(f"{name}: {src.error}")
    return "; ".join(out) or "no source"


# ---------------------------------------------------------------------------------------------------------------
# Observations shared by several rules


def version_proofs(s: CompatSources) -> list[Proof]:
    """Every source naming the vLLM version, the running server's own answer first."""
    out = []
    if s.api_version:
        out.append(Proof("/version", s.api_version, f'{{"version": "{s.api_version}"}}', s.attachment("version")))
    if s.fingerprint_version:
        out.append(Proof("system_fingerprint", s.fingerprint_version, s.fingerprint, s.attachment("chat")))
    if s.log is not None and s.log.vllm_version:
        where = line_of(s.texts["server_log"].text, r"version\s+" + re.escape(s.log.vllm_version))
        out.append(Proof("server_log", s.log.vllm_version, where, s.attachment("server_log")))
    if s.collect_env is not None and s.collect_env.vllm_version:
        where = line_of(s.texts["collect_env"].text, r"vLLM Version\s*:")
        out.append(Proof("collect_env", s.collect_env.vllm_version, where, s.attachment("collect_env")))
    return out


def engine_args(s: CompatSources) -> dict[str, Any] | None:
    """The server's arguments as the log printed them: `non-default args` (V1), else V0's full Namespace."""
    if s.log is None:
        return None
    if isinstance(s.log.non_default_args, dict):
        return s.log.non_default_args
    return s.log.namespace_args


def _args_where(s: CompatSources) -> str | None:
    return line_of(s.texts["server_log"].text, r"non-default args|args: Namespace\(") if s.log else None


def gpus_required(s: CompatSources, env: EnvironmentParams) -> tuple[int | None, str]:
    """GPUs one node must see: the parameter, else TP × PP × DP (local) from the log's args."""
    if env.gpus_required:
        return env.gpus_required, "axes.environment.gpus_required"
    args = engine_args(s)
    if args is None:
        return None, "unknown (no server log, no axes.environment.gpus_required)"

    def size(key: str) -> int:
        try:
            return max(int(args.get(key) or 1), 1)
        except (TypeError, ValueError):
            return 1

    tp, pp, dp = size("tensor_parallel_size"), size("pipeline_parallel_size"), size("data_parallel_size")
    if "data_parallel_size_local" in args:
        dp_local = size("data_parallel_size_local")
        return tp * pp * dp_local, f"TP {tp} × PP {pp} × DP local {dp_local} (server log args)"
    nnodes = size("nnodes")
    total = tp * pp * dp
    if nnodes > 1:
        return max(total // nnodes, 1), f"TP {tp} × PP {pp} × DP {dp} over {nnodes} nodes (server log args)"
    return total, f"TP {tp} × PP {pp} × DP {dp} (server log args)"


def gpu_count_proofs(s: CompatSources) -> list[Proof]:
    out = []
    ce = s.collect_env
    if ce is not None and ce.gpu_count is not None:
        out.append(Proof("collect_env (container)", ce.gpu_count,
                         line_of(s.texts["collect_env"].text, r"GPU models and configuration|^\s*GPU\s?\d+\s*:"),
                         s.attachment("collect_env")))
    if s.nvidia_smi is not None and (s.nvidia_smi.gpus or s.nvidia_smi.error):
        out.append(Proof("nvidia_smi (host)", s.nvidia_smi.gpu_count, s.nvidia_smi.error, s.attachment("nvidia_smi")))
    if s.nvml is not None and s.nvml.available and s.nvml.gpu_count is not None:
        out.append(Proof("nvml (local)", s.nvml.gpu_count, None, s.attachment("nvml")))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Host level


def cpu_build_without_gpu_need(s: CompatSources, recipe: RecipeParams | None) -> str | None:
    """Why GPU requirements do not apply here, or None: collect_env shows a CPU build and the recipe asks for no
    CUDA version. (A recipe that does require CUDA keeps them: a CPU build is then an environment rebuild.)"""
    ce = s.collect_env
    if recipe is None or recipe.cuda_major is not None or ce is None or ce.platform != "cpu":
        return None
    return (f"a CPU build (collect_env: platform cpu, PyTorch {ce.torch_version or 'version unknown'}) and the "
            "recipe requires no CUDA version")


def _cpu_proof(s: CompatSources) -> list[Proof]:
    return [Proof("collect_env", "cpu", line_of(s.texts["collect_env"].text, r"PyTorch version\s*:"),
                  s.attachment("collect_env"))]


def _branch(version: Any) -> int | None:
    m = re.match(r"\s*(\d{2,4})\.", str(version))
    return int(m.group(1)) if m else None


def check_driver(s: CompatSources, recipe: RecipeParams) -> Finding:
    proofs = []
    if s.nvidia_smi is not None and s.nvidia_smi.driver_version:
        proofs.append(Proof("nvidia_smi (host)", s.nvidia_smi.driver_version,
                            line_of(s.texts["nvidia_smi"].text, r"Driver Version|NVIDIA-SMI \d"), s.attachment("nvidia_smi")))
    if s.nvml is not None and s.nvml.available and s.nvml.driver_version:
        proofs.append(Proof("nvml (local)", s.nvml.driver_version, None, s.attachment("nvml")))
    if s.collect_env is not None and s.collect_env.driver_version:
        proofs.append(Proof("collect_env (container)", s.collect_env.driver_version,
                            line_of(s.texts["collect_env"].text, r"driver version\s*:"), s.attachment("collect_env")))
    expected = expected_driver(recipe)
    if not proofs and expected is None and (why := cpu_build_without_gpu_need(s, recipe)):
        return _finding("compat.driver_branch", "info", f"no GPU driver needed: {why}", _cpu_proof(s))
    if not proofs:
        return _finding("compat.driver_branch", "not-observable",
                        "host driver version not observable: " + _missing(s, "nvidia_smi", "collect_env", "nvml"),
                        expected=expected)
    branches = {b for p in proofs if (b := _branch(p.value)) is not None}
    if not branches:
        return _finding("compat.driver_branch", "warn", f"driver version {proofs[0].value!r} has no readable branch",
                        proofs, observed=proofs[0].value, expected=expected)
    observed = proofs[0].value
    if len({p.value for p in proofs}) > 1:
        said = ", ".join(f"{p.source} says {p.value}" for p in proofs)
        status: FindingStatus = ("fail" if len(branches) > 1 or not all(driver_branch_ok(b, recipe) for b in branches)
                                 else "warn")
        return _finding("compat.driver_branch", status,
                        f"driver sources disagree: {said} — they were not taken on the same host or at the same time",
                        proofs, observed={p.source: p.value for p in proofs}, expected=expected)
    branch = next(iter(branches))
    if expected is None:
        return _finding("compat.driver_branch", "info", f"host driver {observed} (R{branch}); the recipe sets no branch",
                        proofs, observed=observed)
    if driver_branch_ok(branch, recipe):
        return _finding("compat.driver_branch", "pass", f"host driver {observed} is R{branch}, {expected}",
                        proofs, observed=observed, expected=expected)
    return _finding("compat.driver_branch", "fail",
                    f"host driver {observed} is R{branch}, below the recipe's {expected}"
                    + (f" (a CUDA {recipe.cuda_major} build needs it)" if recipe.cuda_major else ""),
                    proofs, observed=observed, expected=expected)


def check_host_container(s: CompatSources) -> Finding:
    """C04: what the host says (nvidia-smi or NVML, taken on the host) against what the container reports
    (collect_env): the kernel driver both see, the GPUs, and whether the driver can run the container's CUDA build.
    Without a host-side source nothing was compared: open, never a pass."""
    host: list[tuple[str, Any, Any, Any]] = []  # (source, driver, can-run CUDA, GPU count)
    if s.nvidia_smi is not None and (s.nvidia_smi.driver_version or s.nvidia_smi.gpus):
        host.append(("nvidia_smi (host)", s.nvidia_smi.driver_version, s.nvidia_smi.cuda_version,
                     s.nvidia_smi.gpu_count or None))
    if s.nvml is not None and s.nvml.available and s.nvml.driver_version:
        host.append(("nvml (host)", s.nvml.driver_version, s.nvml.cuda_driver_version, None))
    ce = s.collect_env
    if not host:
        return _finding("compat.host_container", "not-observable",
                        "nothing compared: no host-side source (set axes.environment.nvidia_smi to the host's "
                        "nvidia-smi output, or run the kit on the host with target.gpu_metrics.source nvml) — "
                        + _missing(s, "nvidia_smi", "nvml"))
    if ce is None:
        return _finding("compat.host_container", "not-observable",
                        "nothing compared: no container-side report (set axes.environment.collect_env) — "
                        + _missing(s, "collect_env"))
    name, driver, can_run, gpus = host[0]
    proofs = [Proof(src, {"driver": d, "driver can run CUDA": c, "GPUs": g}, None,
                    s.attachment("nvidia_smi" if src.startswith("nvidia_smi") else "nvml")) for src, d, c, g in host]
    proofs.append(Proof("collect_env (container)", {"driver": ce.driver_version, "CUDA build": ce.torch_cuda_build,
                                                    "GPUs": ce.gpu_count},
                        line_of(s.texts["collect_env"].text, r"driver version\s*:"), s.attachment("collect_env")))
    compared: list[str] = []
    problems: list[str] = []
    if driver and ce.driver_version:
        compared.append(f"driver {driver} = {ce.driver_version}" if driver == ce.driver_version else "driver")
        if driver != ce.driver_version:
            problems.append(f"the host's driver is {driver} ({name}) but the container sees {ce.driver_version}")
    build = cuda_major(ce.torch_cuda_build) if ce.torch_cuda_build else None
    if can_run and build is not None:
        runs = cuda_major(can_run)
        compared.append(f"host driver runs CUDA {can_run} ≥ container build CUDA {ce.torch_cuda_build}")
        if runs is not None and runs < build:
            problems.append(f"the container is a CUDA {ce.torch_cuda_build} build but the host driver runs only CUDA "
                            f"{can_run}")
    if gpus and ce.gpu_count:
        compared.append(f"{gpus} GPU(s) on the host, {ce.gpu_count} visible in the container")
        if ce.gpu_count > gpus:
            problems.append(f"the container reports {ce.gpu_count} GPUs, the host shows {gpus}")
    observed = {"host": {"source": name, "driver": driver, "driver_can_run_cuda": can_run, "gpus": gpus},
                "container": {"driver": ce.driver_version, "cuda_build": ce.torch_cuda_build, "gpus": ce.gpu_count}}
    if problems:
        return _finding("compat.host_container", "fail", "host and container disagree: " + "; ".join(problems),
                        proofs, observed=observed, expected="the same driver, a CUDA the driver can run")
    if not compared:
        return _finding("compat.host_container", "not-observable",
                        f"{name} and collect_env share no figure to compare (driver, CUDA, GPUs)", proofs,
                        observed=observed)
    return _finding("compat.host_container", "pass", f"host ({name}) and container (collect_env) agree: "
                    + "; ".join(compared), proofs, observed=observed,
                    expected="the same driver, a CUDA the driver can run")


def check_gpus(s: CompatSources, env: EnvironmentParams, recipe: RecipeParams | None = None) -> Finding:
    required, basis = gpus_required(s, env)
    proofs = gpu_count_proofs(s)
    ce = s.collect_env
    if not env.gpus_required and (why := cpu_build_without_gpu_need(s, recipe)):
        # TP × PP × DP counts engine processes; on a CPU build none of them is a GPU
        return _finding("compat.gpus_visible", "info", f"no GPU needed: {why} ({basis} are CPU processes)",
                        _cpu_proof(s), observed=0)
    expected = f">= {required} ({basis})" if required else None
    if ce is not None and ce.cuda_available is False:
        return _finding("compat.gpus_visible", "fail",
                        "the container sees no CUDA device (collect_env: Is CUDA available: False)",
                        proofs, observed=0, expected=expected)
    if s.nvidia_smi is not None and s.nvidia_smi.error:
        return _finding("compat.gpus_visible", "fail", f"nvidia-smi failed on the host: {s.nvidia_smi.error}",
                        proofs, observed=0, expected=expected)
    if not proofs:
        return _finding("compat.gpus_visible", "not-observable",
                        "GPU visibility not observable: " + _missing(s, "collect_env", "nvidia_smi", "nvml"),
                        expected=expected)
    # the container's own view is the one that matters: a host may show 8 GPUs while the pod gets 4
    visible = proofs[0].value
    observed = {p.source: p.value for p in proofs}
    counts = ", ".join(f"{p.source} {p.value}" for p in proofs)
    if required is None:
        return _finding("compat.gpus_visible", "not-observable",
                        f"{counts} GPU(s) visible, but how many the topology needs is unknown: set "
                        "axes.environment.gpus_required or provide the server log", proofs, observed=observed)
    if visible < required:
        return _finding("compat.gpus_visible", "fail",
                        f"{visible} GPU(s) visible ({counts}) but the topology needs {required} ({basis})",
                        proofs, observed=observed, expected=expected)
    return _finding("compat.gpus_visible", "pass", f"{counts} GPU(s) visible; the topology needs {required} ({basis})",
                    proofs, observed=observed, expected=expected)


def nvswitch_system(s: CompatSources, env: EnvironmentParams) -> tuple[bool, str]:
    """Whether the host has NVSwitch: the parameter, else an 8-GPU HGX board by GPU model."""
    if env.nvswitch is not None:
        return env.nvswitch, "axes.environment.nvswitch"
    if s.nvidia_smi is not None and any(g.fabric_state for g in s.nvidia_smi.gpus):
        return True, "nvidia-smi -q reports a fabric state"
    names: list[str] = []
    if s.nvidia_smi is not None:
        names = [n for n in s.nvidia_smi.gpu_names if n]
    if not names and s.collect_env is not None:
        names = list(s.collect_env.gpus)
    count = max([len(names)] + [p.value for p in gpu_count_proofs(s) if isinstance(p.value, int)])
    hgx = bool(names) and all(_NVSWITCH_GPU_RE.search(n) and not _NOT_NVSWITCH_RE.search(n) for n in names)
    if hgx and count >= 8:
        return True, f"{count} × {names[0]} (an HGX board: GPUs talk through NVSwitch)"
    what = f"{count} × {names[0]}" if names else "GPU model unknown"
    return False, f"{what}: not an NVSwitch board"


def check_fabric(s: CompatSources, env: EnvironmentParams) -> Finding:
    needed, basis = nvswitch_system(s, env)
    if not needed:
        return _finding("compat.fabric_manager", "info", f"fabric manager not needed ({basis})", observed=basis)
    smi = s.nvidia_smi
    states = [(g.index, g.fabric_state, g.fabric_status) for g in smi.gpus] if smi else []
    if not smi or smi.layout != "query" or not any(st for _, st, _ in states):
        return _finding("compat.fabric_manager", "not-observable",
                        f"NVSwitch system ({basis}) but the fabric state is not observable: attach `nvidia-smi -q` "
                        "from the host as axes.environment.nvidia_smi", expected="State Completed, Status Success")
    proof = Proof("nvidia_smi -q (host)", {i: f"{st}/{su}" for i, st, su in states},
                  line_of(s.texts["nvidia_smi"].text, r"^\s*Fabric\s*$"), s.attachment("nvidia_smi"))
    bad = [(i, st, su) for i, st, su in states if st != "Completed" or (su and su != "Success")]
    if bad:
        listed = ", ".join(f"GPU {i}: {st or 'N/A'}/{su or 'N/A'}" for i, st, su in bad)
        return _finding("compat.fabric_manager", "fail",
                        f"fabric manager not up on an NVSwitch system ({listed}): CUDA cannot use these GPUs together",
                        [proof], observed=proof.value, expected="State Completed, Status Success")
    return _finding("compat.fabric_manager", "pass",
                    f"fabric Completed/Success on all {len(states)} GPUs ({basis})", [proof],
                    observed=proof.value, expected="State Completed, Status Success")


# ---------------------------------------------------------------------------------------------------------------
# Container level


def check_cuda_build(s: CompatSources, recipe: RecipeParams) -> Finding:
    ce = s.collect_env
    want = recipe.cuda_major
    expected = f"CUDA {want}.x build" if want else None
    driver_cuda = (s.nvidia_smi.cuda_version if s.nvidia_smi else None) or \
        (s.nvml.cuda_driver_version if s.nvml and s.nvml.available else None)
    if ce is None:
        why = _missing(s, "collect_env")
        if driver_cuda:
            return _finding("compat.cuda_build", "not-observable",
                            f"the only CUDA figure is the driver's 'CUDA Version: {driver_cuda}', which says what the "
                            "driver can run, not what the image was built with; attach the container's collect_env "
                            f"report ({why})", observed={"driver can run": driver_cuda}, expected=expected)
        return _finding("compat.cuda_build", "not-observable", f"the build's CUDA is not observable ({why})",
                        expected=expected)
    text = s.texts["collect_env"].text
    att = s.attachment("collect_env")
    if ce.platform != "cuda":
        detail = ce.rocm_build and f"ROCm {ce.rocm_build}" or ce.torch_version or ce.platform
        if want is None:
            return _finding("compat.cuda_build", "info",
                            f"not a CUDA build: platform {ce.platform} ({detail}); the recipe requires no CUDA "
                            "version, so none is checked",
                            [Proof("collect_env", ce.platform, line_of(text, r"PyTorch version\s*:"), att)],
                            observed=ce.platform)
        return _finding("compat.cuda_build", "fail", f"not a CUDA build: platform {ce.platform} ({detail})",
                        [Proof("collect_env", ce.platform, line_of(text, r"PyTorch version\s*:"), att)],
                        observed=ce.platform, expected=expected)
    proofs: list[Proof] = []
    majors: dict[str, int] = {}
    if ce.torch_cuda_build:
        proofs.append(Proof("collect_env: CUDA used to build PyTorch", ce.torch_cuda_build,
                            line_of(text, r"CUDA used to build PyTorch"), att))
        if (m := cuda_major(ce.torch_cuda_build)) is not None:
            majors["torch build"] = m
    if (m := cuda_major_of_tag(ce.torch_version)) is not None:
        proofs.append(Proof("collect_env: torch wheel tag", ce.torch_version, line_of(text, r"PyTorch version"), att))
        majors.setdefault("torch build", m)
    for major in ce.cuda_library_majors:
        wheels = [p.name for p in ce.cuda_library_packages if p.name.lower().endswith(f"cu{major}")]
        proofs.append(Proof(f"collect_env: nvidia-*-cu{major} wheels", ", ".join(wheels[:4]) + ("…" if len(wheels) > 4 else ""),
                            line_of(text, re.escape(wheels[0])) if wheels else None, att))
    if (m := cuda_major_of_tag(ce.vllm_version)) is not None:
        majors["vLLM wheel tag"] = m
    if s.image and s.image.reference and (m := cuda_major_of_tag(s.image.reference.rpartition(":")[2])) is not None:
        majors["image tag"] = m
        proofs.append(Proof(f"image ({s.image.source})", s.image.reference, None, s.attachment("image_inspect")))
    libs = set(ce.cuda_library_majors)
    build = majors.get("torch build") or (min(libs) if len(libs) == 1 else None)
    observed = {**{k: v for k, v in majors.items()}, "nvidia-*-cuNN wheels": sorted(libs) or None,
                "driver can run": driver_cuda}
    if build is None:
        return _finding("compat.cuda_build", "not-observable",
                        "the collect_env report names no CUDA build (no 'CUDA used to build PyTorch', no cuNN wheels)"
                        + (f"; nvidia-smi's CUDA {driver_cuda} is only what the driver can run" if driver_cuda else ""),
                        proofs, observed=observed, expected=expected)
    disagree: dict[str, Any] = {k: v for k, v in majors.items() if v != build}
    if libs and build not in libs:
        disagree["nvidia-*-cuNN wheels"] = "/".join(map(str, sorted(libs)))
    story = ""
    host_branch = s.nvidia_smi.driver_branch if s.nvidia_smi else (ce.driver_branch or None)
    if driver_cuda and host_branch:
        story = f"; the host driver R{host_branch} can run CUDA {driver_cuda}"
    if disagree:
        said = ", ".join(f"{k} says CUDA {v}" for k, v in disagree.items())
        return _finding("compat.cuda_build", "fail",
                        f"the container's CUDA sources disagree: torch was built for CUDA {build}, but {said}{story}",
                        proofs, observed=observed, expected=expected)
    if driver_cuda and (dm := cuda_major(driver_cuda)) is not None and dm < build:
        return _finding("compat.cuda_build", "fail",
                        f"the image is a CUDA {build} build but the host driver can run only CUDA {driver_cuda}",
                        proofs, observed=observed, expected=expected)
    if want is None:
        return _finding("compat.cuda_build", "info", f"CUDA {build} build{story}; the recipe sets no CUDA major",
                        proofs, observed=observed)
    if build != want:
        return _finding("compat.cuda_build", "fail",
                        f"the container is a CUDA {ce.torch_cuda_build or build} build, the recipe needs CUDA {want}"
                        f"{story} — host and container tell different stories",
                        proofs, observed=observed, expected=expected)
    mixed = sorted(libs - {build})
    if mixed:
        return _finding("compat.cuda_build", "warn",
                        f"CUDA {build} build, but the image also carries nvidia-*-cu{'/cu'.join(map(str, mixed))} "
                        "wheels (a dependency pulled another CUDA's libraries)", proofs, observed=observed,
                        expected=expected)
    return _finding("compat.cuda_build", "pass", f"CUDA {ce.torch_cuda_build or build} build{story}",
                    proofs, observed=observed, expected=expected)


def _repo_and_tag(reference: str) -> tuple[str, str | None]:
    ref = reference.split("@", 1)[0]
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # "host:5000/repo" has a port, not a tag
        return ref, None
    return repo, tag


def _official_repo(repo: str) -> bool:
    path = repo.split("/", 1)[1] if "." in repo.split("/", 1)[0] or ":" in repo.split("/", 1)[0] else repo
    return any(path == r or path.endswith("/" + r) for r in OFFICIAL_REPOS)


def check_image(s: CompatSources, recipe: RecipeParams) -> Finding:
    img = s.image
    expected = recipe.image or None
    if img is None or not img.reference:
        why = _missing(s, "image_inspect")
        return _finding("compat.image", "not-observable",
                        "the image is not identified: set axes.environment.image_inspect (docker/crictl inspect JSON) "
                        f"or recipe.image and recipe.image_digest ({why})", expected=expected)
    proofs = [Proof(f"image ({img.source})", img.reference, img.digest, s.attachment("image_inspect"))]
    observed = {"image": img.reference, "digest": img.digest, "created": img.created}
    problems = []
    if recipe.image and img.source == "image_inspect" and _norm_ref(recipe.image) != _norm_ref(img.reference):
        problems.append(f"the container runs {img.reference} but the sheet is for {recipe.image}")
    if recipe.image_digest and img.digest and recipe.image_digest != img.digest:
        problems.append(f"digest {img.digest[:19]}… is not the signed {recipe.image_digest[:19]}…")
    repo, tag = _repo_and_tag(img.reference)
    if tag:
        tag_v = _TAG_VERSION_RE.match(tag)
        versions = {str(Version(v.public)) for p in version_proofs(s) if (v := parse_version(p.value))}
        if tag_v and (tv := parse_version(tag_v.group("v"))) and versions and str(Version(tv.public)) not in versions:
            problems.append(f"tag {tag} does not match the engine's vLLM {', '.join(sorted(versions))}")
        if recipe.cuda_major and (m := cuda_major_of_tag(tag)) is not None and m != recipe.cuda_major:
            problems.append(f"tag {tag} is a CUDA {m} image, the recipe needs CUDA {recipe.cuda_major}")
    if problems:
        return _finding("compat.image", "fail", "; ".join(problems), proofs, observed=observed, expected=expected)
    if img.source != "image_inspect":
        return _finding("compat.image", "not-observable",
                        f"image {img.reference} is only declared in the parameters, never inspected: set "
                        "axes.environment.image_inspect (docker/crictl inspect JSON of the running container) "
                        f"({_missing(s, 'image_inspect')})", proofs, observed=observed, expected=expected)
    if not img.digest:
        return _finding("compat.image", "not-observable",
                        f"image {img.reference} inspected, but the inspect JSON carries no digest (RepoDigests, "
                        "imageRef): the exact image cannot be archived", proofs, observed=observed,
                        expected=expected)
    return _finding("compat.image", "pass", f"image {img.reference}@{img.digest[:19]}… from the container's inspect "
                                            "JSON", proofs, observed=observed, expected=expected)


def _norm_ref(ref: str) -> str:
    ref = ref.split("@", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/"):
        ref = ref.removeprefix(prefix)
    return ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"


def check_build_method(s: CompatSources) -> Finding:
    ce = s.collect_env
    official_hints: list[Proof] = []
    custom_hints: list[Proof] = []
    dev_hints: list[Proof] = []
    if s.image and s.image.reference:
        repo, _ = _repo_and_tag(s.image.reference)
        p = Proof(f"image ({s.image.source})", s.image.reference, None, s.attachment("image_inspect"))
        (official_hints if _official_repo(repo) else custom_hints).append(p)
    if ce is not None and (usage := ce.env_dict.get("VLLM_USAGE_SOURCE")):
        p = Proof("collect_env: VLLM_USAGE_SOURCE", usage, line_of(s.texts["collect_env"].text, "VLLM_USAGE_SOURCE"),
                  s.attachment("collect_env"))
        # vLLM's release Dockerfile sets production-docker-image; a source build or another image does not
        (official_hints if usage == "production-docker-image" else custom_hints).append(p)
    for p in version_proofs(s):
        v = parse_version(p.value)
        if v is not None and (v.is_devrelease or (v.local or "").startswith("g")):
            dev_hints.append(p)
    proofs = official_hints + custom_hints + dev_hints
    if s.build == "custom":
        return _finding("compat.build_method", "warn",
                        "custom build: an experimental variant, validated on its own sheet with its own rollback; it "
                        "is never declared conforming to the official recipe", proofs, observed="custom",
                        expected="official")
    if custom_hints:
        said = ", ".join(str(p) for p in custom_hints)
        return _finding("compat.build_method", "fail",
                        f"declared official, but the evidence says otherwise ({said}): treat it as a custom build "
                        "(recipe.build: custom) on its own sheet", proofs, observed="custom?", expected="official")
    if dev_hints:
        said = ", ".join(f"{p.source} {p.value}" for p in dev_hints[:2])
        return _finding("compat.build_method", "warn",
                        f"a development build ({said}): a nightly or source build is not an official release",
                        proofs, observed="development build", expected="official release")
    if not official_hints:
        return _finding("compat.build_method", "not-observable",
                        "declared official, but nothing shows which image runs: provide the image inspect JSON or "
                        "the collect_env report", observed="official (declared)", expected="official")
    said = ", ".join(str(p) for p in official_hints)
    return _finding("compat.build_method", "pass", f"official build ({said})", proofs, observed="official",
                    expected="official")


# ---------------------------------------------------------------------------------------------------------------
# Engine level


def check_version(s: CompatSources, recipe: RecipeParams) -> list[Finding]:
    proofs = version_proofs(s)
    expected = expected_version(recipe)
    if not proofs:
        return [_finding("compat.vllm_version", "not-observable",
                         "vLLM version not observable: " + _missing(s, "version", "server_log", "collect_env"),
                         expected=expected)]
    out = []
    parsed = [(p, parse_version(str(p.value))) for p in proofs]
    publics = {str(Version(v.public)) for _, v in parsed if v is not None}
    if len(publics) > 1:
        said = ", ".join(f"{p.source} says {p.value}" for p in proofs)
        out.append(_finding("compat.vllm_sources", "fail",
                            f"vLLM version sources disagree: {said} — the proofs come from different builds",
                            proofs, observed={p.source: p.value for p in proofs}))
    unreadable = [p for p, v in parsed if v is None]
    observed = proofs[0].value
    if expected is None:
        out.append(_finding("compat.vllm_version", "info", f"vLLM {observed}; the recipe sets no version range",
                            proofs, observed=observed))
        return out
    outside = [(p, v) for p, v in parsed if v is not None and not in_range(v, recipe.vllm_min, recipe.vllm_max)]
    if outside:
        by_value: dict[str, list[str]] = {}
        for p, _ in outside:
            by_value.setdefault(str(p.value), []).append(p.source)
        said = ", ".join(f"{v} ({', '.join(srcs)})" for v, srcs in by_value.items())
        out.append(_finding("compat.vllm_version", "fail", f"vLLM {said} is outside the recipe's range {expected}",
                            proofs, observed=outside[0][0].value, expected=expected))
    elif len(unreadable) == len(parsed):
        out.append(_finding("compat.vllm_version", "warn",
                            f"vLLM version {observed!r} is not a version this kit can compare", proofs,
                            observed=observed, expected=expected))
    else:
        out.append(_finding("compat.vllm_version", "pass", f"vLLM {observed} is within {expected} "
                            f"({', '.join(p.source for p in proofs)})", proofs, observed=observed, expected=expected))
    return out


# Behaviour that proves a flag without the log: auto tool choice answering needs both of these.
_TOOL_FLAGS = ("enable_auto_tool_choice", "tool_call_parser")


def _flag_verdict(s: CompatSources, name: str, value: Any, args: dict[str, Any] | None) -> tuple[str, str]:
    """(status, why) for one required flag, from the log's args and, where it can, from behaviour."""
    probe = s.tool_probe
    log_says = None  # True present with the right value, False absent or wrong, None no log args
    why_log = ""
    if args is not None:
        if name in args:
            log_says = _same(args[name], value)
            why_log = f"log: {name}={args[name]!r}"
        else:
            log_says = False
            why_log = f"log: {name} not among the non-default args"
    behaviour = None
    why_b = ""
    if name in _TOOL_FLAGS and probe.outcome == "answered":
        behaviour, why_b = True, 'tool_choice "auto" answered 200'
    elif name in _TOOL_FLAGS and probe.outcome == "rejected-flags":
        behaviour, why_b = False, f"tool_choice \"auto\" got vLLM's 400 '{probe.detail}'"
    elif name == "reasoning_parser" and (s.chat_reasoning or probe.reasoning):
        behaviour, why_b = True, "replies carry a reasoning field"
    if log_says is True and behaviour is False:
        return "fail", f"sources disagree: {why_log}, but {why_b}"
    if log_says is False and behaviour is True and name in args:  # type: ignore[operator]
        return "fail", f"{why_log} (expected {value!r}), while {why_b}"
    if log_says is True:
        return "pass", why_log + (f"; {why_b}" if why_b else "")
    if behaviour is False:
        return "fail", why_b + (f"; {why_log}" if why_log else "")
    if log_says is False and behaviour is True:
        if value is True:
            return "pass", f"{why_b} (the log does not list it: {why_log})"
        return "warn", f"{why_b}, but {why_log}: its value is not confirmed"
    if log_says is False:
        return "fail", why_log
    if behaviour is True:
        if value is True:
            return "pass", why_b
        return "warn", f"{why_b}, but which {name} is not observable without the server log"
    return "not-observable", "no server log and no behaviour that shows it"


def check_flags(s: CompatSources, recipe: RecipeParams) -> Finding:
    if not recipe.required_flags:
        return _finding("compat.flags", "info", "the recipe requires no server flag")
    args = engine_args(s)
    verdicts = {}
    for flag in recipe.required_flags:
        name, value = parse_flag(flag)
        verdicts[flag] = _flag_verdict(s, name, value, args)
    proofs = []
    if args is not None:
        proofs.append(Proof("server_log: non-default args", {parse_flag(f)[0]: args.get(parse_flag(f)[0])
                                                             for f in recipe.required_flags}, _args_where(s),
                            s.attachment("server_log")))
    if s.tool_probe.outcome != "not-run":
        proofs.append(Proof('chat with tool_choice "auto"', f"{s.tool_probe.outcome} (HTTP {s.tool_probe.status})",
                            s.tool_probe.detail or None, s.attachment("tool_choice")))
    order: tuple[FindingStatus, ...] = ("fail", "not-observable", "warn", "pass")
    status = next(st for st in order if st in {v[0] for v in verdicts.values()} or st == "pass")
    observed = {f: v[0] for f, v in verdicts.items()}
    bad = [f"{f} ({why})" for f, (st, why) in verdicts.items() if st == status]
    if status == "pass":
        message = "every required flag is set: " + ", ".join(recipe.required_flags)
    elif status == "fail":
        message = "required server flag(s) missing or wrong: " + "; ".join(bad)
    elif status == "warn":
        message = "flag(s) only partly confirmed: " + "; ".join(bad)
    else:
        message = "flag(s) not observable: " + "; ".join(bad) + " — " + _missing(s, "server_log", "tool_choice")
    return _finding("compat.flags", status, message, proofs, observed=observed, expected=list(recipe.required_flags),
                    verdicts={f: {"status": st, "why": why} for f, (st, why) in verdicts.items()})


def check_prefix_caching(s: CompatSources, recipe: RecipeParams) -> Finding:
    if not recipe.prefix_caching:
        return _finding("compat.prefix_caching", "info", "the recipe does not require prefix caching")
    proofs = []
    label = s.cache_config.get("enable_prefix_caching")
    if label is not None:
        proofs.append(Proof("vllm:cache_config_info", f"enable_prefix_caching={label}", s.cache_config_endpoint,
                            s.attachment("cache_config_info")))
    args = engine_args(s)
    arg = args.get("enable_prefix_caching") if args else None
    if arg is not None:
        proofs.append(Proof("server_log: non-default args", f"enable_prefix_caching={arg}", _args_where(s),
                            s.attachment("server_log")))
    engine_line = line_of(s.texts["server_log"].text, r"enable_prefix_caching=(True|False)") if s.log else None
    if engine_line:
        on = "enable_prefix_caching=True" in engine_line  # line_of keeps the text around the match
        proofs.append(Proof("server_log: engine config", f"enable_prefix_caching={on}", engine_line,
                            s.attachment("server_log")))
    states = {str(p.value).rsplit("=", 1)[1].lower() == "true" for p in proofs}
    if not proofs:
        if args is not None:
            return _finding("compat.prefix_caching", "pass",
                            "prefix caching is not disabled in the non-default args (on by default in vLLM V1)",
                            observed=None, expected=True)
        return _finding("compat.prefix_caching", "not-observable",
                        "prefix caching not observable: " + _missing(s, "cache_config_info", "server_log"),
                        expected=True)
    if len(states) > 1:
        said = ", ".join(str(p) for p in proofs)
        return _finding("compat.prefix_caching", "fail", f"prefix-caching sources disagree: {said}", proofs,
                        observed={p.source: p.value for p in proofs}, expected=True)
    if states == {False}:
        return _finding("compat.prefix_caching", "fail",
                        f"prefix caching is disabled ({proofs[0]}): agent prompts re-prefill their whole history",
                        proofs, observed=False, expected=True)
    return _finding("compat.prefix_caching", "pass", f"prefix caching enabled ({proofs[0]})", proofs, observed=True,
                    expected=True)


def _models_server_error(s: CompatSources, models: Any) -> Finding | None:
    """C05 failed by the server itself when /v1/models answered a server error; None when it did not."""
    if models is None or models.status is None or models.status < 500:
        return None
    return _finding("compat.startup", "fail",
                    f"the engine is not ready: /v1/models answered HTTP {models.status} ({models.error})",
                    [Proof("/v1/models", models.status, models.error, s.attachment("models"))],
                    observed=f"HTTP {models.status}", expected="ready")


def check_startup(s: CompatSources) -> Finding:
    log = s.log
    models = s.texts.get("models")
    answering = bool(s.models)
    att = s.attachment("server_log")
    if log is not None and log.oom is not None and log.oom.phase == "startup":
        proof = Proof("server_log", log.oom.text, f"line {log.oom.line}", att)
        return _finding("compat.startup", "fail",
                        f"the engine never became ready: OOM at startup (line {log.oom.line}: {log.oom.text[:160]}) "
                        "→ topology or image", [proof], observed="oom at startup", expected="ready")
    if log is not None and log.engine_death is not None and not log.ready:
        d = log.engine_death
        return _finding("compat.startup", "fail",
                        f"the engine never became ready: it died at startup (line {d.line}: {d.text[:160]}) "
                        "→ topology or image", [Proof("server_log", d.text, f"line {d.line}", att)],
                        observed="engine dead at startup", expected="ready")
    if log is None and (down := _models_server_error(s, models)):
        return down
    if log is None:
        answers = (f"; the server answers /v1/models ({len(s.models)} model(s)), which proves it started, not that "
                   "it started clean") if answering else ""
        return _finding("compat.startup", "not-observable",
                        "the startup log was not read, so no one checked it for loading or compatibility errors: "
                        + _missing(s, "server_log") + answers, expected="a startup log with no error before ready")
    window = startup_lines(log)
    span = f"lines {window.first}–{window.last}" if window.last else f"lines {window.first}–end (never ready)"
    if window.errors:
        proofs = [Proof("server_log", text, f"line {n}", att) for n, text in window.errors[:5]]
        return _finding("compat.startup", "fail",
                        f"{len(window.errors)} error(s) in the startup log before ready ({span}): "
                        f"{window.quote(window.errors)} → image, dependencies or topology",
                        proofs, observed={"errors": len(window.errors), "window": span},
                        expected="no error before ready")
    if not log.ready:
        if answering:
            return _finding("compat.startup", "not-observable",
                            "the log does not show the server's startup up to ready (an excerpt?), so its startup "
                            "was not read; the server answers /v1/models", expected="the log from the start")
        if down := _models_server_error(s, models):
            return down
        return _finding("compat.startup", "not-observable", "readiness not observable: the log shows no ready "
                        "line and " + _missing(s, "models"), expected="ready")
    if window.warnings:
        proofs = [Proof("server_log", text, f"line {n}", att) for n, text in window.warnings[:5]]
        return _finding("compat.startup", "warn",
                        f"{len(window.warnings)} compatibility warning(s) before ready ({span}): "
                        f"{window.quote(window.warnings)} — handle or explain each before accepting",
                        proofs, observed={"compatibility_warnings": len(window.warnings), "window": span},
                        expected="no compatibility warning before ready")
    return _finding("compat.startup", "pass",
                    f"the startup log holds no error and no compatibility warning before ready ({span}; ready at "
                    f"log line {window.last})", [Proof("server_log", "ready", f"line {window.last}", att)],
                    observed={"errors": 0, "compatibility_warnings": 0, "window": span},
                    expected="no error before ready")


def check_source_reads(s: CompatSources) -> list[Finding]:
    """A file given for a source that is not what it claims: its own finding, so the reviewer fixes the input."""
    out = []
    for name, why in sorted(s.read_errors.items()):
        out.append(_finding("compat.source", "warn", f"{name} could not be read: {why}",
                            [Proof(name, "unreadable", s.texts[name].location, s.attachment(name))],
                            observed="unreadable", source=name))
    for name in ("collect_env", "nvidia_smi", "server_log", "image_inspect"):
        src = s.texts.get(name)
        if src is not None and src.location is not None and src.error:
            out.append(_finding("compat.source", "not-observable", f"{name} configured but not obtained: {src.error}",
                                [Proof(name, "missing", src.location)], observed="missing", source=name))
    return out


def iter_findings(s: CompatSources, recipe: RecipeParams, env: EnvironmentParams) -> list[Finding]:
    """Every rule of the chain, host → container → engine."""
    return [
        check_driver(s, recipe), check_host_container(s), check_gpus(s, env, recipe), check_fabric(s, env),
        check_cuda_build(s, recipe), check_image(s, recipe), check_build_method(s),
        *check_version(s, recipe), check_flags(s, recipe), check_prefix_caching(s, recipe), check_startup(s),
        *check_source_reads(s),
    ]
