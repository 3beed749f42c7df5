"""nvidia-smi reader: the real-world outputs read to their labels, table/-q/-L/csv layouts, MIG, fabric manager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lib.core.errors import ArtifactError
from k3lib.io.readers.nvidia_smi import NvidiaSmiReport, inspect_nvidia_smi, parse_nvidia_smi

REAL_WORLD = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
FILES = sorted((REAL_WORLD / "nvidia_smi").glob("*.txt")) if REAL_WORLD.is_dir() else []


def _as_labels(got: dict) -> dict:
    """The inspect shape mapped onto labels.json's keys for nvidia_smi files."""
    return {"driver_version": got["driver_version"], "driver_branch": got["driver_branch"],
            "cuda_version": got["cuda_version"], "gpu_count": len(got["gpus"]),
            "gpu_names": [g["name"] for g in got["gpus"]]}


def test_real_world_outputs_are_present(real_world):
    assert len(FILES) >= 4, f"expected the nvidia_smi samples under {real_world}"


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in FILES])
def test_real_world_output_reads_to_its_labels(path):
    label = json.loads((REAL_WORLD / "labels.json").read_text())[f"nvidia_smi/{path.name}"]
    got = inspect_nvidia_smi(path.read_text(encoding="utf-8"))
    assert set(got) == {"driver_version", "driver_branch", "cuda_version", "gpus"}
    assert {k: v for k, v in _as_labels(got).items() if k in label} == label
    for gpu in got["gpus"]:
        assert set(gpu) == {"index", "name", "memory_total_mib", "memory_used_mib"}
        assert gpu["memory_total_mib"] is None or gpu["memory_used_mib"] <= gpu["memory_total_mib"]
    assert [g["index"] for g in got["gpus"]] == list(range(len(got["gpus"])))


# --- outputs composed for these tests ---------------------------------------------------------------------

TABLE_MIG = """\
Tue Mar  3 09:12:44 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                   On |
| N/A   33C    P0             62W /  400W |     213MiB /  81920MiB |     N/A      Default |
|                                         |                        |              Enabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA RTX 6000 Ada Gene...    Off |   00000000:0F:00.0 Off |                  Off |
| 30%   41C    P8             21W /  300W |       4MiB /  49140MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |
|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |
|==================+==================================+===========+=======================|
|  0    1   0   0  |             107MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |
|  0    2   0   1  |             106MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |
+------------------+----------------------------------+-----------+-----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0    1    0            41233      C   VLLM::EngineCore                        88MiB |
+-----------------------------------------------------------------------------------------+
"""

TABLE_OLD_WINDOWS = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 472.12       Driver Version: 472.12       CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name            TCC/WDDM | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA GeForce ... WDDM  | 00000000:01:00.0  On |                  N/A |
| 30%   45C    P8    12W / 170W |    812MiB / 12288MiB |      3%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
"""

QUERY_FABRIC = """\
==============NVSMI LOG==============

Timestamp                                 : Tue Mar  3 09:12:44 2026
Driver Version                            : 580.65.06
CUDA Version                              : 13.0

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Architecture                  : Hopper
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Fabric
        State                             : Completed
        Status                            : Success
    PCI
        Bus Id                            : 00000000:18:00.0
    FB Memory Usage
        Total                             : 81559 MiB
        Reserved                          : 328 MiB
        Used                              : 71000 MiB
        Free                              : 10230 MiB
    BAR1 Memory Usage
        Total                             : 131072 MiB
        Used                              : 1 MiB

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Architecture                  : Hopper
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Fabric
        State                             : In Progress
        Status                            : N/A
    FB Memory Usage
        Total                             : 81559 MiB
        Used                              : 0 MiB
"""

LIST = """\
$ nvidia-smi -L
GPU 0: NVIDIA H200 (UUID: GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000000)
  MIG 3g.71gb     Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)
GPU 1: NVIDIA H200 (UUID: GPU-0f1e2d3c-aaaa-bbbb-cccc-000000000001)
"""

CSV = """\
index, name, driver_version, memory.total [MiB], memory.used [MiB], pci.bus_id
0, NVIDIA L40S, 570.133.20, 46068 MiB, 1 MiB, 00000000:4F:00.0
1, NVIDIA L40S, 570.133.20, 46068 MiB, 40 MiB, 00000000:52:00.0
"""


def _indent(text: str) -> str:
    return "".join("    " + ln if ln.strip() else ln for ln in text.splitlines(keepends=True))


SHAPES = [
    pytest.param(lambda t: t, id="as-printed"),
    pytest.param(lambda t: t.replace("\n", "\r\n"), id="crlf"),
    pytest.param(_indent, id="markdown-indent-4"),
    pytest.param(lambda t: "ubuntu@gpu-07:~$ nvidia-smi\n" + t, id="shell-prompt"),
    pytest.param(lambda t: "```console\n" + t + "```\n", id="fence"),
    pytest.param(lambda t: "".join(f"(task, pid=42) {ln}" for ln in t.splitlines(True)), id="ray-prefix"),
    pytest.param(lambda t: "".join(f"2026-03-03T09:12:{i % 60:02d}.5Z {ln}" for i, ln in enumerate(t.splitlines(True))),
                 id="kubectl-timestamps"),
    pytest.param(lambda t: t.replace("NVIDIA", "\x1b[1mNVIDIA\x1b[0m"), id="ansi-colour"),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_mig_table_in_every_paste_shape(shape):
    report = parse_nvidia_smi(shape(TABLE_MIG))
    assert report.layout == "table"
    assert report.to_inspect() == {
        "driver_version": "580.65.06", "driver_branch": 580, "cuda_version": "13.0",
        "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_used_mib": 213},
                 {"index": 1, "name": "NVIDIA RTX 6000 Ada Gene...", "memory_total_mib": 49140,
                  "memory_used_mib": 4}]}
    assert [g.mig_mode for g in report.gpus] == ["Enabled", None]
    assert [g.bus_id for g in report.gpus] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert [(p.gpu_index, p.pid, p.name, p.used_memory_mib) for p in report.processes] == [
        (0, 41233, "VLLM::EngineCore", 88)]


@pytest.mark.parametrize("shape", SHAPES)
def test_query_with_fabric_manager_in_every_paste_shape(shape):
    report = parse_nvidia_smi(shape(QUERY_FABRIC))
    assert isinstance(report, NvidiaSmiReport)
    assert (report.layout, report.driver_branch, report.cuda_version, report.attached_gpus) == ("query", 580, "13.0", 2)
    assert [(g.index, g.name, g.memory_total_mib, g.memory_used_mib) for g in report.gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 81559, 71000), (1, "NVIDIA H100 80GB HBM3", 81559, 0)]
    assert [(g.fabric_state, g.fabric_status) for g in report.gpus] == [("Completed", "Success"), ("In Progress", None)]
    assert [g.mig_mode for g in report.gpus] == ["Disabled", "Disabled"]
    assert report.gpus[0].product_architecture == "Hopper"
    assert [g.bus_id for g in report.gpus] == ["00000000:18:00.0", "00000000:2A:00.0"]


CASES = [
    pytest.param(TABLE_OLD_WINDOWS, {"driver_version": "472.12", "driver_branch": 472, "cuda_version": "11.4",
                                     "gpus": [{"index": 0, "name": "NVIDIA GeForce ...", "memory_total_mib": 12288,
                                               "memory_used_mib": 812}]}, id="old-narrow-windows"),
    pytest.param(LIST, {"driver_version": None, "driver_branch": None, "cuda_version": None,
                        "gpus": [{"index": i, "name": "NVIDIA H200", "memory_total_mib": None,
                                  "memory_used_mib": None} for i in (0, 1)]}, id="list-L-with-mig"),
    pytest.param(CSV, {"driver_version": "570.133.20", "driver_branch": 570, "cuda_version": None,
                       "gpus": [{"index": 0, "name": "NVIDIA L40S", "memory_total_mib": 46068, "memory_used_mib": 1},
                                {"index": 1, "name": "NVIDIA L40S", "memory_total_mib": 46068,
                                 "memory_used_mib": 40}]}, id="query-gpu-csv"),
    pytest.param(TABLE_MIG[: TABLE_MIG.index("|   1  NVIDIA RTX")],
                 {"driver_version": "580.65.06", "driver_branch": 580, "cuda_version": "13.0",
                  "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
                            "memory_used_mib": 213}]}, id="cut-after-first-gpu"),
    pytest.param(TABLE_MIG[: TABLE_MIG.index("| N/A   33C")],
                 {"driver_version": "580.65.06", "driver_branch": 580, "cuda_version": "13.0",
                  "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": None,
                            "memory_used_mib": None}]}, id="cut-mid-gpu"),
    pytest.param(TABLE_MIG.replace("213MiB /  81920MiB", "Not Supported     "),
                 {"driver_version": "580.65.06", "driver_branch": 580, "cuda_version": "13.0",
                  "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": None,
                            "memory_used_mib": None},
                           {"index": 1, "name": "NVIDIA RTX 6000 Ada Gene...", "memory_total_mib": 49140,
                            "memory_used_mib": 4}]}, id="memory-not-supported"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_other_layouts_and_partial_outputs(text, expected):
    assert inspect_nvidia_smi(text) == expected


def test_driver_failure_is_a_report_with_an_error():
    text = ("$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n")
    report = parse_nvidia_smi(text)
    assert report.gpus == () and report.driver_version is None
    assert report.error is not None and "couldn't communicate" in report.error


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"),
    pytest.param("bash: nvidia-smi: command not found\n", id="command-not-found"),
    pytest.param("PyTorch version: 2.5.1\nvLLM Version: 0.7.3\nNvidia driver version: 580.65.06\n"
                 "GPU models and configuration:\nGPU 0: NVIDIA H200\n", id="collect-env"),
    pytest.param("| a | b |\n| 1 | 2 |\n", id="markdown-table"),
])
def test_not_nvidia_smi_raises_artifact_error(text):
    with pytest.raises(ArtifactError, match="is not nvidia-smi output") as info:
        parse_nvidia_smi(text, source="smi.txt")
    assert info.value.one_line().startswith("smi.txt: ")


_FRAGMENTS = (TABLE_MIG + QUERY_FABRIC + LIST + CSV).splitlines() + [
    "|   7  X  On  | 0000:00:00.0 |", "| 99999999999MiB / 1MiB |", "GPU 00000000:00:00.0", "        Total : 12 MiB",
    "index, name", "٣, x", "|", "||", "Driver Version: 9.9"]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400),
                 st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=40)), max_size=40)
                 .map("\n".join)))
def test_arbitrary_text_raises_only_artifact_error(text):
    try:
        got = inspect_nvidia_smi(text)
    except ArtifactError as exc:
        assert exc.one_line()
        return
    assert set(got) == {"driver_version", "driver_branch", "cuda_version", "gpus"}
    assert len({g["index"] for g in got["gpus"]}) == len(got["gpus"])
    json.dumps(got)
