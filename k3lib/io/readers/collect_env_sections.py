"""The section grammar of vLLM's `collect_env` report: its labels and what they are called here, the GPU, package,
environment and topology lines, and the values it prints for "nothing" — read line by line, by label, before any
of it is interpreted (`collect_env` turns what is read into a report)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3lib.io.readers._text import is_shell_prompt

__all__ = ["LABELS", "REPORT_LABELS", "PackageLine", "Sections", "read_sections"]

# What the report prints when it has nothing to say; the reader turns all of them into None.
_NULL_WORDS = frozenset({"", "none", "n/a", "na", "no cuda", "could not collect", "not set", "null",
                         "unknown", "not available", "not found"})

# label as printed (lower-cased, spaces collapsed) -> field name. Both layouts print the same labels;
# the sectioned one pads them before the colon.
LABELS = {
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
REPORT_LABELS = frozenset({
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
DRIVER_RE = re.compile(r"^(?P<major>[0-9]{2,4})\.[0-9]{1,4}(?:\.[0-9]{1,4})?$")
CUDA_LIB_RE = re.compile(r"^nvidia-[\w.-]+-cu(?P<major>[0-9]{2})$", re.IGNORECASE)
_GIT_HASH_RE = re.compile(r"^g[0-9a-f]{6,40}$")


@dataclass(frozen=True, slots=True)
class PackageLine:
    """One `[pip3] name==version` or `[conda] name version build` line of the libraries list."""

    manager: str
    name: str
    version: str


@dataclass(frozen=True)
class Sections:
    """What a report's lines hold, label by label, as printed (first occurrence of each label wins)."""

    fields: dict[str, str]  # field name -> raw value, first occurrence
    raw_pairs: list[tuple[str, str]]  # every label/value as printed
    gpu_lines: dict[int, str]  # "GPU n: name" lines by index
    packages: list[PackageLine]
    env: dict[str, str]
    warnings: list[str]  # vLLM's own log lines printed into the report
    detected: str | None  # from vLLM's "Automatically detected platform X." log line
    topology: list[str]  # the rows of the GPU topology matrix
    neuron_block: list[str]  # neuron-ls output printed over several lines
    sectioned: bool  # the ≥0.9 layout, with `=====` section rules
    npu_smi: bool  # vllm-ascend appends an `npu-smi info` table
    cut_in_gpus: bool  # the paste ends inside the GPU list


def read_sections(lines: list[str]) -> Sections:
    """Every labelled value, GPU, package, environment and topology line of a report's cleaned lines."""
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
            if not is_null(stripped.split("]", 1)[1]):
                packages.append(PackageLine(m.group("manager"), m.group("name"), m.group("version")))
            continue
        if m := _GPU_LINE_RE.match(stripped):
            gpu_lines.setdefault(int(m.group("index")), m.group("name"))
            continue
        if in_topology:
            if stripped.lower().startswith(("legend", "nic legend")):
                in_topology = False
                continue
            if _label_of(stripped) not in LABELS:
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
        name = LABELS.get(key)
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

    return Sections(fields=fields, raw_pairs=raw_pairs, gpu_lines=gpu_lines, packages=packages, env=env,
                    warnings=warnings, detected=detected, topology=topology, neuron_block=neuron_block,
                    sectioned=sectioned, npu_smi=npu_smi, cut_in_gpus=_cut_in_gpus(lines, fields, gpu_lines))


def _label_of(line: str) -> str | None:
    """The normalised label of a `label: value` line (blanks folded, lower case), None for any other line."""
    m = _KEY_RE.match(line)
    return " ".join(m.group("key").split()).lower() if m else None


def _cut_in_gpus(lines: list[str], fields: dict[str, str], gpu_lines: dict[int, str]) -> bool:
    """Whether the paste was cut inside its GPU list: a report always goes on after it (driver, cuDNN, …), so a
    paste whose last line is a GPU line (or the GPU models' label) ends there."""
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return bool(gpu_lines) and bool(_GPU_LINE_RE.match(last) or (
        fields.get("gpu_models") is not None and LABELS.get(_label_of(last) or "") == "gpu_models"))


# --- values ----------------------------------------------------------------------------------------------


def is_null(value: str | None) -> bool:
    """Whether a printed value is one of the report's words for nothing."""
    return value is None or " ".join(value.split()).lower().strip(".") in _NULL_WORDS


def field_value(fields: dict[str, str], name: str) -> str | None:
    """A field's value as printed, or None when it is missing or says nothing."""
    value = fields.get(name)
    return None if is_null(value) else value.strip()  # type: ignore[union-attr]


def first_token(value: str | None) -> str | None:
    """The first word of a value (`12.4 (build …)` → `12.4`), or None."""
    if value is None:
        return None
    token = value.split()[0] if value.split() else ""
    return None if is_null(token) else token


def version_like(value: str | None) -> str | None:
    """The first word of a value when it starts with a digit, or None."""
    token = first_token(value)
    return token if token and token[0].isascii() and token[0].isdigit() else None


def as_bool(value: str | None) -> bool | None:
    """`True`/`False` as printed, None for anything else."""
    word = (value or "").strip().lower()
    return True if word == "true" else False if word == "false" else None


def split_vllm_version(raw: str | None) -> tuple[str | None, str | None]:
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
    if is_null(token) or not token[0].isascii() or not token[0].isdigit():
        return None, sha
    return token, sha


def norm_package(name: str) -> str:
    """A package name as pip compares it (`-`, `_` and `.` equal, lower case)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def local_tags(version: str | None) -> set[str]:
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


def read_topology(rows: list[str]) -> tuple[int | None, tuple[int, ...], tuple[str, ...]]:
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
