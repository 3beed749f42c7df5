"""Reader for `nvidia-smi` output: the default table, `nvidia-smi -q`, `-L` and `--query-gpu … --format=csv`.

The driver's "CUDA Version" is what the driver can run, not what the image was built with; callers compare it with
the collect_env report's build to tell the two apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Required, TypedDict, cast

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import clean_lines, is_shell_prompt

# Case matters: collect_env prints "Nvidia driver version:", which is not nvidia-smi's own line.
_DRIVER_RE = re.compile(r"Driver\s+Version\s*:\s*(?P<v>[0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)")
_CUDA_RE = re.compile(r"CUDA\s+(?:Driver\s+)?Version\s*:\s*(?P<v>[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,4})?)")
_COLLECT_ENV_RE = re.compile(r"^\s*(?:PyTorch version|CUDA used to build PyTorch|vLLM Version|Is CUDA available)\s*:",
                             re.MULTILINE)
_SMI_HEADER_RE = re.compile(r"NVIDIA-SMI\s+(?P<v>[0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)")
_BUS_ID_RE = re.compile(r"(?<![0-9A-Fa-f])(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_MEMORY_CELL_RE = re.compile(r"(?P<used>[0-9]{1,9})\s*MiB\s*/\s*(?P<total>[0-9]{1,9})\s*MiB", re.IGNORECASE)
_GPU_ROW_RE = re.compile(r"^(?P<index>[0-9]{1,3})\s+(?P<rest>.*\S)$")
_PERSISTENCE_TAIL_RE = re.compile(r"\s+(?P<mode>On|Off|WDDM|TCC|MCDM|N/A)$")
_PROCESS_ROW_RE = re.compile(
    r"^(?P<gpu>[0-9]{1,3})\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>[0-9]{1,10})\s+(?P<type>[CGM+]{1,3})\s+"
    r"(?P<name>.*?)\s*(?:(?P<mem>[0-9]{1,9})\s*MiB|(?:[0-9]{1,9}\.\.\.)|N/A)?$")
_QUERY_GPU_RE = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_QUERY_KV_RE = re.compile(r"^(?P<key>[^:]{1,80}?)\s*:\s?(?P<value>.*)$")
_LIST_RE = re.compile(r"^GPU\s+(?P<index>[0-9]{1,3}):\s+(?P<rest>\S.*)$")
_UUID_RE = re.compile(r"\(UUID:\s*(?P<uuid>[^)\s]{1,100})\s*\)$")
_MIB_RE = re.compile(r"^(?P<n>[0-9]{1,9})(?:\.[0-9]+)?\s*MiB$", re.IGNORECASE)
_FAILURE_RE = re.compile(
    r"NVIDIA-SMI has failed|No devices were found|couldn't communicate with the NVIDIA driver|"
    r"Failed to initialize NVML|Driver/library version mismatch|Unable to determine the device handle",
    re.IGNORECASE)
_NULL_WORDS = frozenset({"", "n/a", "[n/a]", "none", "not supported", "[not supported]", "unknown",
                         "[unknown error]", "[insufficient permissions]"})


class GpuJson(TypedDict):
    index: int
    name: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None


class NvidiaSmiJson(TypedDict):
    """`k3 inspect nvidia-smi --json`."""

    driver_version: str | None
    driver_branch: int | None
    cuda_version: str | None
    gpus: list[GpuJson]


class _GpuFields(TypedDict, total=False):
    """A GPU's fields as a reader gathers them, before they make an `NvidiaSmiGpu`."""

    index: Required[int]
    name: str | None
    bus_id: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    mig_mode: str | None
    persistence_mode: str | None
    uuid: str | None
    product_brand: str | None
    product_architecture: str | None
    fabric_state: str | None
    fabric_status: str | None


@dataclass(frozen=True, slots=True)
class NvidiaSmiGpu:
    """One physical GPU as nvidia-smi printed it; a MIG-enabled GPU is one record with `mig_mode` "Enabled"."""

    index: int
    name: str | None  # as printed: the table truncates long names ("NVIDIA RTX 6000 Ada Gene...")
    bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    mig_mode: str | None = None  # "Enabled", "Disabled", or None where the GPU has no MIG
    persistence_mode: str | None = None
    uuid: str | None = None
    product_brand: str | None = None
    product_architecture: str | None = None
    fabric_state: str | None = None  # -q only: "Completed", "In Progress", "Not Started", or None (no NVSwitch)
    fabric_status: str | None = None  # -q only: "Success" or an error text

    def to_inspect(self) -> GpuJson:
        return {"index": self.index, "name": self.name, "memory_total_mib": self.memory_total_mib,
                "memory_used_mib": self.memory_used_mib}


@dataclass(frozen=True, slots=True)
class NvidiaSmiProcess:
    """A compute process on a GPU; the name shows whether vLLM holds it (`VLLM::EngineCore_DP0`, `VLLM::Worker_TP1`)."""

    gpu_index: int | None
    pid: int
    name: str
    used_memory_mib: int | None  # None when the table cut the number ("12992...")


@dataclass(frozen=True, slots=True)
class NvidiaSmiReport:
    """The host view of the driver and its GPUs."""

    layout: str  # "table", "query" (-q), "list" (-L) or "csv" (--query-gpu)
    driver_version: str | None
    driver_branch: int | None
    cuda_version: str | None  # the newest CUDA the driver supports, not the CUDA the image carries
    gpus: tuple[NvidiaSmiGpu, ...]
    processes: tuple[NvidiaSmiProcess, ...] = ()
    attached_gpus: int | None = None  # -q's "Attached GPUs" line
    error: str | None = None  # nvidia-smi ran but failed ("couldn't communicate with the NVIDIA driver")

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_names(self) -> tuple[str | None, ...]:
        return tuple(g.name for g in self.gpus)

    def to_inspect(self) -> NvidiaSmiJson:
        """The `k3 inspect nvidia-smi --json` shape."""
        return {
            "driver_version": self.driver_version,
            "driver_branch": self.driver_branch,
            "cuda_version": self.cuda_version,
            "gpus": [g.to_inspect() for g in self.gpus],
        }


def parse_nvidia_smi(text: str | bytes, *, source: str | None = None) -> NvidiaSmiReport:
    """Read nvidia-smi output as pasted. Raises ArtifactError when the text is not nvidia-smi output."""
    lines = [ln for ln in clean_lines(text) if not is_shell_prompt(ln)]
    joined = "\n".join(lines)
    driver = _search(_DRIVER_RE, joined) or _search(_SMI_HEADER_RE, joined)
    cuda = _search(_CUDA_RE, joined)
    failure = next((ln.strip() for ln in lines if _FAILURE_RE.search(ln)), None)
    if "NVIDIA-SMI" not in joined and "NVSMI LOG" not in joined and len(set(_COLLECT_ENV_RE.findall(joined))) >= 2:
        raise ArtifactError("input is not nvidia-smi output but a vLLM collect_env report: read it with "
                            "`k3 inspect collect-env`", source=source)

    layout = "table"
    attached: int | None = None
    processes: tuple[NvidiaSmiProcess, ...] = ()
    if any(_QUERY_GPU_RE.match(ln.strip()) for ln in lines) or "NVSMI LOG" in joined:
        layout = "query"
        gpus, processes, attached = _read_query(lines)
    else:
        gpus, processes = _read_table(lines)
        if not gpus and (csv_gpus := _read_csv(lines)) is not None:
            layout, gpus = "csv", csv_gpus
            driver = driver or _csv_driver(lines)
        if not gpus and (listed := _read_list(lines)):
            layout, gpus = "list", listed

    if driver is None and cuda is None and not gpus and failure is None and "NVIDIA-SMI" not in joined:
        raise ArtifactError(
            "input is not nvidia-smi output: expected the table headed 'NVIDIA-SMI … Driver Version: … CUDA "
            "Version: …', or `nvidia-smi -q` with 'Driver Version :' and 'GPU 00000000:…' sections", source=source)

    return NvidiaSmiReport(
        layout=layout,
        driver_version=driver,
        driver_branch=int(driver.split(".")[0]) if driver else None,
        cuda_version=cuda,
        gpus=tuple(gpus),
        processes=processes,
        attached_gpus=attached,
        error=failure if not gpus else None,
    )


def inspect_nvidia_smi(text: str | bytes, *, source: str | None = None) -> NvidiaSmiJson:
    """`{"driver_version", "driver_branch", "cuda_version", "gpus": [...]}` for `k3 inspect nvidia-smi --json`."""
    return parse_nvidia_smi(text, source=source).to_inspect()


# --- the default table ------------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")) or len(body) < 2:
        return []
    return [c.strip() for c in body[1:-1].split("|")]


def _read_table(lines: list[str]) -> tuple[list[NvidiaSmiGpu], tuple[NvidiaSmiProcess, ...]]:
    """GPU blocks are three rows (name, memory, MIG mode) between `+---+` rules; stop at the MIG/process tables."""
    gpus: dict[int, _GpuFields] = {}
    processes: list[NvidiaSmiProcess] = []
    current: _GpuFields | None = None
    row_in_block = 0
    section = "gpus"
    for line in lines:
        if len(line) > 1000:  # no nvidia-smi row is this wide; keeps the row patterns linear on junk
            continue
        low = line.lower()
        if "mig devices:" in low:
            section, current = "mig", None
            continue
        if "processes:" in low:
            section, current = "processes", None
            continue
        cells = _cells(line)
        if section == "processes":
            if len(cells) == 1 and (m := _PROCESS_ROW_RE.match(cells[0])):
                processes.append(NvidiaSmiProcess(
                    gpu_index=int(m.group("gpu")), pid=int(m.group("pid")), name=m.group("name").strip(),
                    used_memory_mib=int(m.group("mem")) if m.group("mem") else None))
            continue
        if section != "gpus" or len(cells) < 2:
            if line.strip().startswith("+") or not line.strip():
                current = None
            continue
        first = cells[0]
        m = _GPU_ROW_RE.match(first)
        bus = _BUS_ID_RE.search(cells[1])
        if m and bus and re.search(r"[A-Za-z]", m.group("rest")):
            index = int(m.group("index"))
            rest = m.group("rest")
            persistence = None
            if pm := _PERSISTENCE_TAIL_RE.search(rest):
                persistence, rest = pm.group("mode"), rest[: pm.start()]
            current = gpus.setdefault(index, {"index": index, "name": rest.strip() or None,
                                              "bus_id": bus.group("bus"), "persistence_mode": persistence})
            row_in_block = 1
            continue
        if current is None:
            continue
        row_in_block += 1
        if (mem := _MEMORY_CELL_RE.search(cells[1])) and "memory_total_mib" not in current:
            current["memory_used_mib"] = int(mem.group("used"))
            current["memory_total_mib"] = int(mem.group("total"))
        elif row_in_block >= 3 and len(cells) >= 3 and "mig_mode" not in current:
            word = cells[-1].split()[-1] if cells[-1].split() else ""
            if word in ("Enabled", "Disabled"):
                current["mig_mode"] = word
    return [NvidiaSmiGpu(**gpus[i]) for i in sorted(gpus)], tuple(processes)


# --- nvidia-smi -q ----------------------------------------------------------------------------------------


def _read_query(lines: list[str]) -> tuple[list[NvidiaSmiGpu], tuple[NvidiaSmiProcess, ...], int | None]:
    """-q nests by indentation; each value is addressed by its path under its `GPU <bus id>` header."""
    attached: int | None = None
    blocks: list[tuple[str, list[tuple[tuple[str, ...], str]]]] = []
    stack: list[tuple[int, str]] = []
    base = 0
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if m := _QUERY_GPU_RE.match(stripped):
            blocks.append((m.group("bus"), []))
            stack, base = [], indent
            continue
        kv = _QUERY_KV_RE.match(stripped)
        key = (kv.group("key") if kv else stripped).strip()
        value = kv.group("value").strip() if kv else None
        if not blocks or indent <= base:  # top level: the header before the first GPU
            if key.lower() == "attached gpus" and value and value.isascii() and value.isdigit():
                attached = int(value)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(k for _, k in stack) + (key,)
        if value is not None:
            blocks[-1][1].append((tuple(p.lower() for p in path), value))
        stack.append((indent, key))

    gpus: list[NvidiaSmiGpu] = []
    processes: list[NvidiaSmiProcess] = []
    for index, (bus, items) in enumerate(blocks):
        first: dict[tuple[str, ...], str] = {}
        for path, value in items:
            first.setdefault(path, value)

        def get(*path: str) -> str | None:
            value = first.get(path)  # noqa: B023 - called only within this iteration
            return None if value is None or value.strip().lower() in _NULL_WORDS else value.strip()

        gpus.append(NvidiaSmiGpu(
            index=index,
            name=get("product name"),
            bus_id=get("pci", "bus id") or bus,
            memory_total_mib=_mib(get("fb memory usage", "total")),
            memory_used_mib=_mib(get("fb memory usage", "used")),
            mig_mode=get("mig mode", "current"),
            persistence_mode=get("persistence mode"),
            uuid=get("gpu uuid"),
            product_brand=get("product brand"),
            product_architecture=get("product architecture"),
            fabric_state=get("fabric", "state"),
            fabric_status=get("fabric", "status"),
        ))
        pid: int | None = None
        proc: dict[str, str] = {}
        for path, value in [*items, (("processes", "process id"), "")]:
            if path[:1] != ("processes",):
                continue
            if path == ("processes", "process id"):
                if pid is not None:
                    processes.append(NvidiaSmiProcess(index, pid, proc.get("name", ""), _mib(proc.get("used gpu memory"))))
                pid = int(value) if value.isascii() and value.isdigit() else None
                proc = {}
            elif len(path) >= 2 and pid is not None:
                proc[path[-1]] = value
    return gpus, tuple(processes), attached


def _mib(value: str | None) -> int | None:
    m = _MIB_RE.match((value or "").strip())
    return int(m.group("n")) if m else None


# --- nvidia-smi -L and --query-gpu ------------------------------------------------------------------------


def _read_list(lines: list[str]) -> list[NvidiaSmiGpu]:
    gpus: dict[int, NvidiaSmiGpu] = {}
    for line in lines:
        if len(line) < 1000 and (m := _LIST_RE.match(line.strip())):
            index, rest = int(m.group("index")), m.group("rest")
            uuid = _UUID_RE.search(rest)
            name = rest[: uuid.start()].strip() if uuid else rest.strip()
            gpus.setdefault(index, NvidiaSmiGpu(index=index, name=name or None,
                                                uuid=uuid.group("uuid") if uuid else None))
    return [gpus[i] for i in sorted(gpus)]


_CSV_COLUMNS = {
    "index": "index", "name": "name", "gpu_name": "name", "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id",
    "memory.total": "memory_total_mib", "memory.used": "memory_used_mib", "mig.mode.current": "mig_mode",
    "uuid": "uuid", "gpu_uuid": "uuid", "persistence_mode": "persistence_mode",
    "driver_version": "driver_version", "fabric.state": "fabric_state", "fabric.status": "fabric_status",
}


def _csv_header(line: str) -> list[str] | None:
    if len(line) > 2000 or "," not in line:
        return None
    names = [c.split("[", 1)[0].strip().lower() for c in line.split(",")]  # "memory.total [MiB]" -> memory.total
    if len(names) < 2 or not {"name", "gpu_name", "memory.total", "driver_version"} & set(names):
        return None
    return names


def _read_csv(lines: list[str]) -> list[NvidiaSmiGpu] | None:
    """`--query-gpu=index,name,memory.total,… --format=csv` with its header row; `noheader` cannot be read."""
    for at, line in enumerate(lines):
        header = _csv_header(line)
        if header is None:
            continue
        gpus: dict[int, NvidiaSmiGpu] = {}
        for row in lines[at + 1:]:
            values = [v.strip() for v in row.split(",")]
            if len(values) != len(header):
                break
            record: dict[str, str | int | None] = {}
            for col, value in zip(header, values):
                target = _CSV_COLUMNS.get(col)
                if target is None or target == "driver_version" or value.lower() in _NULL_WORDS:
                    continue
                if target == "index":
                    record["index"] = int(value) if value.isascii() and value.isdigit() else None
                elif target.endswith("_mib"):
                    record[target] = _mib(value) if "mib" in value.lower() else (
                        int(value) if value.isascii() and value.isdigit() else None)
                else:
                    record[target] = value
            if record.get("index") is None:
                record["index"] = len(gpus)
            record.setdefault("name", None)
            gpu = NvidiaSmiGpu(**cast(_GpuFields, record))
            gpus.setdefault(gpu.index, gpu)
        return [gpus[i] for i in sorted(gpus)] or None
    return None


def _csv_driver(lines: list[str]) -> str | None:
    for at, line in enumerate(lines):
        header = _csv_header(line)
        if header and "driver_version" in header and at + 1 < len(lines):
            values = [v.strip() for v in lines[at + 1].split(",")]
            if len(values) == len(header):
                value = values[header.index("driver_version")]
                if re.fullmatch(r"[0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?", value):
                    return value
    return None


def _search(pattern: re.Pattern[str], text: str) -> str | None:
    m = pattern.search(text)
    return m.group("v") if m else None
