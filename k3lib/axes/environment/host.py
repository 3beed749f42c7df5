"""The chain's host level: the driver branch, what the host and the container each report (C04), the GPUs the
topology needs against those visible, and the fabric manager on NVSwitch boards."""

from __future__ import annotations

import re
from typing import Any

from ...core.evidence import Finding, FindingStatus
from ...core.params import EnvironmentParams, RecipeParams
from .rules import Proof, engine_args, finding, line_of, missing
from .sources import EnvironmentSources
from .values import cuda_major, driver_branch_ok, expected_driver

# HGX boards whose 8 GPUs talk through NVSwitch: the fabric manager must be up before CUDA can use them.
_NVSWITCH_GPU_RE = re.compile(r"\b(?:A100-SXM|A800-SXM|H100|H800|H200|H20|B200|B300|GB200|GB300)\b", re.IGNORECASE)
_NOT_NVSWITCH_RE = re.compile(r"PCIe|\bNVL\b", re.IGNORECASE)


def gpus_required(s: EnvironmentSources, env: EnvironmentParams) -> tuple[int | None, str]:
    """GPUs one node must see: the larger of the parameter and TP × PP × DP (local) from the log's args — a
    parameter may raise what the server's own arguments need, never lower it."""
    from_log, basis = _gpus_from_log(s)
    if env.gpus_required and (from_log is None or env.gpus_required >= from_log):
        return env.gpus_required, "axes.environment.gpus_required"
    return from_log, basis


def _gpus_from_log(s: EnvironmentSources) -> tuple[int | None, str]:
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


def gpu_count_proofs(s: EnvironmentSources) -> list[Proof]:
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


def cpu_build_without_gpu_need(s: EnvironmentSources, recipe: RecipeParams | None) -> str | None:
    """Why GPU requirements do not apply here, or None: collect_env shows a CPU build and the recipe asks for no
    CUDA version. (A recipe that does require CUDA keeps them: a CPU build is then an environment rebuild.)"""
    ce = s.collect_env
    if recipe is None or recipe.cuda_major is not None or ce is None or ce.platform != "cpu":
        return None
    return (f"a CPU build (collect_env: platform cpu, PyTorch {ce.torch_version or 'version unknown'}) and the "
            "recipe requires no CUDA version")


def cpu_proof(s: EnvironmentSources) -> list[Proof]:
    return [Proof("collect_env", "cpu", line_of(s.texts["collect_env"].text, r"PyTorch version\s*:"),
                  s.attachment("collect_env"))]


def _branch(version: Any) -> int | None:
    m = re.match(r"\s*(\d{2,4})\.", str(version))
    return int(m.group(1)) if m else None


def check_driver(s: EnvironmentSources, recipe: RecipeParams) -> Finding:
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
        return finding("environment.driver_branch", "info", f"no GPU driver needed: {why}", cpu_proof(s))
    if not proofs:
        return finding("environment.driver_branch", "not-observable",
                       "host driver version not observable: " + missing(s, "nvidia_smi", "collect_env", "nvml"),
                       expected=expected)
    branches = {b for p in proofs if (b := _branch(p.value)) is not None}
    if not branches:
        return finding("environment.driver_branch", "warn",
                       f"driver version {proofs[0].value!r} has no readable branch", proofs,
                       observed=proofs[0].value, expected=expected)
    observed = proofs[0].value
    if len({p.value for p in proofs}) > 1:
        said = ", ".join(f"{p.source} says {p.value}" for p in proofs)
        status: FindingStatus = ("fail" if len(branches) > 1 or not all(driver_branch_ok(b, recipe) for b in branches)
                                      else "warn")
        return finding("environment.driver_branch", status,
                       f"driver sources disagree: {said} — they were not taken on the same host or at the same time",
                       proofs, observed={p.source: p.value for p in proofs}, expected=expected)
    branch = next(iter(branches))
    if expected is None:
        return finding("environment.driver_branch", "info",
                       f"host driver {observed} (R{branch}); the recipe sets no branch", proofs, observed=observed)
    if driver_branch_ok(branch, recipe):
        return finding("environment.driver_branch", "pass", f"host driver {observed} is R{branch}, {expected}",
                       proofs, observed=observed, expected=expected)
    return finding("environment.driver_branch", "fail",
                   f"host driver {observed} is R{branch}, below the recipe's {expected}"
                   + (f" (a CUDA {recipe.cuda_major} build needs it)" if recipe.cuda_major else ""),
                   proofs, observed=observed, expected=expected)


def check_host_container(s: EnvironmentSources) -> Finding:
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
        return finding("environment.host_container", "not-observable",
                       "nothing compared: no host-side source (set axes.environment.nvidia_smi to the host's "
                       "nvidia-smi output, or run the kit on the host with target.gpu_metrics.source nvml) — "
                       + missing(s, "nvidia_smi", "nvml"))
    if ce is None:
        return finding("environment.host_container", "not-observable",
                       "nothing compared: no container-side report (set axes.environment.collect_env) — "
                       + missing(s, "collect_env"))
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
        return finding("environment.host_container", "fail", "host and container disagree: " + "; ".join(problems),
                       proofs, observed=observed, expected="the same driver, a CUDA the driver can run")
    if not compared:
        return finding("environment.host_container", "not-observable",
                       f"{name} and collect_env share no figure to compare (driver, CUDA, GPUs)", proofs,
                       observed=observed)
    return finding("environment.host_container", "pass", f"host ({name}) and container (collect_env) agree: "
                   + "; ".join(compared), proofs, observed=observed,
                   expected="the same driver, a CUDA the driver can run")


def check_gpus(s: EnvironmentSources, env: EnvironmentParams, recipe: RecipeParams | None = None) -> Finding:
    required, basis = gpus_required(s, env)
    proofs = gpu_count_proofs(s)
    ce = s.collect_env
    if not env.gpus_required and (why := cpu_build_without_gpu_need(s, recipe)):
        # TP × PP × DP counts engine processes; on a CPU build none of them is a GPU
        return finding("environment.gpus_visible", "info", f"no GPU needed: {why} ({basis} are CPU processes)",
                       cpu_proof(s), observed=0)
    expected = f">= {required} ({basis})" if required else None
    if ce is not None and ce.cuda_available is False:
        return finding("environment.gpus_visible", "fail",
                       "the container sees no CUDA device (collect_env: Is CUDA available: False)",
                       proofs, observed=0, expected=expected)
    if s.nvidia_smi is not None and s.nvidia_smi.error:
        return finding("environment.gpus_visible", "fail", f"nvidia-smi failed on the host: {s.nvidia_smi.error}",
                       proofs, observed=0, expected=expected)
    if not proofs:
        return finding("environment.gpus_visible", "not-observable",
                       "GPU visibility not observable: " + missing(s, "collect_env", "nvidia_smi", "nvml"),
                       expected=expected)
    # the container's own view is the one that matters: a host may show 8 GPUs while the pod gets 4
    visible = proofs[0].value
    observed = {p.source: p.value for p in proofs}
    counts = ", ".join(f"{p.source} {p.value}" for p in proofs)
    if required is None:
        return finding("environment.gpus_visible", "not-observable",
                       f"{counts} GPU(s) visible, but how many the topology needs is unknown: set "
                       "axes.environment.gpus_required or provide the server log", proofs, observed=observed)
    if visible < required:
        return finding("environment.gpus_visible", "fail",
                       f"{visible} GPU(s) visible ({counts}) but the topology needs {required} ({basis})",
                       proofs, observed=observed, expected=expected)
    return finding("environment.gpus_visible", "pass",
                   f"{counts} GPU(s) visible; the topology needs {required} ({basis})", proofs,
                   observed=observed, expected=expected)


def nvswitch_system(s: EnvironmentSources, env: EnvironmentParams) -> tuple[bool, str]:
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


def check_fabric(s: EnvironmentSources, env: EnvironmentParams) -> Finding:
    needed, basis = nvswitch_system(s, env)
    if not needed:
        return finding("environment.fabric_manager", "info", f"fabric manager not needed ({basis})", observed=basis)
    smi = s.nvidia_smi
    states = [(g.index, g.fabric_state, g.fabric_status) for g in smi.gpus] if smi else []
    if not smi or smi.layout != "query" or not any(st for _, st, _ in states):
        return finding("environment.fabric_manager", "not-observable",
                       f"NVSwitch system ({basis}) but the fabric state is not observable: attach `nvidia-smi -q` "
                       "from the host as axes.environment.nvidia_smi", expected="State Completed, Status Success")
    proof = Proof("nvidia_smi -q (host)", {i: f"{st}/{su}" for i, st, su in states},
                  line_of(s.texts["nvidia_smi"].text, r"^\s*Fabric\s*$"), s.attachment("nvidia_smi"))
    bad = [(i, st, su) for i, st, su in states if st != "Completed" or (su and su != "Success")]
    if bad:
        listed = ", ".join(f"GPU {i}: {st or 'N/A'}/{su or 'N/A'}" for i, st, su in bad)
        return finding("environment.fabric_manager", "fail",
                       f"fabric manager not up on an NVSwitch system ({listed}): CUDA cannot use these GPUs together",
                       [proof], observed=proof.value, expected="State Completed, Status Success")
    return finding("environment.fabric_manager", "pass",
                   f"fabric Completed/Success on all {len(states)} GPUs ({basis})", [proof],
                   observed=proof.value, expected="State Completed, Status Success")
