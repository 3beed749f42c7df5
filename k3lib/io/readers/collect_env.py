"""Reader for vLLM's `collect_env` report (`python collect_env.py`, `vllm collect-env`), flat (≤0.8) and sectioned (≥0.9).

The report is read by label, not by position, so pastes that are indented, fenced, cut short or reordered still read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypedDict

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import clean_lines
from k3lib.io.readers.collect_env_sections import (
    CUDA_LIB_RE,
    DRIVER_RE,
    REPORT_LABELS,
    PackageLine,
    as_bool,
    field_value,
    first_token,
    is_null,
    local_tags,
    norm_package,
    read_sections,
    read_topology,
    split_vllm_version,
    version_like,
)

__all__ = ["PLATFORMS", "CollectEnvReport", "inspect_collect_env", "parse_collect_env"]

PLATFORMS = ("cuda", "rocm", "cpu", "xpu", "tpu", "npu", "neuron", "unknown")

_TRACEBACK_RE = re.compile(r"^Traceback \(most recent call last\)")
_EXCEPTION_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b:?.*$")


class CollectEnvJson(TypedDict):
    """`k3 inspect collect-env --json` (schemas/inspect/collect-env.schema.json)."""

    vllm_version: str | None
    torch_version: str | None
    torch_cuda_build: str | None
    rocm_build: str | None
    cuda_runtime: str | None
    driver_version: str | None
    driver_branch: int | None
    gpus: list[str]
    gpu_count: int | None
    platform: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class CollectEnvReport:
    """What a collect_env report says; every field is None when the report does not say it."""

    layout: str  # "flat" (≤0.8) or "sectioned" (≥0.9)
    platform: str  # one of PLATFORMS
    vllm_version: str | None
    vllm_git_sha: str | None
    torch_version: str | None
    torch_cuda_build: str | None
    rocm_build: str | None
    xpu_build: str | None
    cuda_runtime: str | None
    driver_version: str | None
    driver_branch: int | None
    cuda_available: bool | None
    gpus: tuple[str, ...]
    gpu_count: int | None
    truncated: bool = False  # the paste ends inside the GPU list: more GPUs may follow, the count is unknown
    os: str | None = None
    python_version: str | None = None
    python_platform: str | None = None
    cudnn_version: str | None = None
    hip_runtime: str | None = None
    rocm_version: str | None = None
    neuron_sdk: str | None = None
    vllm_build_flags: str | None = None
    cuda_archs: str | None = None
    detected_platform: str | None = None  # from vLLM's own "Automatically detected platform X." log line
    topology_gpu_count: int | None = None
    nvlink_counts: tuple[int, ...] = ()  # distinct NV# values of the nvidia-smi topology matrix
    topology_links: tuple[str, ...] = ()  # distinct link kinds seen in the topology (NV18, PIX, SYS, XGMI…)
    packages: tuple[PackageLine, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # every raw label/value, first seen

    @property
    def nvlink(self) -> bool | None:
        """True when the GPU topology shows NVLink between GPUs, None when no nvidia topology was printed."""
        if self.nvlink_counts:
            return True
        return False if self.topology_links else None

    def package_version(self, name: str) -> str | None:
        """The version of a package in the libraries list (pip spelling, `-` and `_` equal), first manager wins."""
        want = norm_package(name)
        for pkg in self.packages:
            if norm_package(pkg.name) == want:
                return pkg.version
        return None

    @property
    def cuda_library_packages(self) -> tuple[PackageLine, ...]:
        """The `nvidia-*-cuNN` wheels: the CUDA libraries the container really carries."""
        return tuple(p for p in self.packages if CUDA_LIB_RE.match(p.name))

    @property
    def cuda_library_majors(self) -> tuple[int, ...]:
        """Distinct CUDA majors of the `nvidia-*-cuNN` wheels (e.g. (12,) or (12, 13) for a mixed image)."""
        majors = {int(m.group("major")) for p in self.packages if (m := CUDA_LIB_RE.match(p.name))}
        return tuple(sorted(majors))

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_inspect(self) -> CollectEnvJson:
        """The `k3 inspect collect-env --json` shape (schemas/inspect/collect-env.schema.json)."""
        return {
            "vllm_version": self.vllm_version,
            "torch_version": self.torch_version,
            "torch_cuda_build": self.torch_cuda_build,
            "rocm_build": self.rocm_build,
            "cuda_runtime": self.cuda_runtime,
            "driver_version": self.driver_version,
            "driver_branch": self.driver_branch,
            "gpus": list(self.gpus),
            "gpu_count": self.gpu_count,
            "platform": self.platform,
            "truncated": self.truncated,
        }


def parse_collect_env(text: str | bytes, *, source: str | None = None) -> CollectEnvReport:
    """Read a collect_env report as pasted. Raises ArtifactError when the text is not such a report."""
    lines = clean_lines(text)
    s = read_sections(lines)
    fields, gpu_lines, packages, env = s.fields, s.gpu_lines, s.packages, s.env
    detected, topology, neuron_block, npu_smi, cut_in_gpus = (s.detected, s.topology, s.neuron_block, s.npu_smi,
                                                               s.cut_in_gpus)

    if len(REPORT_LABELS.intersection(fields)) < 2:
        raise ArtifactError(_not_a_report_message(lines), source=source)

    vllm_raw = field_value(fields, "vllm_version")
    vllm_version, git_sha = split_vllm_version(vllm_raw)
    torch_version = first_token(field_value(fields, "torch_version"))
    torch_cuda_build = first_token(field_value(fields, "torch_cuda_build"))
    rocm_build = first_token(field_value(fields, "rocm_build"))
    xpu_build = first_token(field_value(fields, "xpu_build"))
    cuda_runtime = version_like(field_value(fields, "cuda_runtime"))
    driver_version, driver_branch = _driver(fields)

    topo_count, nvlinks, links = read_topology(topology)
    pkgs = tuple(packages)
    build_flags = " ".join(v for v in (fields.get("cuda_archs"),) if v) or None
    cuda_archs = build_flags.split(";")[0].strip() if build_flags else None

    platform = _platform(fields, torch_version, vllm_version, pkgs, env, detected, gpu_lines, links, npu_smi)

    gpus, gpu_count = _gpus(platform, fields, gpu_lines, topo_count, cut_in_gpus)

    neuron = field_value(fields, "neuron_sdk")
    if neuron and neuron_block:
        neuron = "\n".join([neuron, *neuron_block])

    return CollectEnvReport(
        layout="sectioned" if s.sectioned else "flat",
        platform=platform,
        vllm_version=vllm_version,
        vllm_git_sha=git_sha,
        torch_version=torch_version,
        torch_cuda_build=torch_cuda_build,
        rocm_build=rocm_build,
        xpu_build=xpu_build,
        cuda_runtime=cuda_runtime,
        driver_version=driver_version,
        driver_branch=driver_branch,
        cuda_available=as_bool(fields.get("cuda_available")),
        gpus=gpus,
        gpu_count=gpu_count,
        truncated=cut_in_gpus,
        os=field_value(fields, "os"),
        python_version=first_token(field_value(fields, "python_version")),
        python_platform=field_value(fields, "python_platform"),
        cudnn_version=field_value(fields, "cudnn_version"),
        hip_runtime=field_value(fields, "hip_runtime"),
        rocm_version=field_value(fields, "rocm_version"),
        neuron_sdk=neuron,
        vllm_build_flags=build_flags and f"CUDA Archs: {build_flags}",
        cuda_archs=None if is_null(cuda_archs) else cuda_archs,
        detected_platform=detected,
        topology_gpu_count=topo_count,
        nvlink_counts=nvlinks,
        topology_links=links,
        packages=pkgs,
        env=tuple(env.items()),
        warnings=tuple(s.warnings),
        fields=tuple(s.raw_pairs),
    )


def _driver(fields: dict[str, str]) -> tuple[str | None, int | None]:
    """The NVIDIA driver version and its branch (its major), or (None, None) when the field holds no version."""
    driver_version = first_token(field_value(fields, "driver_version"))
    driver_match = DRIVER_RE.match(driver_version or "")
    if driver_match is None:
        return None, None
    return driver_version, int(driver_match.group("major"))


def _gpus(platform: str, fields: dict[str, str], gpu_lines: dict[int, str], topo_count: int | None,
          cut_in_gpus: bool) -> tuple[tuple[str, ...], int | None]:
    """The GPU names as listed, and how many there are (None where the list was cut and no topology counts them)."""
    gpu_models_raw = fields.get("gpu_models")
    gpus: tuple[str, ...]
    if gpu_lines:
        gpus = tuple(gpu_lines[i] for i in sorted(gpu_lines))
    elif gpu_models_raw and not is_null(gpu_models_raw):
        gpus = (gpu_models_raw,)  # ROCm prints the current device's name alone, without "GPU 0:"
    else:
        gpus = ()
    gpu_count = _gpu_count(platform, gpu_lines, gpus, topo_count, gpu_models_raw)
    if cut_in_gpus and not topo_count and platform not in ("cpu", "npu"):
        gpu_count = None
    return gpus, gpu_count


def inspect_collect_env(text: str | bytes, *, source: str | None = None) -> CollectEnvJson:
    """`{"vllm_version", "torch_version", …, "platform"}` for `k3 inspect collect-env --json`."""
    return parse_collect_env(text, source=source).to_inspect()


def _platform(fields: dict[str, str], torch_version: str | None, vllm_version: str | None,
              packages: tuple[PackageLine, ...], env: dict[str, str], detected: str | None,
              gpu_lines: dict[int, str], links: tuple[str, ...], npu_smi: bool) -> str:
    """Decide the build's platform from the most specific evidence first (plugins, then GPU vendors)."""
    names = {norm_package(p.name) for p in packages}
    suffixes = local_tags(torch_version) | local_tags(vllm_version)
    flags = (fields.get("cuda_archs") or "").lower()
    detected = {"ascend": "npu", "npu": "npu", "hpu": "hpu"}.get(detected or "", detected)
    gpu_text = " ".join(gpu_lines.values()) + " " + (fields.get("gpu_models") or "")

    if (detected == "npu" or npu_smi or "npu" in suffixes or field_value(fields, "vllm_ascend_version") or "cann" in fields
            or field_value(fields, "torch_npu_version") or {"torch-npu", "vllm-ascend"} & names
            or any(k.startswith("ASCEND_") for k in env)):
        return "npu"
    if (detected == "neuron" or "neuron" in suffixes or field_value(fields, "neuron_sdk") or "neuron: enabled" in flags
            or {"torch-neuronx", "neuronx-cc", "transformers-neuronx", "libneuronxla", "neuronx-distributed"} & names):
        return "neuron"
    if (detected == "tpu" or "tpu" in suffixes or {"torch-xla", "libtpu", "libtpu-nightly", "tpu-info",
                                                   "tpu-inference", "vllm-tpu"} & names
            or env.get("PJRT_DEVICE", "").upper() == "TPU" or any(k.startswith("TPU_") for k in env)):
        return "tpu"
    if (detected == "xpu" or "xpu" in suffixes or field_value(fields, "xpu_build") or "xpu: enabled" in flags
            or as_bool(fields.get("xpu_available")) or re.search(r"Intel\(R\) (?:Arc|Data Center GPU)", gpu_text)):
        return "xpu"
    if (detected == "rocm" or any(s.startswith("rocm") for s in suffixes) or field_value(fields, "rocm_build")
            or "rocm: enabled" in flags or field_value(fields, "hip_runtime") or "XGMI" in links
            or re.search(r"\bAMD (?:Instinct|Radeon)|\bgfx[0-9]{3,4}", gpu_text)):
        return "rocm"
    if detected == "hpu" or {"hpu", "gaudi", "habana"} & suffixes or "habana" in " ".join(names):
        return "unknown"  # Gaudi and other plugins the kit has no name for
    if detected in PLATFORMS:
        return detected
    if (any(s.startswith("cu") for s in suffixes) or field_value(fields, "torch_cuda_build")
            or DRIVER_RE.match(first_token(field_value(fields, "driver_version")) or "")
            or version_like(field_value(fields, "cuda_runtime"))
            or re.search(r"\b(?:NVIDIA|Tesla|GeForce|Quadro)\b", gpu_text)):
        return "cuda"
    if "cpu" in suffixes:
        return "cpu"
    other_suffix = bool(suffixes - {"cpu"})
    if torch_version and not other_suffix and "torch_cuda_build" in fields and is_null(fields["torch_cuda_build"]):
        return "cpu"  # a torch built without CUDA, ROCm or XPU, e.g. the plain wheel on macOS or aarch64
    return "unknown"


def _gpu_count(platform: str, gpu_lines: dict[int, str], gpus: tuple[str, ...], topo_count: int | None,
               gpu_models_raw: str | None) -> int | None:
    if platform in ("cpu", "npu"):
        return 0  # NPUs are not GPUs; the report's GPU lines do not describe them
    if platform == "rocm":
        # torch names only the current device on ROCm; rocm-smi's topology matrix lists them all
        return topo_count or (len(gpu_lines) or None)
    if gpu_lines:
        return len(gpu_lines)
    if topo_count:
        return topo_count
    if gpu_models_raw is not None and " ".join(gpu_models_raw.split()).lower() == "no cuda":
        return 0
    if platform in ("tpu", "neuron") and gpu_models_raw is not None and is_null(gpu_models_raw):
        return 0
    return len(gpus) or None


def _not_a_report_message(lines: list[str]) -> str:
    message = ("input is not a vLLM collect_env report: expected lines such as 'PyTorch version:', "
               "'vLLM Version:' or 'Nvidia driver version:' (the output of `python collect_env.py` or "
               "`vllm collect-env`)")
    stripped = [ln.strip() for ln in lines if ln.strip()]
    if any(_TRACEBACK_RE.match(ln) for ln in stripped):
        last = next((ln for ln in reversed(stripped) if _EXCEPTION_LINE_RE.match(ln)), stripped[-1])
        message += f"; it holds a Python traceback instead, so collect_env itself failed ({last[:160]!r})"
    return message
