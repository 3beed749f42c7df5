"""collect_env reader: the real-world reports read to their labels, pastes in every shape, never a foreign crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lib.core.errors import ArtifactError
from k3lib.io.readers._text import clean_lines, is_shell_prompt
from k3lib.io.readers.collect_env import CollectEnvReport, inspect_collect_env, parse_collect_env

REAL_WORLD = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
FILES = sorted((REAL_WORLD / "collect_env").glob("*.txt")) if REAL_WORLD.is_dir() else []
INSPECT_KEYS = {"vllm_version", "torch_version", "torch_cuda_build", "rocm_build", "cuda_runtime", "driver_version",
                "driver_branch", "gpus", "gpu_count", "platform", "truncated"}


def _labels() -> dict:
    return json.loads((REAL_WORLD / "labels.json").read_text())


def test_real_world_reports_are_present(real_world):
    assert len(FILES) >= 10, f"expected the collect_env samples under {real_world}"


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in FILES])
def test_real_world_report_reads_to_its_labels(path):
    label = _labels()[f"collect_env/{path.name}"]
    text = path.read_text(encoding="utf-8")
    if label.get("not_a_report"):
        with pytest.raises(ArtifactError, match="is not a vLLM collect_env report"):
            inspect_collect_env(text)
        return
    got = inspect_collect_env(text)
    assert set(got) == INSPECT_KEYS
    assert {k: got[k] for k in label} == label
    assert len(got["gpus"]) == got["gpu_count"] or got["platform"] in ("rocm", "cpu", "npu")


# --- a small report in each layout, written for these tests ---------------------------------------------

FLAT = """\
Collecting environment information...
PyTorch version: 2.5.1+cu124
Is debug build: False
CUDA used to build PyTorch: 12.4
ROCM used to build PyTorch: N/A

OS: Ubuntu 22.04.4 LTS (x86_64)
Python version: 3.12.3 (main, Nov  6 2024, 18:32:19) [GCC 13.2.0] (64-bit runtime)
Is CUDA available: True
CUDA runtime version: 12.4.131
GPU models and configuration:
GPU 0: NVIDIA H100 80GB HBM3
GPU 1: NVIDIA H100 80GB HBM3

Nvidia driver version: 580.65.06
cuDNN version: Could not collect

Versions of relevant libraries:
[pip3] nvidia-cublas-cu12==12.4.5.8
[pip3] nvidia-nccl-cu12==2.21.5
[pip3] torch==2.5.1
[pip3] vllm==0.7.3
[conda] Could not collect
ROCM Version: Could not collect
Neuron SDK Version: N/A
vLLM Version: 0.7.3
vLLM Build Flags:
CUDA Archs: Not Set; ROCm: Disabled; Neuron: Disabled
GPU Topology:
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV18\t0-63\t0
GPU1\tNV18\t X \t0-63\t0

Legend:
  NV#  = Connection traversing a bonded set of # NVLinks

CUDA_VERSION=12.4.1
NVIDIA_VISIBLE_DEVICES=all
"""

SECTIONED = """\
Collecting environment information...
==============================
        System Info
==============================
OS                           : Ubuntu 24.04.2 LTS (x86_64)

==============================
       PyTorch Info
==============================
PyTorch version              : 2.9.0+cu130
Is debug build               : False
CUDA used to build PyTorch   : 13.0
ROCM used to build PyTorch   : N/A

==============================
       CUDA / GPU Info
==============================
Is CUDA available            : True
CUDA runtime version         : 13.0.88
GPU models and configuration :
GPU 0: NVIDIA B200
GPU 1: NVIDIA B200
GPU 2: NVIDIA B200
GPU 3: NVIDIA B200

Nvidia driver version        : 580.95.05

==============================
Versions of relevant libraries
==============================
[pip3] nvidia-cublas-cu13==13.0.2.14
[pip3] torch==2.9.0+cu130

==============================
         vLLM Info
==============================
vLLM Version                 : 0.12.0rc1.dev7+gabc1234 (git sha: abc1234)
vLLM Build Flags:
  CUDA Archs: 10.0a; ROCm: Disabled
GPU Topology:
  Could not collect
"""

EXPECTED_FLAT = {"vllm_version": "0.7.3", "torch_version": "2.5.1+cu124", "torch_cuda_build": "12.4",
                 "rocm_build": None, "cuda_runtime": "12.4.131", "driver_version": "580.65.06",
                 "driver_branch": 580, "gpus": ["NVIDIA H100 80GB HBM3"] * 2, "gpu_count": 2, "platform": "cuda",
                 "truncated": False}
EXPECTED_SECTIONED = {"vllm_version": "0.12.0rc1.dev7+gabc1234", "torch_version": "2.9.0+cu130",
                      "torch_cuda_build": "13.0", "rocm_build": None, "cuda_runtime": "13.0.88",
                      "driver_version": "580.95.05", "driver_branch": 580, "gpus": ["NVIDIA B200"] * 4,
                      "gpu_count": 4, "platform": "cuda", "truncated": False}


def _indent(text: str, pad: str = "    ") -> str:
    return "".join(pad + ln if ln.strip() else ln for ln in text.splitlines(keepends=True))


def _colour(text: str) -> str:
    return text.replace("PyTorch version", "\x1b[1mPyTorch version\x1b[0m").replace(
        "NVIDIA H100", "\x1b[32mNVIDIA H100\x1b[0m").replace("NVIDIA B200", "\x1b[32mNVIDIA B200\x1b[0m")


def _kubectl(text: str) -> str:
    return "".join(f"2026-03-01T10:00:{i % 60:02d}.123456789Z {ln}" for i, ln in enumerate(text.splitlines(True)))


TRANSFORMS = [
    pytest.param(lambda t: t, id="as-printed"),
    pytest.param(lambda t: t.replace("\n", "\r\n"), id="crlf"),
    pytest.param(_colour, id="ansi-colour"),
    pytest.param(_indent, id="markdown-indent-4"),
    pytest.param(lambda t: _indent(t, "\t"), id="tab-indent"),
    pytest.param(lambda t: "$ python collect_env.py\n" + t, id="shell-prompt"),
    pytest.param(lambda t: "root@vllm-0:/vllm-workspace# vllm collect-env\n" + t, id="root-prompt"),
    pytest.param(lambda t: "Here is my env:\n\n```text\n" + t + "```\n", id="markdown-fence"),
    pytest.param(lambda t: "<details>\n<summary>The output of <code>python collect_env.py</code></summary>\n\n```"
                           "\n" + t + "```\n</details>\n", id="issue-template"),
    pytest.param(lambda t: "".join("> " + ln for ln in t.splitlines(True)), id="blockquote"),
    pytest.param(_kubectl, id="kubectl-timestamps"),
    pytest.param(lambda t: "WARNING 03-01 10:00:00 [__init__.py:221] No platform detected, vLLM is running on "
                           "UnspecifiedPlatform\n" + t, id="warning-line"),
    pytest.param(lambda t: "\ufeff" + t.replace(" : ", "\u00a0: "), id="bom-nbsp"),
]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(("text", "expected"), [pytest.param(FLAT, EXPECTED_FLAT, id="flat"),
                                                pytest.param(SECTIONED, EXPECTED_SECTIONED, id="sectioned")])
def test_paste_shapes_read_the_same(text, expected, transform):
    assert inspect_collect_env(transform(text)) == expected


def test_report_extras_are_kept():
    report = parse_collect_env(FLAT)
    assert isinstance(report, CollectEnvReport)
    assert report.layout == "flat"
    assert report.os == "Ubuntu 22.04.4 LTS (x86_64)"
    assert report.python_version == "3.12.3"
    assert report.cuda_available is True
    assert report.package_version("vllm") == "0.7.3"
    assert report.package_version("NVIDIA_NCCL_CU12") == "2.21.5"
    assert report.cuda_library_majors == (12,)
    assert report.nvlink is True and report.nvlink_counts == (18,)
    assert report.topology_gpu_count == 2
    assert report.env_dict["CUDA_VERSION"] == "12.4.1"
    sectioned = parse_collect_env(SECTIONED)
    assert sectioned.layout == "sectioned"
    assert sectioned.vllm_git_sha == "abc1234"
    assert sectioned.cuda_library_majors == (13,)
    assert sectioned.cuda_archs == "10.0a"
    assert sectioned.nvlink is None  # no topology printed


def _cut(text: str, marker: str) -> str:
    return text[: text.index(marker)]


CASES = [
    # A paste that ends on a GPU line may have been cut inside the list: the count is unknown, not 2.
    pytest.param(_cut(FLAT, "Nvidia driver"), {"vllm_version": None, "driver_version": None, "gpu_count": None,
                                               "platform": "cuda", "truncated": True}, id="cut-after-gpus"),
    pytest.param(_cut(FLAT, "GPU 1:") + "GPU 1: NVIDIA H1",
                 {"gpu_count": None, "vllm_version": None, "truncated": True},
                 id="cut-mid-line"),
    pytest.param(_cut(SECTIONED, "==============================\n       CUDA"),
                 {"torch_cuda_build": "13.0", "gpu_count": None, "gpus": [], "platform": "cuda"}, id="cut-before-gpu"),
    pytest.param(FLAT.replace("580.65.06", "Could not collect").replace("12.4.131", "Could not collect"),
                 {"driver_version": None, "driver_branch": None, "cuda_runtime": None}, id="could-not-collect"),
    pytest.param(FLAT.replace("GPU 1: NVIDIA H100 80GB HBM3\n", "  MIG 3g.40gb Device 0: (UUID: MIG-1a2b)\n"
                                                            "GPU 1: NVIDIA H100 80GB HBM3\n"),
                 {"gpu_count": 2}, id="mig-lines-not-counted"),
    pytest.param(FLAT.replace("vLLM Version: 0.7.3", "vLLM Version: 0.5.4@4db5176d9758b720b05460c50ace3c01026eb158"),
                 {"vllm_version": "0.5.4"}, id="old-at-sha"),
    pytest.param(FLAT.replace("GPU models and configuration:\nGPU 0: NVIDIA H100 80GB HBM3\nGPU 1: NVIDIA H100 80GB "
                              "HBM3\n", "GPU models and configuration: Could not collect\n"),
                 {"gpu_count": 2, "gpus": []}, id="gpus-from-topology"),
    pytest.param("PyTorch version: 2.6.0+hpu.1.21.0\nIs debug build: False\nCUDA used to build PyTorch: None\n"
                 "ROCM used to build PyTorch: N/A\nvLLM Version: 0.9.0.1+gaudi000\n",
                 {"platform": "unknown", "gpu_count": None, "torch_cuda_build": None}, id="unknown-platform-hpu"),
    pytest.param("PyTorch version: 2.6.0\nIs debug build: False\n", {"platform": "unknown"}, id="unknown-too-short"),
    pytest.param("PyTorch version: 2.5.1\nIs debug build: False\nCUDA used to build PyTorch: None\n"
                 "ROCM used to build PyTorch: N/A\nIs CUDA available: False\nCUDA runtime version: No CUDA\n"
                 "GPU models and configuration: No CUDA\nNvidia driver version: No CUDA\n"
                 "[pip3] torch==2.5.1\n[pip3] torch-npu==2.5.1\nvLLM Version: 0.9.1\nvLLM Ascend Version: 0.9.1\n"
                 "CANN:\npackage_name=Ascend-cann-toolkit\nversion=8.1.RC1\n",
                 {"platform": "npu", "gpu_count": 0, "torch_cuda_build": None, "driver_version": None}, id="ascend-npu"),
    pytest.param("PyTorch version: 2.8.0+cpu\nIs debug build: False\nCUDA used to build PyTorch: None\n"
                 "GPU models and configuration: No CUDA\n[pip3] torch-xla==2.8.0\n[pip3] libtpu==0.0.17\n"
                 "vLLM Version: 0.10.1\nPJRT_DEVICE=TPU\n", {"platform": "tpu", "gpu_count": 0}, id="tpu"),
    pytest.param("PyTorch version: 2.5.1+cu121\nIs debug build: False\nCUDA used to build PyTorch: 12.1\n"
                 "Is CUDA available: False\nGPU models and configuration: No CUDA\n"
                 "Neuron SDK Version: (0, 'instance-type: trn1.2xlarge\ninstance-id: i-0abc\n+--------+\n', '')\n"
                 "vLLM Version: 0.6.4+neuron215\n", {"platform": "neuron", "gpu_count": 0}, id="neuron"),
    pytest.param("PyTorch version: 2.7.0+rocm6.3\nIs debug build: False\nCUDA used to build PyTorch: N/A\n"
                 "ROCM used to build PyTorch: 6.3.42131-fa1d09cbd\nGPU models and configuration: AMD Instinct MI300X "
                 "(gfx942:sramecc+:xnack-)\nNvidia driver version: Could not collect\nvLLM Version: 0.8.4\n",
                 {"platform": "rocm", "rocm_build": "6.3.42131-fa1d09cbd", "gpu_count": None,
                  "gpus": ["AMD Instinct MI300X (gfx942:sramecc+:xnack-)"]}, id="rocm-without-topology"),
    pytest.param("PyTorch version: 2.6.0+cpu\nIs debug build: False\nCUDA used to build PyTorch: None\n"
                 "Is CUDA available: False\nvLLM Version: 0.8.0+cpu\n", {"platform": "cpu", "gpu_count": 0},
                 id="cpu-build"),
    pytest.param("PyTorch version: 2.6.0\nIs debug build: False\nCUDA used to build PyTorch: None\n"
                 "ROCM used to build PyTorch: N/A\nvLLM Version: 0.8.5.dev12+g1a2b3c4d\n",
                 {"platform": "cpu", "vllm_version": "0.8.5.dev12+g1a2b3c4d"}, id="cpu-plain-torch-dev-vllm"),
    pytest.param("(APIServer pid=7) INFO 05-17 17:40:18 [__init__.py:248] Automatically detected platform rocm.\n"
                 "PyTorch version: 2.7.0\nIs debug build: False\n", {"platform": "rocm"},
                 id="detected-platform-behind-process-prefix"),
    pytest.param(SECTIONED.replace("2.9.0+cu130", "2.7.1+rocm6.3").replace("CUDA used to build PyTorch   : 13.0",
                                                                           "CUDA used to build PyTorch   : N/A")
                 .replace("ROCM used to build PyTorch   : N/A", "ROCM used to build PyTorch   : 6.3.42134-a9a80e791")
                 .replace("Nvidia driver version        : 580.95.05", "Nvidia driver version        : Could not collect")
                 .replace("CUDA runtime version         : 13.0.88", "CUDA runtime version         : Could not collect")
                 .replace("GPU models and configuration :\n" + "".join(f"GPU {i}: NVIDIA B200\n" for i in range(4)),
                          "GPU models and configuration : AMD Instinct MI325X (gfx942:sramecc+:xnack-)\n")
                 .replace("GPU Topology:\n  Could not collect\n",
                          "GPU Topology:\n============ ROCm System Management Interface ============\n"
                          "============ Weight between two GPUs ============\n"
                          "       GPU0   GPU1   GPU2   GPU3   GPU4   GPU5\n"
                          + "".join(f"GPU{i}   0   15   15   15   15   15\n" for i in range(6))
                          + "\n============ Link Type between two GPUs ============\n"
                          "       GPU0   GPU1   GPU2   GPU3   GPU4   GPU5\n"
                          + "".join(f"GPU{i}   0   XGMI   XGMI   XGMI   XGMI   XGMI\n" for i in range(6))
                          + "============ End of ROCm SMI Log ============\n"),
                 {"platform": "rocm", "gpu_count": 6, "driver_version": None, "cuda_runtime": None,
                  "torch_cuda_build": None, "rocm_build": "6.3.42134-a9a80e791",
                  "gpus": ["AMD Instinct MI325X (gfx942:sramecc+:xnack-)"]}, id="rocm-sectioned-topology"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_partial_and_unusual_reports(text, expected):
    got = inspect_collect_env(text)
    assert {k: got[k] for k in expected} == expected


NOT_REPORTS = [
    pytest.param("", id="empty"),
    pytest.param("hello world\n", id="prose"),
    pytest.param("PyTorch version: 2.5.1\n", id="one-label-only"),
    pytest.param("Traceback (most recent call last):\n  File \"collect_env.py\", line 9, in <module>\n"
                 "    import torch\nModuleNotFoundError: No module named 'torch'\n", id="traceback"),
    pytest.param("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |\n", id="nvidia-smi"),
    pytest.param('{"PyTorch version": "2.5.1", "vLLM Version": "0.7.3"}', id="json"),
]


@pytest.mark.parametrize("text", NOT_REPORTS)
def test_not_a_report_raises_artifact_error_with_a_hint(text):
    with pytest.raises(ArtifactError) as info:
        parse_collect_env(text, source="env.txt")
    line = info.value.one_line()
    assert line.startswith("env.txt: ")
    assert "is not a vLLM collect_env report" in line and "'PyTorch version:'" in line
    assert "\n" not in line


def test_traceback_message_names_the_failure():
    text = "$ python collect_env.py\nTraceback (most recent call last):\n  File \"x.py\", line 1\n" \
           "ImportError: libcudnn.so.9: cannot open shared object file\n"
    with pytest.raises(ArtifactError, match="collect_env itself failed.*libcudnn"):
        inspect_collect_env(text)


_FRAGMENTS = [ln for ln in (FLAT + SECTIONED).splitlines()] + ["GPU 99999999999: x", "vLLM Version: (git sha: )",
                                                               "Nvidia driver version: 9" * 3, "GPU Topology:",
                                                               "Neuron SDK Version: (", "[pip3] ==", "\x1b[", "٣"]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400),
                 st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=40)), max_size=40)
                 .map("\n".join)))
def test_arbitrary_text_raises_only_artifact_error(text):
    try:
        got = inspect_collect_env(text)
    except ArtifactError as exc:
        assert exc.one_line()
        return
    assert set(got) == INSPECT_KEYS
    assert got["platform"] in ("cuda", "rocm", "cpu", "xpu", "tpu", "npu", "neuron", "unknown")
    assert got["driver_branch"] is None or isinstance(got["driver_branch"], int)
    # every GPU counted stands on a line of its own ("GPU 3: …", a topology row, ROCm's one device name)
    assert got["gpu_count"] is None or (type(got["gpu_count"]) is int
                                        and 0 <= got["gpu_count"] <= len(text.splitlines())), got["gpu_count"]
    json.dumps(got)


# --- the shared paste-cleaning helpers the readers start from ---------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    # Only LF ends a line (as `grep -n` and an editor number them); after a lone CR the terminal shows "c".
    pytest.param("a\r\nb\rc", ["a", "c"], id="line-ends"),
    pytest.param("a\rb\rc", ["a", "b", "c"], id="old-mac-line-ends"),
    pytest.param("\x1b[32mINFO\x1b[0m x\n[1;31mERR[0m y", ["INFO x", "ERR y"], id="ansi-and-orphan-sgr"),
    pytest.param("    a\n      b\n\n    c", ["a", "  b", "", "c"], id="dedent-keeps-inner-indent"),
    pytest.param("```text\na\n```", ["a"], id="fence"),
    pytest.param("2026-01-01T00:00:00.1Z a\n2026-01-01T00:00:01Z   b", ["a", "  b"], id="kubectl-timestamp"),
    pytest.param("2026-01-01T00:00:00Z (task, pid=3) a\n2026-01-01T00:00:00Z (task, pid=3) b", ["a", "b"],
                 id="stacked-prefixes"),
    pytest.param("vllm-1  | a\nvllm-1  | b", ["a", "b"], id="compose-prefix"),
    pytest.param("[pod/vllm-0/vllm] a\n[pod/vllm-0/vllm] b", ["a", "b"], id="kubectl-pod-prefix"),
    pytest.param("[pip3] torch==2.5.1\nGPU 0: x", ["[pip3] torch==2.5.1", "GPU 0: x"], id="no-false-prefix"),
])
def test_clean_lines(raw, expected):
    assert clean_lines(raw) == expected


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param("$ python collect_env.py", True, id="dollar"),
    pytest.param("ubuntu@gpu-3:~$ nvidia-smi", True, id="user-host"),
    pytest.param("root@5332b313b76a:/vllm-workspace# vllm collect-env", True, id="root"),
    pytest.param("(venv) $ vllm collect-env", True, id="venv"),
    pytest.param("PS C:\\Users\\me> nvidia-smi", True, id="powershell"),
    pytest.param("PyTorch version: 2.5.1", False, id="report-line"),
    pytest.param("GPU0\t X \tNV18", False, id="topology-row"),
])
def test_is_shell_prompt(line, expected):
    assert is_shell_prompt(line) is expected
