"""vLLM log reader: every real-world log to its labels, each prefix format and paste mess, OOM phase, fuzzing."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import real_world_missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lib.core.errors import ArtifactError
from k3lib.io.readers.vllm_log import inspect_log, parse_vllm_log

REAL_WORLD = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
LABELS_FILE = REAL_WORLD / "labels.json"
INSPECT_KEYS = {"vllm_version", "non_default_args", "kv_cache_tokens", "max_concurrency", "ready", "engine_dead",
                "oom", "context_rejections", "errors", "ready_line", "startups", "truncated"}


def _real_world_cases() -> list:
    if not LABELS_FILE.exists():
        return [real_world_missing(None, None)]
    labels = json.loads(LABELS_FILE.read_text(encoding="utf-8"))
    return [pytest.param(key, value, id=Path(key).name)
            for key, value in sorted(labels.items()) if key.startswith("logs/")]


@pytest.mark.parametrize(("key", "label"), _real_world_cases())
def test_real_world_log_matches_labels(key: str, label: dict) -> None:
    text = (REAL_WORLD / key).read_text(encoding="utf-8", errors="replace")
    got = inspect_log(text)
    assert set(got) == INSPECT_KEYS
    summary = {
        "vllm_version": got["vllm_version"],
        "kv_cache_tokens": got["kv_cache_tokens"],
        "max_concurrency": got["max_concurrency"],
        "ready": got["ready"],
        "engine_dead": got["engine_dead"],
        "oom_phase": got["oom"]["phase"] if got["oom"] else None,
        "context_rejections": got["context_rejections"],
    }
    assert summary == {k: label[k] for k in summary}
    if got["oom"]:
        oom = got["oom"]
        report = parse_vllm_log(text)
        assert oom["text"] == report.lines[oom["line"] - 1].text
        assert re.search(r"(?i)out of memory|OutOfMemory|memory for the cache|KV cache memory", oom["text"])
        assert oom["lines_before"] == [ln.text for ln in report.lines[max(0, oom["line"] - 21):oom["line"] - 1]]
    json.dumps(got)  # the CLI prints it as JSON


# ---------------------------------------------------------------------------------------------------------------
# A small composed log, decorated the ways vLLM versions and log collectors print it.

_HEAD = "INFO 09-30 14:13:04 [{src}] "
_BODY = [
    ("APIServer", "api_server.py:1896", "vLLM API server version 0.10.2"),
    ("APIServer", "utils.py:328", "non-default args: {'model': 'Qwen/Qwen3-32B', 'max_model_len': 32768, "
                                  "'enable_auto_tool_choice': True, 'tool_call_parser': 'hermes'}"),
    ("EngineCore_DP0", "core.py:76", "Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/Qwen3-32B'"),
    ("Worker_TP3", "gpu_worker.py:298", "Available KV cache memory: 37.06 GiB"),
    ("EngineCore_DP0", "kv_cache_utils.py:864", "GPU KV cache size: 303,616 tokens"),
    ("EngineCore_DP0", "kv_cache_utils.py:868", "Maximum concurrency for 32,768 tokens per request: 9.27x"),
    ("APIServer", None, "Started server process [1]"),
    ("APIServer", None, "Application startup complete."),
    ("APIServer", None, '10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'),
    ("APIServer", "loggers.py:123", "Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
                                    "5.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, Preemptions: 4, "
                                    "GPU KV cache usage: 50.5%, Prefix cache hit rate: 12.5%"),
]


def _line(proc: str | None, src: str | None, msg: str, *, process_tag: bool = True, old_src: bool = False) -> str:
    if src is None:
        head = "INFO:     "
    elif old_src:
        head = f"INFO 09-30 14:13:04 {src}] "
    else:
        head = _HEAD.format(src=src)
    tag = f"({proc} pid=7) " if process_tag and proc else ""
    return tag + head + msg


def _compose(decorate=lambda s: s, eol: str = "\n", **kw) -> str:
    return eol.join(decorate(_line(p, s, m, **kw)) for p, s, m in _BODY) + eol


DECORATIONS = [
    pytest.param({}, id="process-name-prefix"),
    pytest.param({"process_tag": False}, id="plain-bracket-location"),
    pytest.param({"process_tag": False, "old_src": True}, id="plain-bare-location-v06"),
    pytest.param({"eol": "\r\n"}, id="crlf"),
    pytest.param({"decorate": lambda s: "2026-03-01T10:00:00.123456789Z " + s}, id="kubectl-timestamps"),
    pytest.param({"decorate": lambda s: "[pod/vllm-0/vllm] " + s}, id="kubectl-pod-prefix"),
    pytest.param({"decorate": lambda s: "[pod/vllm-0/vllm] 2026-03-01T10:00:00Z " + s}, id="kubectl-prefix-and-ts"),
    pytest.param({"decorate": lambda s: "vllm-1  | " + s}, id="docker-compose-bar"),
    pytest.param({"decorate": lambda s: "\x1b[1;36m" + s.replace(") ", ")\x1b[0;0m ", 1)}, id="ansi-colour"),
    pytest.param({"decorate": lambda s: "[1;36m" + s.replace(") ", ")[0;0m ", 1)}, id="ansi-esc-lost"),
    pytest.param({"decorate": lambda s: "    " + s}, id="markdown-indent"),
    pytest.param({"decorate": lambda s: "vllm-7c9f 12345 " + s}, id="unknown-collector-prefix"),
    pytest.param({"decorate": lambda s: "> " + s}, id="markdown-blockquote"),
    pytest.param({"decorate": lambda s: s.replace(" pid=7)", " pid=7, ip=10.0.0.2)", 1)}, id="ray-worker-prefix"),
]


@pytest.mark.parametrize("options", DECORATIONS)
def test_prefix_formats_and_paste_mess_read_the_same(options: dict) -> None:
    report = parse_vllm_log(_compose(**options))
    assert report.vllm_version == "0.10.2"
    assert report.non_default_args == {"model": "Qwen/Qwen3-32B", "max_model_len": 32768,
                                       "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
    assert report.kv_cache_tokens == 303616
    assert report.max_concurrency == pytest.approx(9.27)
    assert report.ready is True
    assert report.oom is None and report.engine_dead is False
    [stats] = report.stats
    assert (stats.running, stats.waiting, stats.preemptions) == (3, 2, 4)
    assert stats.kv_cache_usage_pct == pytest.approx(50.5)
    assert stats.prefix_cache_hit_rate_pct == pytest.approx(12.5)


def test_cr_only_line_ends() -> None:
    report = parse_vllm_log(_compose(eol="\r"))
    assert report.vllm_version == "0.10.2" and report.ready is True and report.kv_cache_tokens == 303616


def test_kubectl_timestamps_are_kept_per_line() -> None:
    text = _compose(decorate=lambda s: "2026-03-01T10:00:07.5Z " + s)
    report = parse_vllm_log(text)
    assert report.lines[0].collected_at == datetime(2026, 3, 1, 10, 0, 7, 500000, tzinfo=timezone.utc)
    assert report.lines[0].logged_at == "09-30 14:13:04"
    assert report.lines[0].process == "APIServer" and report.lines[0].pid == 7
    assert report.lines[0].source == "api_server.py:1896"
    assert report.lines[0].message == "vLLM API server version 0.10.2"


@pytest.mark.parametrize(("line", "tokens", "concurrency"), [
    pytest.param("GPU KV cache size: 2,042,016 tokens\nMaximum concurrency for 32,768 tokens per request: 1.30x",
                 2042016, 1.30, id="two-lines-le-0.24"),
    pytest.param("GPU KV cache size: 131,472 tokens, Maximum concurrency for 16,384 tokens per request: 8.02x",
                 131472, 8.02, id="one-line-0.28"),
    pytest.param("XPU KV cache size: 65,536 tokens, Maximum concurrency for 8,192 tokens per request: 8.00x",
                 65536, 8.0, id="device-name-0.31"),
    pytest.param("# GPU blocks: 6013, # CPU blocks: 4096\nMaximum concurrency for 16384 tokens per request: 5.87x",
                 None, 5.87, id="v0-blocks-only"),
])
def test_kv_capacity_wordings(line: str, tokens: int | None, concurrency: float) -> None:
    text = "\n".join(f"(EngineCore_DP0 pid=3) INFO 01-01 00:00:00 [kv_cache_utils.py:1] {part}"
                     for part in line.split("\n"))
    got = inspect_log(text)
    assert got["kv_cache_tokens"] == tokens
    assert got["max_concurrency"] == pytest.approx(concurrency)


@pytest.mark.parametrize(("text", "version"), [
    pytest.param("(APIServer pid=1) INFO 02-22 14:16:01 [utils.py:287]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.16.0\r",
                 "0.16.0", id="ascii-logo"),
    pytest.param("(APIServer pid=1) INFO 08-28 00:29:25 [api_utils.py:333] "
                 "vLLM server version 0.28.0, serving model m", "0.28.0", id="plain-server-line-0.16+"),
    pytest.param("INFO 10-05 16:36:42 api_server.py:589] vLLM API server version 0.6.3.post1", "0.6.3.post1",
                 id="api-server-line-v0"),
    pytest.param("(EngineCore_DP0 pid=3) INFO 01-01 00:00:00 [core.py:76] Initializing a V1 LLM engine (v0.9.2) "
                 "with config: model='m'", "0.9.2", id="engine-line-only"),
    pytest.param("INFO 05-23 15:53:18 [metrics.py:357] Avg prompt throughput: 1.0 tokens/s, Running: 3 reqs",
                 None, id="excerpt-without-version"),
])
def test_version_sources(text: str, version: str | None) -> None:
    assert inspect_log(text + "\n")["vllm_version"] == version


_STARTUP = ("(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
            "(EngineCore_DP0 pid=2) INFO 01-01 00:00:01 [gpu_model_runner.py:1] Starting to load model m...\n")
_READY = "(APIServer pid=1) INFO:     Application startup complete.\n"
_TORCH_OOM = ("(EngineCore_DP0 pid=2) ERROR 01-01 00:00:09 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
              "Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.05 GiB of which 85.96 MiB is free.\n")
_DEAD = ("(APIServer pid=1) ERROR 01-01 00:00:10 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
         "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")
_STARTUP_FAIL = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {'EngineCore_DP0': 1}\n")


@pytest.mark.parametrize(("text", "phase", "ready", "dead"), [
    pytest.param(_STARTUP + _TORCH_OOM + _STARTUP_FAIL, "startup", False, False, id="torch-oom-before-ready"),
    pytest.param(_STARTUP + _READY + _TORCH_OOM + _DEAD, "serving", True, True, id="torch-oom-after-ready"),
    pytest.param(_STARTUP + _READY + _DEAD, None, True, True, id="death-without-oom"),
    pytest.param(_STARTUP + _DEAD.replace("EngineDeadError", "MQEngineDeadError") + _STARTUP_FAIL, None, False, False,
                 id="dead-error-during-startup-is-not-engine-death"),
    pytest.param(_STARTUP + "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:09 [core.py:1] ValueError: No available memory "
                 "for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n",
                 "startup", False, False, id="no-memory-for-cache-blocks"),
    pytest.param(_STARTUP + "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:09 [core.py:1] ValueError: To serve at least "
                 "one request with the models's max seq len (131072), (20.00 GiB KV cache is needed, which is larger "
                 "than the available KV cache memory (13.91 GiB).\n", "startup", False, False, id="kv-too-small-v1"),
    pytest.param("INFO 01-01 00:00:00 api_server.py:1] vLLM API server version 0.6.6\nValueError: The model's max "
                 "seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (1000)."
                 " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                 "engine.\n", "startup", False, False, id="kv-too-small-v0"),
    pytest.param(_STARTUP + "(Worker_TP0 pid=5) ERROR 01-01 00:00:03 [gpu_model_runner.py:1] Failed to load model - "
                 "not enough GPU memory. Try lowering --gpu-memory-utilization\n", "startup", False, False,
                 id="weights-do-not-fit"),
    pytest.param(_STARTUP + _READY + "(Worker_TP6 pid=9) ERROR 01-01 00:00:09 [x.py:1] torch.AcceleratorError: CUDA "
                 "error: an illegal memory access was encountered\n" + _DEAD, None, True, True,
                 id="illegal-memory-access-is-not-oom"),
    pytest.param("INFO 10-05 16:37:12 model_runner.py:1419] Capturing cudagraphs for decoding. If out-of-memory "
                 "error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization`.\n" + _READY,
                 None, True, False, id="info-hint-about-oom-is-not-oom"),
    pytest.param('INFO:     1.2.3.4:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
                 "RuntimeError: CUDA error: out of memory\n", "serving", True, False,
                 id="excerpt-ready-by-200-then-oom"),
    pytest.param(_STARTUP + _READY + _DEAD + _STARTUP + _TORCH_OOM, "startup", True, True,
                 id="restart-after-death-then-startup-oom"),
])
def test_oom_phase_and_engine_death(text: str, phase: str | None, ready: bool, dead: bool) -> None:
    got = inspect_log(text)
    assert (got["oom"]["phase"] if got["oom"] else None) == phase
    assert got["ready"] is ready
    assert got["engine_dead"] is dead


def test_oom_keeps_line_number_text_context_and_time() -> None:
    filler = "".join(f"2026-03-01T10:00:{i:02d}Z (EngineCore_DP0 pid=2) INFO 01-01 00:00:{i:02d} [x.py:1] step {i}\n"
                     for i in range(30))
    text = (_READY + filler + "2026-03-01T10:00:41.25Z " + _TORCH_OOM
            + "2026-03-01T10:00:41.26Z " + "(EngineCore_DP0 pid=2) ERROR 01-01 00:00:41 [core.py:710]   tail\n")
    report = parse_vllm_log(text)
    assert report.oom is not None
    assert report.oom.line == 32
    assert "torch.OutOfMemoryError" in report.oom.text
    assert len(report.oom.lines_before) == 20
    assert report.oom.lines_before[-1].endswith("step 29")
    assert report.oom.collected_at == datetime(2026, 3, 1, 10, 0, 41, 250000, tzinfo=timezone.utc)
    assert report.oom.logged_at == "01-01 00:00:09"
    d = report.as_dict()["oom"]
    assert set(d) == {"phase", "line", "text", "lines_before"} and d["line"] == 32


_CTX_SERVER = ("(APIServer pid=1) ERROR 09-30 14:14:44 [serving_chat.py:251] ValueError: This model's maximum context "
               "length is 32768 tokens. However, your request has {n} input tokens. Please reduce the length of the "
               "input messages.\n")
_CTX_ACCESS = '(APIServer pid=1) INFO:     1.2.3.4:5 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
_CTX_CLIENT = ("openai.BadRequestError: Error code: 400 - {{'object': 'error', 'message': \"This model's maximum "
               "context length is 32768 tokens. However, your request has {n} input tokens. Please reduce the length "
               "of the input messages.\", 'type': 'BadRequestError', 'param': None, 'code': 400}}\n")


@pytest.mark.parametrize(("text", "count"), [
    pytest.param(_CTX_SERVER.format(n=40000) + _CTX_ACCESS, 1, id="server-only"),
    pytest.param(_CTX_SERVER.format(n=40000) + _CTX_ACCESS + _CTX_CLIENT.format(n=40000), 1,
                 id="server-and-client-same-request"),
    pytest.param(_CTX_SERVER.format(n=40000) + _CTX_ACCESS + _CTX_SERVER.format(n=50000) + _CTX_ACCESS
                 + _CTX_CLIENT.format(n=50000) + _CTX_CLIENT.format(n=40000), 2, id="two-requests-both-sides"),
    pytest.param(_CTX_CLIENT.format(n=40000) + _CTX_CLIENT.format(n=41000), 2, id="client-only"),
    pytest.param(_CTX_SERVER.format(n=40000) + "The above exception was the direct cause of the following exception:\n"
                 + _CTX_SERVER.format(n=40000).replace("ValueError", "vllm.exceptions.VLLMValidationError")
                 + _CTX_ACCESS, 1, id="chained-traceback-one-request"),
    pytest.param(_CTX_SERVER.format(n=40000) + _CTX_ACCESS + _CTX_SERVER.format(n=40000) + _CTX_ACCESS, 2,
                 id="same-prompt-retried"),
    pytest.param(_CTX_SERVER.format(n=40000) + _CTX_SERVER.format(n=40000).replace("14:14:44", "14:14:52"), 2,
                 id="same-prompt-retried-no-access-log"),
    pytest.param("(APIServer pid=1) DEBUG 08-28 00:31:14 [error_response.py:27] create_error_response called with "
                 "VLLMValidationError: This model's maximum context length is 16384 tokens. However, you requested "
                 "1024 output tokens and your prompt contains 37440 input tokens, for a total of 38464 tokens.\n", 1,
                 id="wording-0.18"),
    pytest.param("ERROR 01-01 00:00:00 [serving_engine.py:1] 'max_tokens' or 'max_completion_tokens' is too large: "
                 "4096. This model's maximum context length is 8192 tokens and your request has 6000 input tokens "
                 "(4096 > 8192 - 6000).\n", 1, id="max-tokens-too-large"),
    pytest.param("WARNING 05-23 15:53:26 [scheduler.py:1] Input prompt (9000 tokens) is too long and exceeds limit "
                 "of 8192\nWARNING 05-23 15:53:27 [scheduler.py:1] Input prompt (9100 tokens) is too long and "
                 "exceeds limit of 8192\n", 2, id="v0-input-prompt-too-long"),
    pytest.param(_CTX_ACCESS * 3, 0, id="bare-400s-are-not-attributed"),
    pytest.param("(APIServer pid=1) INFO 01-01 00:00:00 [logger.py:39] Received request chatcmpl-1: prompt: "
                 "'why does This model\'s maximum context length is 5 tokens appear?'\n", 0,
                 id="prompt-echo-quoting-the-error"),
])
def test_context_rejections_count_requests(text: str, count: int) -> None:
    assert inspect_log(text)["context_rejections"] == count


def test_non_default_args_cut_mid_line_keep_raw_string() -> None:
    text = ("(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.10.2\n"
            "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', 'max_mod")
    report = parse_vllm_log(text)
    assert report.non_default_args == "{'model': 'm', 'max_mod"
    assert report.truncated is True
    assert report.vllm_version == "0.10.2" and report.ready is False


def test_non_default_args_never_evaluate_code() -> None:
    text = ("(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: "
            "{'model': __import__('os').system('false')}\n")
    assert isinstance(inspect_log(text)["non_default_args"], str)


def test_v0_namespace_args_are_read_best_effort() -> None:
    text = ("INFO 10-05 16:36:42 api_server.py:590] args: Namespace(model='m', port=8000, "
            "enable_auto_tool_choice=True, middleware=[], func=<function serve at 0x7f>)\n")
    report = parse_vllm_log(text)
    assert report.non_default_args is None
    assert report.namespace_args is None or report.namespace_args["enable_auto_tool_choice"] is True
    text_ok = "INFO 10-05 16:36:42 api_server.py:590] args: Namespace(model='m', enable_auto_tool_choice=True)\n"
    assert parse_vllm_log(text_ok).namespace_args == {"model": "m", "enable_auto_tool_choice": True}


def test_v0_stats_and_preemption_warnings() -> None:
    text = ("INFO 05-23 15:53:23 [metrics.py:357] Avg prompt throughput: 1400.5 tokens/s, Avg generation "
            "throughput: 1728.7 tokens/s, Running: 29 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: "
            "90.0%, CPU KV cache usage: 0.0%.\n"
            "WARNING 05-23 15:53:26 [scheduler.py:1566] Sequence group chatcmpl-1 is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.\n")
    report = parse_vllm_log(text)
    [stats] = report.stats
    assert (stats.running, stats.waiting, stats.swapped, stats.kv_cache_usage_pct) == (29, 3, 0, 90.0)
    assert report.preemption_warnings == (2,)
    assert report.ready is True  # work in flight proves serving in an excerpt


def test_errors_list_exceptions_once() -> None:
    text = _STARTUP + _READY + _TORCH_OOM * 2 + _DEAD
    errors = inspect_log(text)["errors"]
    assert [e["exception"] for e in errors] == ["torch.OutOfMemoryError",
                                                "vllm.v1.engine.exceptions.EngineDeadError"]
    assert errors[0]["line"] == 4


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"),
    pytest.param("   \n\n", id="blank"),
    pytest.param('{"choices": []}', id="json"),
    pytest.param("Collecting environment information...\nPyTorch version: 2.8.0\n", id="collect-env"),
])
def test_not_a_log_is_an_artifact_error(text: str) -> None:
    with pytest.raises(ArtifactError):
        parse_vllm_log(text)


_FRAGMENTS = [
    "(APIServer pid=1) ", "(EngineCore_DP0 pid=2) ", "INFO 01-01 00:00:00 [x.py:1] ", "ERROR ", "INFO:     ",
    "2026-01-01T00:00:00Z ", "\x1b[1;36m", "\r", "\n", "vLLM API server version 0.", "non-default args: {'a': ",
    "GPU KV cache size: 1,2", " tokens", "Maximum concurrency for 1 tokens per request: 1.x",
    "Application startup complete.", '"POST /v1/chat/completions HTTP/1.1" 200', "CUDA out of memory",
    "EngineDeadError", "This model's maximum context length is 9", "BadRequestError", "Running: 3 reqs",
    "GPU KV cache usage: .%", "Namespace(a=", "█ version 1.2", "Traceback (most recent call last):",
    "ValueError: x", "'max_tokens' is too large", "Input prompt (5 tokens) is too long",
]


def _check_never_crashes(text: str) -> None:
    try:
        got = inspect_log(text)
    except ArtifactError:
        return
    assert set(got) == INSPECT_KEYS
    json.dumps(got, default=str)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_arbitrary_text_never_raises_anything_but_artifact_error(text: str) -> None:
    _check_never_crashes(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=40))
def test_log_shaped_noise_never_raises_anything_but_artifact_error(parts: list[str]) -> None:
    _check_never_crashes("".join(parts))
