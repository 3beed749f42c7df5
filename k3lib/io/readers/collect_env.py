"""Reader for vLLM's `collect_env` report (`python collect_env.py`, `vllm collect-env`), flat (≤0.8) and sectioned (≥0.9).

The report is read by label, not by position, so pastes that are indented, fenced, cut short or reordered still read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import clean_lines, is_shell_prompt

PLATFORMS = ("cuda", "rocm", "cpu", "xpu", "tpu", "npu", "neuron", "unknown")

# What the report prints when it has nothing to say; the reader turns all of them into None.
_NULL_WORDS = frozenset({"", "none", "n/a", "na", "no cuda", "could not collect", "not set", "null",
                         "unknown", "not available", "not found"})

# label as printed (lower-cased, spaces collapsed) -> field name. Both layouts print the same labels;
# the sectioned one pads them before the colon.
_LABELS = {
    "pytorch version": "torch_version",
    "torch version": "torch_version",
    "is debug build": "debug_build",
    "cuda used to build pytorch": "torch_cuda_build",
    "rocm used to build pytorch": "rocm_build",
    "xpu used to build pytorch": "xpu_build",
    "os": "os",
    "gcc version": "gcc_version",
    "clang version": "clang_version",
    "cmake version": "cmake_version",
    "libc version": "libc_version",
    "python version": "python_version",
    "python platform": "python_platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "cuda_runtime",
    "cuda_module_loading set to": "cuda_module_loading",
    "gpu models and configuration": "gpu_models",
    "intel gpu models": "gpu_models",
    "nvidia driver version": "driver_version",
    "cudnn version": "cudnn_version",
    "hip runtime version": "hip_runtime",
    "miopen runtime version": "miopen_runtime",
    "is xnnpack available": "xnnpack_available",
    "is xpu available": "xpu_available",
    "xpu runtime version": "xpu_runtime",
    "rocm version": "rocm_version",
    "neuron sdk version": "neuron_sdk",
    "vllm version": "vllm_version",
    "vllm ascend version": "vllm_ascend_version",
    "vllm build flags": "build_flags_header",
    "cuda archs": "cuda_archs",
    "gpu topology": "topology_header",
    "cann": "cann",
    "npu": "npu_header",
    "torch-npu version": "torch_npu_version",
    "torch_npu version": "torch_npu_version",
    "versions of relevant libraries": "libraries_header",
}

# Labels only a collect_env report prints; two distinct ones make a text a report.
_REPORT_LABELS = frozenset({
    "torch_version", "debug_build", "torch_cuda_build", "rocm_build", "xpu_build", "cuda_available",
    "cuda_runtime", "cuda_module_loading", "gpu_models", "driver_version", "cudnn_version", "hip_runtime",
    "miopen_runtime", "xnnpack_available", "vllm_version", "build_flags_header", "topology_header",
    "neuron_sdk", "libraries_header", "rocm_version", "xpu_available", "vllm_ascend_version",
})

_KEY_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 _()./+#&-]{0,60}?)\s*:(?:\s+(?P<value>.*)|$)")
_GPU_LINE_RE = re.compile(r"^GPU\s?(?P<index>[0-9]{1,3})\s*:\s*(?P<name>.*\S)\s*$")
_ENV_RE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]{1,80})=(?P<value>.*)$")
_PACKAGE_RE = re.compile(r"^\[(?P<manager>pip3?|conda|uv)\]\s+(?P<name>[A-Za-z0-9][\w.\-\[\]]*)"
                         r"(?:\s*==\s*|\s+)(?P<version>\S+)")
# vLLM's own log lines, bare or behind a process prefix ("(APIServer pid=7) INFO 05-17 …").
_LOG_LINE_RE = re.compile(r"^(?:\([\w.-]{1,60} pid=[0-9]{1,10}\)\s*)?(?:INFO|WARNING|WARN|DEBUG|ERROR)\b")
_DETECTED_RE = re.compile(r"(?:Automatically detected platform|Platform plugin)\s+(?P<name>\w+)", re.IGNORECASE)
_SECTION_RULE_RE = re.compile(r"^={10,}\s*$")
_TOPO_GPU_TOKEN_RE = re.compile(r"(?<![\w\[])GPU(?P<index>[0-9]{1,3})(?![\w\]])")
_NVLINK_TOKEN_RE = re.compile(r"(?<!\w)NV(?P<links>[0-9]{1,2})(?!\w)")
_DRIVER_RE = re.compile(r"^(?P<major>[0-9]{2,4})\.[0-9]{1,4}(?:\.[0-9]{1,4})?$")
_CUDA_LIB_RE = re.compile(r"^nvidia-[\w.-]+-cu(?P<major>[0-9]{2})$", re.IGNORECASE)
_GIT_HASH_RE = re.compile(r"^g[0-9a-f]{6,40}$")
_TRACEBACK_RE = re.compile(r"^Traceback \(most recent call last\)")
_EXCEPTION_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b:?.*$")


@dataclass(frozen=True, slots=True)
class PackageLine:
    """One `[pip3] name==version` or `[conda] name version build` line of the libraries list."""

    manager: str
    name: str
    version: str


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
        want = _norm_package(name)
        for pkg in self.packages:
            if _norm_package(pkg.name) == want:
                return pkg.version
        return None

    @property
    def cuda_library_packages(self) -> tuple[PackageLine, ...]:
        """The `nvidia-*-cuNN` wheels: the CUDA libraries the container really carries."""
        return tuple(p for p in self.packages if _CUDA_LIB_RE.match(p.name))

    @property
    def cuda_library_majors(self) -> tuple[int, ...]:
        """Distinct CUDA majors of the `nvidia-*-cuNN` wheels (e.g. (12,) or (12, 13) for a mixed image)."""
        majors = {int(m.group("major")) for p in self.packages if (m := _CUDA_LIB_RE.match(p.name))}
        return tuple(sorted(majors))

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_inspect(self) -> dict[str, Any]:
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
    fields: dict[str, str] = {}  # field name -> raw value, first occurrence
    raw_pairs: list[tuple[str, str]] = []
    gpu_lines: dict[int, str] = {}
    packages: list[PackageLine] = []
    env: dict[str, str] = {}
    warnings: list[str] = []
    detected: str | None = None
    topology: list[str] = []
    neuron_block: list[str] = []
    in_topology = False
    in_neuron = False
    sectioned = False
    npu_smi = False  # vllm-ascend appends an `npu-smi info` table

    for line in lines:
        stripped = line.strip()
        if _SECTION_RULE_RE.match(stripped):
            sectioned = True
            in_topology = in_neuron = False
            continue
        if not stripped:
            in_neuron = False
            continue
        npu_smi = npu_smi or "npu-smi" in stripped
        if is_shell_prompt(stripped):
            continue
        if _LOG_LINE_RE.match(stripped):
            if m := _DETECTED_RE.search(stripped):
                detected = detected or m.group("name").lower()
            warnings.append(stripped)
            continue
        if m := _ENV_RE.match(stripped):
            env.setdefault(m.group("name"), m.group("value").strip())
            in_topology = False
            continue
        if m := _PACKAGE_RE.match(stripped):
            if not _is_null(stripped.split("]", 1)[1]):
                packages.append(PackageLine(m.group("manager"), m.group("name"), m.group("version")))
            continue
        if m := _GPU_LINE_RE.match(stripped):
            gpu_lines.setdefault(int(m.group("index")), m.group("name"))
            continue
        if in_topology:
            if stripped.lower().startswith(("legend", "nic legend")):
                in_topology = False
                continue
            known = _KEY_RE.match(stripped)
            if not (known and " ".join(known.group("key").split()).lower() in _LABELS):
                topology.append(stripped)
                continue
            in_topology = False  # a labelled line: the matrix is over (reordered or trimmed pastes)
        if in_neuron:
            neuron_block.append(stripped)
            continue

        m = _KEY_RE.match(stripped)
        if m is None:
            continue
        key = " ".join(m.group("key").split()).lower()
        value = (m.group("value") or "").strip()
        raw_pairs.append((m.group("key").strip(), value))
        name = _LABELS.get(key)
        if name is None:
            continue
        fields.setdefault(name, value)
        if name == "topology_header":
            in_topology = True
            if value:
                topology.append(value)
        elif name == "neuron_sdk" and value.startswith("("):
            # neuron-ls output is printed as a tuple over several lines
            in_neuron = True
        elif name == "gpu_models" and (g := _GPU_LINE_RE.match(value)):
            gpu_lines.setdefault(int(g.group("index")), g.group("name"))

    # A report always goes on after its GPU list (driver, cuDNN, …); a paste whose last line is a GPU line was cut
    # inside the list.
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    cut_in_gpus = bool(gpu_lines) and bool(_GPU_LINE_RE.match(last) or (
        fields.get("gpu_models") is not None and _KEY_RE.match(last) and _LABELS.get(
            " ".join(_KEY_RE.match(last).group("key").split()).lower()) == "gpu_models"))  # type: ignore[union-attr]

    if len(_REPORT_LABELS.intersection(fields)) < 2:
        raise ArtifactError(_not_a_report_message(lines), source=source)

    vllm_raw = _value(fields, "vllm_version")
    vllm_version, git_sha = _split_vllm_version(vllm_raw)
    torch_version = _first_token(_value(fields, "torch_version"))
    torch_cuda_build = _first_token(_value(fields, "torch_cuda_build"))
    rocm_build = _first_token(_value(fields, "rocm_build"))
    xpu_build = _first_token(_value(fields, "xpu_build"))
    cuda_runtime = _version_like(_value(fields, "cuda_runtime"))
    driver_version = _first_token(_value(fields, "driver_version"))
    driver_match = _DRIVER_RE.match(driver_version or "")
    if driver_match is None:
        driver_version = None
    driver_branch = int(driver_match.group("major")) if driver_match else None

    topo_count, nvlinks, links = _read_topology(topology)
    pkgs = tuple(packages)
    build_flags = " ".join(v for v in (fields.get("cuda_archs"),) if v) or None
    cuda_archs = build_flags.split(";")[0].strip() if build_flags else None

    platform = _platform(fields, torch_version, vllm_version, pkgs, env, detected, gpu_lines, links, npu_smi)

    gpu_models_raw = fields.get("gpu_models")
    gpus: tuple[str, ...]
    if gpu_lines:
        gpus = tuple(gpu_lines[i] for i in sorted(gpu_lines))
    elif gpu_models_raw and not _is_null(gpu_models_raw):
        gpus = (gpu_models_raw,)  # ROCm prints the current device's name alone, without "GPU 0:"
    else:
        gpus = ()
    gpu_count = _gpu_count(platform, gpu_lines, gpus, topo_count, gpu_models_raw)
    if cut_in_gpus and not topo_count and platform not in ("cpu", "npu"):
        gpu_count = None

    neuron = _value(fields, "neuron_sdk")
    if neuron and neuron_block:
        neuron = "\n".join([neuron, *neuron_block])

    return CollectEnvReport(
        layout="sectioned" if sectioned else "flat",
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
        cuda_available=_bool(fields.get("cuda_available")),
        gpus=gpus,
        gpu_count=gpu_count,
        truncated=cut_in_gpus,
        os=_value(fields, "os"),
        python_version=_first_token(_value(fields, "python_version")),
        python_platform=_value(fields, "python_platform"),
        cudnn_version=_value(fields, "cudnn_version"),
        hip_runtime=_value(fields, "hip_runtime"),
        rocm_version=_value(fields, "rocm_version"),
        neuron_sdk=neuron,
        vllm_build_flags=build_flags and f"CUDA Archs: {build_flags}",
        cuda_archs=None if _is_null(cuda_archs) else cuda_archs,
        detected_platform=detected,
        topology_gpu_count=topo_count,
        nvlink_counts=nvlinks,
        topology_links=links,
        packages=pkgs,
        env=tuple(env.items()),
        warnings=tuple(warnings),
        fields=tuple(raw_pairs),
    )


def inspect_collect_env(text: str | bytes, *, source: str | None = None) -> dict[str, Any]:
    """`{"vllm_version", "torch_version", …, "platform"}` for `k3 inspect collect-env --json`."""
    return parse_collect_env(text, source=source).to_inspect()


# --- helpers ---------------------------------------------------------------------------------------------


def _is_null(value: str | None) -> bool:
    return value is None or " ".join(value.split()).lower().strip(".") in _NULL_WORDS


def _value(fields: dict[str, str], name: str) -> str | None:
    value = fields.get(name)
    return None if _is_null(value) else value.strip()  # type: ignore[union-attr]


def _first_token(value: str | None) -> str | None:
    if value is None:
        return None
    token = value.split()[0] if value.split() else ""
    return None if _is_null(token) else token


def _version_like(value: str | None) -> str | None:
    token = _first_token(value)
    return token if token and token[0].isascii() and token[0].isdigit() else None


def _bool(value: str | None) -> bool | None:
    word = (value or "").strip().lower()
    return True if word == "true" else False if word == "false" else None


def _split_vllm_version(raw: str | None) -> tuple[str | None, str | None]:
    """`0.11.1rc2 (git sha: 3f8e2d1)` and 0.5's `0.5.4@4db5176…` both carry the sha beside the version."""
    if raw is None:
        return None, None
    sha_match = re.search(r"git sha:\s*([0-9a-fA-F]{6,40})", raw)
    token = raw.split()[0]
    if "@" in token:
        token, _, at_sha = token.partition("@")
        sha = at_sha or None
    else:
        sha = None
    sha = sha_match.group(1) if sha_match else sha
    if _is_null(token) or not token[0].isascii() or not token[0].isdigit():
        return None, sha
    return token, sha


def _norm_package(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _local_tags(version: str | None) -> set[str]:
    """The alphabetic heads of a PEP 440 local version: `+g3f8e2d1.cu129` -> {"cu"}, `+rocm6.2` -> {"rocm"}.

    Git hashes of dev builds (`+g5b8a1fde`) say nothing about the platform and are skipped.
    """
    _, plus, local = (version or "").partition("+")
    tags = set()
    for part in local.split(".") if plus else ():
        if _GIT_HASH_RE.match(part.lower()):
            continue
        head = re.match(r"[A-Za-z]+", part)
        if head:
            tags.add(head.group(0).lower())
    return tags


def _read_topology(rows: list[str]) -> tuple[int | None, tuple[int, ...], tuple[str, ...]]:
    """GPU count (the widest header row of GPUn tokens), NV# link widths and link kinds of the matrix."""
    count = 0
    nvlinks: set[int] = set()
    links: set[str] = set()
    for row in rows:
        indices = {m.group("index") for m in _TOPO_GPU_TOKEN_RE.finditer(row)}
        count = max(count, len(indices))
        if not re.match(r"^GPU[0-9]{1,3}\b", row):
            continue
        cells = row.split()[1:]
        for cell in cells:
            if m := _NVLINK_TOKEN_RE.fullmatch(cell):
                nvlinks.add(int(m.group("links")))
                links.add(cell)
            elif cell in {"SYS", "NODE", "PHB", "PXB", "PIX", "XGMI", "PCIE", "NV", "SOC"}:
                links.add(cell)
    return (count or None), tuple(sorted(nvlinks)), tuple(sorted(links))


def _platform(fields: dict[str, str], torch_version: str | None, vllm_version: str | None,
              packages: tuple[PackageLine, ...], env: dict[str, str], detected: str | None,
              gpu_lines: dict[int, str], links: tuple[str, ...], npu_smi: bool) -> str:
    """Decide the build's platform from the most specific evidence first (plugins, then GPU vendors)."""
    names = {_norm_package(p.name) for p in packages}
    suffixes = _local_tags(torch_version) | _local_tags(vllm_version)
    flags = (fields.get("cuda_archs") or "").lower()
    detected = {"ascend": "npu", "npu": "npu", "hpu": "hpu"}.get(detected or "", detected)
    gpu_text = " ".join(gpu_lines.values()) + " " + (fields.get("gpu_models") or "")

    if (detected == "npu" or npu_smi or "npu" in suffixes or _value(fields, "vllm_ascend_version") or "cann" in fields
            or _value(fields, "torch_npu_version") or {"torch-npu", "vllm-ascend"} & names
            or any(k.startswith("ASCEND_") for k in env)):
        return "npu"
    if (detected == "neuron" or "neuron" in suffixes or _value(fields, "neuron_sdk") or "neuron: enabled" in flags
            or {"torch-neuronx", "neuronx-cc", "transformers-neuronx", "libneuronxla", "neuronx-distributed"} & names):
        return "neuron"
    if (detected == "tpu" or "tpu" in suffixes or {"torch-xla", "libtpu", "libtpu-nightly", "tpu-info",
                                                   "tpu-inference", "vllm-tpu"} & names
            or env.get("PJRT_DEVICE", "").upper() == "TPU" or any(k.startswith("TPU_") for k in env)):
        return "tpu"
    if (detected == "xpu" or "xpu" in suffixes or _value(fields, "xpu_build") or "xpu: enabled" in flags
            or _bool(fields.get("xpu_available")) or re.search(r"Intel\(R\) (?:Arc|Data Center GPU)", gpu_text)):
        return "xpu"
    if (detected == "rocm" or any(s.startswith("rocm") for s in suffixes) or _value(fields, "rocm_build")
            or "rocm: enabled" in flags or _value(fields, "hip_runtime") or "XGMI" in links
            or re.search(r"\bAMD (?:Instinct|Radeon)|\bgfx[0-9]{3,4}", gpu_text)):
        return "rocm"
    if detected == "hpu" or {"hpu", "gaudi", "habana"} & suffixes or "habana" in " ".join(names):
        return "unknown"  # Gaudi and other plugins the kit has no name for
    if detected in PLATFORMS:
        return detected
    if (any(s.startswith("cu") for s in suffixes) or _value(fields, "torch_cuda_build")
            or _DRIVER_RE.match(_first_token(_value(fields, "driver_version")) or "")
            or _version_like(_value(fields, "cuda_runtime"))
            or re.search(r"\b(?:NVIDIA|Tesla|GeForce|Quadro)\b", gpu_text)):
        return "cuda"
    if "cpu" in suffixes:
        return "cpu"
    other_suffix = bool(suffixes - {"cpu"})
    if torch_version and not other_suffix and "torch_cuda_build" in fields and _is_null(fields["torch_cuda_build"]):
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
    if platform in ("tpu", "neuron") and gpu_models_raw is not None and _is_null(gpu_models_raw):
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
