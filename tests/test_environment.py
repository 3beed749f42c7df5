"""Compatibility-chain rules on real-world artifacts and small composed texts: driver branch, CUDA build against
nvidia-smi's CUDA, version range, flags (log and behaviour), disagreement between sources, the evidence sheet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lib.axes.environment import (RULES, SourceText, ToolChoiceProbe, classify_tool_probe, environment_table,
                                    evaluate, in_range, parse_flag, parse_image_inspect, parse_version, read_sources,
                                    sources_from_texts, table_rows)
from k3lib.axes.environment.container import check_build_method, check_cuda_build, check_image
from k3lib.axes.environment.engine import check_flags, check_prefix_caching, check_version
from k3lib.axes.environment.host import check_driver, check_fabric, check_gpus, check_host_container
from k3lib.axes.environment.startup import check_startup
from k3lib.axes.environment.values import cuda_major_of_tag
from k3lib.axes.environment.sources import AUTO_TOOL_CHOICE_400
from k3lib.core.errors import ArtifactError
from k3lib.core.outcomes import rule_for
from k3lib.core.params import EnvironmentParams, RecipeParams

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real-world"
K3 = RecipeParams(name="kimi-k3", vllm_min="0.27.1", cuda_major=13, driver_branch_min=580,
                  required_flags=("--enable-auto-tool-choice", "--tool-call-parser kimi_k3",
                                  "--reasoning-parser kimi_k3"))
ENV = EnvironmentParams()


def real(rel: str) -> str:
    return (REAL / rel).read_text(encoding="utf-8", errors="replace")


def log_with(args: dict, *, version: str = "0.33.0", tail: str = "") -> str:
    """A composed V1 startup log (0.33 formats) whose non-default args are `args`."""
    p = "(APIServer pid=1) INFO 11-30 10:00:0{} [{}] {}\n"
    return (p.format(0, "startup.py:38", f"vLLM server version {version}, serving model moonshotai/Kimi-K3")
            + p.format(1, "startup.py:96", f"non-default args: {args!r}")
            + tail
            + p.format(5, "entry.py:139", "Starting vLLM server on http://0.0.0.0:8000")
            + "(APIServer pid=1) INFO:     Application startup complete.\n")


K3_ARGS = {"model": "moonshotai/Kimi-K3", "tensor_parallel_size": 8, "enable_auto_tool_choice": True,
           "tool_call_parser": "kimi_k3", "reasoning_parser": "kimi_k3"}


def query_smi(states: list[tuple[str, str]], name: str = "NVIDIA H100 80GB HBM3", driver: str = "580.82.07") -> str:
    """A composed `nvidia-smi -q` with one Fabric block per GPU."""
    gpus = "".join(f"""
GPU 00000000:{18 + i:02X}:00.0
    Product Name                          : {name}
    Fabric
        State                             : {state}
        Status                            : {status}
    FB Memory Usage
        Total                             : 81559 MiB
        Used                              : 0 MiB
""" for i, (state, status) in enumerate(states))
    return (f"==============NVSMI LOG==============\n\nDriver Version                            : {driver}\n"
            f"CUDA Version                              : 13.0\n\nAttached GPUs                             : "
            f"{len(states)}\n{gpus}")


# ---------------------------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("text, public", [
    pytest.param("0.6.3.post2.dev174+g5b8a1fde", "0.6.3.post2.dev174", id="post-dev-git"),
    pytest.param("0.7.2+cpu", "0.7.2", id="cpu-local"),
    pytest.param("0.11.1rc2.dev45+g3f8e2d1a9", "0.11.1rc2.dev45", id="rc-dev-git"),
    pytest.param("v0.33.0", "0.33.0", id="v-prefix"),
    pytest.param("not a version", None, id="garbage"),
])
def test_parse_version_reads_what_vllm_prints(text, public):
    v = parse_version(text)
    assert (v.public if v else None) == public


@pytest.mark.parametrize("version, low, high, ok", [
    pytest.param("0.27.1", "0.27.1", None, True, id="at-min"),
    pytest.param("0.27.0", "0.27.1", None, False, id="below-min"),
    pytest.param("0.27.1rc1", "0.27.1", None, False, id="rc-of-min-is-below"),
    pytest.param("0.27.1+cu129", "0.27.1", None, True, id="local-tag-ignored"),
    pytest.param("0.30.0", "0.27.1", "0.30", False, id="max-exclusive"),
    pytest.param("0.29.9", "0.27.1", "0.30", True, id="under-max"),
    pytest.param("0.28.0.dev12+g1234567", "0.27.1", None, True, id="dev-above-min"),
])
def test_version_range(version, low, high, ok):
    assert in_range(parse_version(version), low, high) is ok


@pytest.mark.parametrize("text, major", [
    pytest.param("2.9.1+cu130", 13, id="torch-cu130"), pytest.param("2.8.0+cu129", 12, id="torch-cu129"),
    pytest.param("0.6.1.post2+cu118", 11, id="vllm-cu118"), pytest.param("v0.33.0-cu129", 12, id="image-tag"),
    pytest.param("2.5.1+cpu", None, id="cpu"), pytest.param("2.6.0+rocm6.2", None, id="rocm"),
])
def test_cuda_major_of_wheel_and_image_tags(text, major):
    assert cuda_major_of_tag(text) == major


@pytest.mark.parametrize("flag, parsed", [
    pytest.param("--tool-call-parser kimi_k3", ("tool_call_parser", "kimi_k3"), id="with-value"),
    pytest.param("--tool-call-parser=kimi_k3", ("tool_call_parser", "kimi_k3"), id="equals"),
    pytest.param("--enable-auto-tool-choice", ("enable_auto_tool_choice", True), id="switch"),
    pytest.param("--no-enable-prefix-caching", ("enable_prefix_caching", False), id="negated"),
])
def test_parse_flag(flag, parsed):
    assert parse_flag(flag) == parsed


# ---------------------------------------------------------------------------------------------------------------
# host: driver branch


@pytest.mark.parametrize("rel, status", [
    pytest.param("collect_env/01.txt", "fail", id="535"),
    pytest.param("collect_env/07.txt", "fail", id="570"),
    pytest.param("collect_env/08.txt", "fail", id="575"),
    pytest.param("collect_env/09.txt", "pass", id="580"),
    pytest.param("collect_env/10.txt", "pass", id="580-cuda13"),
    pytest.param("collect_env/12.txt", "pass", id="590"),
    pytest.param("collect_env/02.txt", "not-observable", id="rocm-no-nvidia-driver"),
    pytest.param("collect_env/03.txt", "not-observable", id="cpu"),
])
def test_driver_branch_from_real_collect_env(rel, status):
    finding = check_driver(sources_from_texts(collect_env=real(rel)), K3)
    assert finding.status == status, finding.message
    if status == "fail":
        assert "below the recipe's branch R580" in finding.message


@pytest.mark.parametrize("rel, status", [
    pytest.param("nvidia_smi/01.txt", "fail", id="570-h200"), pytest.param("nvidia_smi/02.txt", "pass", id="595"),
    pytest.param("nvidia_smi/03.txt", "fail", id="535"), pytest.param("nvidia_smi/04.txt", "pass", id="580-b200"),
])
def test_driver_branch_from_real_nvidia_smi(rel, status):
    assert check_driver(sources_from_texts(nvidia_smi=real(rel)), K3).status == status


def test_a_branch_the_recipe_lists_as_compatible_passes():
    recipe = K3.model_copy(update={"driver_branches_compatible": (570,)})
    assert check_driver(sources_from_texts(collect_env=real("collect_env/07.txt")), recipe).status == "pass"


def test_host_and_container_driver_disagree_is_named():
    s = sources_from_texts(nvidia_smi=real("nvidia_smi/04.txt"), collect_env=real("collect_env/07.txt"))
    finding = check_driver(s, K3)
    assert finding.status == "fail"
    assert "580.82.07" in finding.message and "570.172.08" in finding.message and "disagree" in finding.message


# ---------------------------------------------------------------------------------------------------------------
# container: CUDA build, never nvidia-smi's CUDA Version


@pytest.mark.parametrize("rel, status, says", [
    pytest.param("collect_env/10.txt", "pass", "CUDA 13.0 build", id="cu130"),
    pytest.param("collect_env/09.txt", "fail", "CUDA 12.9 build", id="cu129-on-580"),
    pytest.param("collect_env/12.txt", "fail", "CUDA 12.8 build", id="cu128-on-590"),
    pytest.param("collect_env/05.txt", "fail", "CUDA 11.8 build", id="cu118"),
    pytest.param("collect_env/02.txt", "fail", "not a CUDA build: platform rocm", id="rocm"),
    pytest.param("collect_env/03.txt", "fail", "not a CUDA build: platform cpu", id="cpu"),
    pytest.param("collect_env/11.txt", "fail", "not a CUDA build: platform xpu", id="xpu"),
])
def test_cuda_build_from_real_collect_env(rel, status, says):
    finding = check_cuda_build(sources_from_texts(collect_env=real(rel)), K3)
    assert finding.status == status and says in finding.message, finding.message


def test_nvidia_smi_cuda_version_alone_is_not_the_build():
    """nvidia-smi 04 says 'CUDA Version: 13.0' on R580: tempting, but it is the driver's capability only."""
    finding = check_cuda_build(sources_from_texts(nvidia_smi=real("nvidia_smi/04.txt")), K3)
    assert finding.status == "not-observable"
    assert "only" in finding.message and "driver can run" in finding.message and "13.0" in finding.message


def test_host_580_but_container_cuda_12_9_tells_both_stories():
    s = sources_from_texts(nvidia_smi=real("nvidia_smi/04.txt"), collect_env=real("collect_env/09.txt"))
    finding = check_cuda_build(s, K3)
    assert finding.status == "fail"
    assert "12.9" in finding.message and "R580" in finding.message and "13.0" in finding.message


def test_torch_and_cuda_wheels_that_disagree_fail():
    text = real("collect_env/10.txt").replace("-cu13==", "-cu12==")
    s = sources_from_texts(collect_env=text)
    assert s.collect_env.cuda_library_majors == (12,)
    finding = check_cuda_build(s, K3)
    assert finding.status == "fail" and "disagree" in finding.message and "CUDA 12" in finding.message


def test_a_build_newer_than_the_driver_can_run_fails():
    text = real("collect_env/10.txt")
    finding = check_cuda_build(sources_from_texts(collect_env=text, nvidia_smi=real("nvidia_smi/06.txt")), K3)
    assert finding.status == "fail" and "can run only CUDA 12.9" in finding.message


def test_unreadable_collect_env_is_a_finding_not_a_crash():
    s = sources_from_texts(collect_env=real("collect_env/14.txt"))
    assert "collect_env" in s.read_errors
    findings = {f.rule: f for f in evaluate(s, K3, ENV).findings}
    assert findings["environment.source"].status == "warn" and "collect_env" in findings["environment.source"].message
    assert findings["environment.cuda_build"].status == "not-observable"
    assert "unreadable" in findings["environment.cuda_build"].message


# ---------------------------------------------------------------------------------------------------------------
# image and build method

DOCKER_CONTAINER = json.dumps([{"Id": "abc", "Created": "2026-08-12T10:00:00Z", "Image": "sha256:" + "1" * 64,
                                "Config": {"Image": "vllm/vllm-openai:v0.33.0"}}])
DOCKER_IMAGE = json.dumps([{"Id": "sha256:" + "1" * 64, "RepoTags": ["vllm/vllm-openai:v0.33.0"],
                            "RepoDigests": ["vllm/vllm-openai@sha256:" + "2" * 64], "Created": "2026-08-01T00:00:00Z"}])
CRICTL = json.dumps({"status": {"image": {"image": "docker.io/vllm/vllm-openai:v0.33.0-cu129"},
                                "imageRef": "docker.io/vllm/vllm-openai@sha256:" + "3" * 64,
                                "createdAt": "2026-08-12T10:00:00Z"}})


@pytest.mark.parametrize("text, ref, digest", [
    pytest.param(DOCKER_CONTAINER, "vllm/vllm-openai:v0.33.0", None, id="docker-container"),
    pytest.param(DOCKER_IMAGE, "vllm/vllm-openai:v0.33.0", "sha256:" + "2" * 64, id="docker-image"),
    pytest.param(CRICTL, "docker.io/vllm/vllm-openai:v0.33.0-cu129", "sha256:" + "3" * 64, id="crictl"),
    pytest.param('{"image": "vllm/vllm-openai:v0.33.0", "faults": []}', "vllm/vllm-openai:v0.33.0", None,
                 id="plain-json"),
])
def test_image_inspect_shapes(text, ref, digest):
    image = parse_image_inspect(text)
    assert (image.reference, image.digest) == (ref, digest)


@pytest.mark.parametrize("text", [pytest.param("not json", id="not-json"), pytest.param("[]", id="empty-list"),
                                  pytest.param('{"Id": "x"}', id="no-image")])
def test_image_inspect_rejects_what_is_not_one(text):
    with pytest.raises(ArtifactError):
        parse_image_inspect(text)


@pytest.mark.parametrize("inspect, recipe, status, says", [
    pytest.param(DOCKER_IMAGE, {}, "pass", "vllm/vllm-openai:v0.33.0@sha256:2222", id="official-with-digest"),
    pytest.param(DOCKER_IMAGE, {"image": "vllm/vllm-openai:v0.29.0"}, "fail", "the sheet is for", id="other-image"),
    pytest.param(DOCKER_IMAGE, {"image_digest": "sha256:" + "9" * 64}, "fail", "not the signed", id="other-digest"),
    pytest.param(CRICTL, {}, "fail", "CUDA 12 image", id="cu129-tag"),
    pytest.param(DOCKER_CONTAINER.replace("v0.33.0", "v0.29.0"), {}, "fail", "does not match the engine", id="tag-vs-engine"),
    pytest.param(None, {}, "not-observable", "image is not identified", id="none"),
])
def test_image_check(inspect, recipe, status, says):
    s = sources_from_texts(image_inspect=inspect, version="0.33.0")
    finding = check_image(s, K3.model_copy(update=recipe))
    assert finding.status == status and says in finding.message, finding.message


def test_an_image_only_typed_into_the_parameters_is_open_not_a_pass():
    s = read_sources({}, declared_image="vllm/vllm-openai:v0.33.0", declared_digest="sha256:" + "4" * 64)
    finding = check_image(s, K3)
    assert finding.status == "not-observable" and "only declared in the parameters" in finding.message


def test_an_inspected_image_without_a_digest_is_open_not_a_pass():
    s = sources_from_texts(image_inspect='{"image": "vllm/vllm-openai:v0.33.0"}', version="0.33.0")
    finding = check_image(s, K3)
    assert finding.status == "not-observable" and "no digest" in finding.message


def _emulated_texts(**host_overrides):
    """collect_env (container) and nvidia-smi (host) as the emulator writes them; `host_overrides` change the
    host's side only (another driver than the one the container saw)."""
    from k3lib.emulator import EmulatorConfig
    from k3lib.emulator.envreport import collect_env_report, nvidia_smi_report

    cfg = EmulatorConfig.from_profile("demo").resolved()
    host = cfg.replace(**host_overrides) if host_overrides else cfg
    return collect_env_report(cfg), nvidia_smi_report(host, 1000, "Tue Dec  1 00:00:00 2026")


@pytest.mark.parametrize("host, use_smi, status, says", [
    pytest.param({}, True, "pass", "driver 580.95.05 = 580.95.05", id="agree"),
    pytest.param({"driver_version": "580.65.06"}, True, "fail", "the host's driver is 580.65.06", id="driver-differs"),
    pytest.param({"driver_version": "570.172.08"}, True, "fail", "host driver runs only CUDA 12.8", id="driver-too-old"),
    pytest.param({}, False, "not-observable", "no host-side source", id="container-only"),
])
def test_c04_compares_the_host_with_the_container(host, use_smi, status, says):
    collect_env, smi = _emulated_texts(**host)
    s = sources_from_texts(collect_env=collect_env, nvidia_smi=smi if use_smi else None)
    finding = check_host_container(s)
    assert finding.status == status and says in finding.message, finding.message


@pytest.mark.parametrize("kw, build, status", [
    pytest.param({"image_inspect": DOCKER_IMAGE}, "official", "pass", id="official-image"),
    pytest.param({"collect_env": "collect_env/10.txt"}, "official", "pass", id="production-docker-image-env"),
    pytest.param({"image_inspect": '{"image": "registry.corp/ml/vllm-k3:cu13-build7"}'}, "official", "fail",
                 id="declared-official-but-own-image"),
    pytest.param({"collect_env": "collect_env/08.txt"}, "official", "warn", id="nightly-dev-build"),
    pytest.param({"image_inspect": DOCKER_IMAGE}, "custom", "warn", id="custom-is-experimental"),
    pytest.param({}, "official", "not-observable", id="nothing"),
])
def test_build_method(kw, build, status):
    kw = {k: (real(v) if k == "collect_env" else v) for k, v in kw.items()}
    finding = check_build_method(sources_from_texts(build=build, **kw))
    assert finding.status == status, finding.message
    assert RULES[finding.rule].decision == "limited-observation"  # its own sheet, never a rebuild


# ---------------------------------------------------------------------------------------------------------------
# engine: version, flags, prefix caching, startup


def test_version_sources_that_disagree_are_a_finding_naming_both():
    s = sources_from_texts(collect_env=real("collect_env/10.txt"), version="0.33.0")
    findings = {f.rule: f for f in check_version(s, K3)}
    assert findings["environment.vllm_sources"].status == "fail"
    assert "/version says 0.33.0" in findings["environment.vllm_sources"].message
    assert "collect_env says 0.16.0" in findings["environment.vllm_sources"].message
    assert findings["environment.vllm_version"].status == "fail"  # 0.16.0 is out of range


@pytest.mark.parametrize("kw, status", [
    pytest.param({"version": "0.33.0", "fingerprint": "vllm-0.33.0-tp8-05524095"}, "pass", id="api-and-fingerprint"),
    pytest.param({"server_log": "logs/13.txt"}, "pass", id="log-0.28"),
    pytest.param({"server_log": "logs/12.txt"}, "fail", id="log-0.16"),
    pytest.param({"collect_env": "collect_env/01.txt"}, "fail", id="collect-env-dev-0.6.3"),
    pytest.param({}, "not-observable", id="nothing"),
])
def test_vllm_version_range(kw, status):
    kw = {k: (real(v) if k in ("server_log", "collect_env") else v) for k, v in kw.items()}
    findings = check_version(sources_from_texts(**kw), K3)
    assert [f.status for f in findings if f.rule == "environment.vllm_version"] == [status]
    assert not [f for f in findings if f.rule == "environment.vllm_sources"]


def test_fingerprint_names_the_version():
    s = sources_from_texts(fingerprint="vllm-0.27.0-05524095")
    assert s.fingerprint_version == "0.27.0"
    assert check_version(s, K3)[0].status == "fail"


def _flags(log: str | None, probe: ToolChoiceProbe = ToolChoiceProbe("not-run"),  # noqa: B008 - frozen
           reasoning: bool | None = None):
    texts = {"server_log": SourceText("server_log", "<log>", log)} if log is not None else {}
    return check_flags(read_sources(texts, tool_probe=probe, chat_reasoning=reasoning), K3)


ANSWERED = ToolChoiceProbe("answered", 200, reasoning=True)
REJECTED = ToolChoiceProbe("rejected-flags", 400, AUTO_TOOL_CHOICE_400)


@pytest.mark.parametrize("log, probe, status, says", [
    pytest.param(log_with(K3_ARGS), ANSWERED, "pass", "every required flag", id="log-and-behaviour"),
    pytest.param(log_with(K3_ARGS), ToolChoiceProbe("not-run"), "pass", "every required flag", id="log-only"),
    pytest.param(log_with({**K3_ARGS, "tool_call_parser": "kimi_k2"}), ANSWERED, "fail", "'kimi_k2'",
                 id="wrong-parser"),
    pytest.param(log_with({k: v for k, v in K3_ARGS.items() if k != "reasoning_parser"}), ToolChoiceProbe("not-run"),
                 "fail", "reasoning_parser not among", id="no-reasoning-parser"),
    pytest.param(log_with({"model": "m"}), REJECTED, "fail", "400", id="missing-both-ways"),
    pytest.param(log_with(K3_ARGS), REJECTED, "fail", "disagree", id="log-says-yes-server-says-400"),
    pytest.param(None, REJECTED, "fail", "requires --enable-auto-tool-choice", id="behaviour-400-no-log"),
    pytest.param(None, ANSWERED, "warn", "not observable without the server log", id="behaviour-only"),
    pytest.param(None, ToolChoiceProbe("not-run"), "not-observable", "no server log", id="nothing"),
])
def test_flags_from_log_and_behaviour(log, probe, status, says):
    finding = _flags(log, probe)
    assert finding.status == status and says in finding.message, finding.message


def test_real_log_with_the_k2_parser_fails_the_k3_recipe():
    finding = _flags(real("logs/14.txt"))
    assert finding.status == "fail" and "kimi_k2" in finding.message
    assert finding.evidence["proofs"][0]["where"].startswith("line ")


@pytest.mark.parametrize("status, body, outcome", [
    pytest.param(400, json.dumps({"error": {"message": AUTO_TOOL_CHOICE_400, "type": "BadRequestError",
                                            "param": None, "code": 400}}), "rejected-flags", id="nested-0.10.1+"),
    pytest.param(400, json.dumps({"object": "error", "message": AUTO_TOOL_CHOICE_400}), "rejected-flags",
                 id="flat-0.10.0"),
    pytest.param(400, json.dumps({"error": {"message": "tools not supported"}}), "error", id="other-400"),
    pytest.param(200, json.dumps({"choices": [{"message": {"tool_calls": [{"id": "functions.get_weather:0"}],
                                                           "reasoning": "x"}}], "system_fingerprint": "vllm-0.33.0-ab"}),
                 "answered", id="answered"),
    pytest.param(None, "", "error", id="no-answer"),
])
def test_classify_tool_probe(status, body, outcome):
    probe = classify_tool_probe(status, body, None if status else "ConnectError")
    assert probe.outcome == outcome
    if outcome == "answered":
        assert (probe.tool_calls, probe.reasoning, probe.fingerprint) == (1, True, "vllm-0.33.0-ab")


@pytest.mark.parametrize("labels, log, status", [
    pytest.param({"enable_prefix_caching": "True"}, None, "pass", id="label-on"),
    pytest.param({"enable_prefix_caching": "False"}, None, "fail", id="label-off"),
    pytest.param({}, log_with({**K3_ARGS, "enable_prefix_caching": False}), "fail", id="disabled-by-flag"),
    pytest.param({}, log_with(K3_ARGS), "pass", id="default-on"),
    pytest.param({"enable_prefix_caching": "True"}, log_with({**K3_ARGS, "enable_prefix_caching": False}), "fail",
                 id="sources-disagree"),
    pytest.param({}, None, "not-observable", id="nothing"),
])
def test_prefix_caching(labels, log, status):
    texts = {"server_log": SourceText("server_log", "<log>", log)} if log else {}
    s = read_sources(texts, cache_config=labels)
    assert check_prefix_caching(s, K3).status == status


@pytest.mark.parametrize("rel, status", [
    pytest.param("logs/03.txt", "fail", id="0.7-oom-startup"), pytest.param("logs/06.txt", "fail", id="0.10-oom"),
    pytest.param("logs/09.txt", "fail", id="0.12-oom"), pytest.param("logs/11.txt", "fail", id="0.14-oom"),
    pytest.param("logs/02.txt", "pass", id="oom-while-serving-is-not-startup"),
    pytest.param("logs/14.txt", "pass", id="ready"),
])
def test_startup_from_real_logs(rel, status):
    finding = check_startup(sources_from_texts(server_log=real(rel)))
    assert finding.status == status, finding.message
    if status == "fail":
        assert "the engine never became ready: OOM at startup" in finding.message
        assert finding.message.endswith("→ topology or image")


def test_startup_without_log_reads_the_server_but_proves_nothing_clean():
    down = read_sources({"models": SourceText("models", "http://x/v1/models", "{}", error="HTTP 503: dead", status=503)})
    assert check_startup(down).status == "fail"
    # answering proves it started, not that it started clean: with no log read, C05 stays open
    up = read_sources({}, models=({"id": "kimi-k3"},))
    finding = check_startup(up)
    assert finding.status == "not-observable"
    assert "startup log was not read" in finding.message


_CLEAN_START = """\
INFO 11-20 10:00:01 [api_server.py:1] vLLM API server version 0.33.0
INFO 11-20 10:00:02 [model.py:1] Resolved architecture: KimiK3ForConditionalGeneration
{middle}INFO 11-20 10:03:40 [launcher.py:1] Available routes are: /health, /v1/chat/completions
INFO:     Application startup complete.
INFO:     127.0.0.1:50000 - "GET /v1/models HTTP/1.1" 200 OK
"""


def _startup(middle: str):
    log = _CLEAN_START.format(middle=middle)
    return check_startup(read_sources({"server_log": SourceText("server_log", "vllm.log", log)},
                                      models=({"id": "kimi-k3"},)))


def test_startup_log_without_error_before_ready_passes():
    finding = _startup("")
    assert finding.status == "pass"
    assert "no error and no compatibility warning before ready" in finding.message


@pytest.mark.parametrize("middle, named", [
    ("ERROR 11-20 10:01:00 [worker.py:88] Failed to load the custom all-reduce kernel\n", "line 3"),
    ("Traceback (most recent call last):\n  File \"/x/vllm/_C.py\", line 1, in <module>\n"
     "ImportError: libcudart.so.12: cannot open shared object file\n", "ImportError"),
    ("(EngineCore_DP0 pid=9) ERROR 11-20 10:01:00 [core.py:1] EngineCore hit an exception, retrying\n", "retrying"),
])
def test_attack_startup_log_full_of_errors_fails_c05_although_the_server_answers(middle, named):
    finding = _startup(middle)
    assert finding.status == "fail"
    assert "before ready" in finding.message and named in finding.message
    assert rule_for(finding.rule).level.value == "environment-rebuild"


def test_compatibility_warning_before_ready_warns_and_one_after_ready_is_not_startup():
    warn = "WARNING 11-20 10:01:00 [cuda.py:1] The driver version 570.86 is older than the CUDA 13 build expects\n"
    assert _startup(warn).status == "warn"
    assert "compatibility warning" in _startup(warn).message
    after = _CLEAN_START.format(middle="") + "ERROR 11-20 10:05:00 [serving_chat.py:1] Error in preprocessing\n"
    served = check_startup(read_sources({"server_log": SourceText("server_log", "vllm.log", after)}))
    assert served.status == "pass"  # a request's error while serving is not a startup error


def test_errors_of_an_earlier_failed_start_do_not_count_against_the_last_start():
    first = ("INFO 11-20 09:00:01 [api_server.py:1] vLLM API server version 0.33.0\n"
             "ERROR 11-20 09:00:30 [core.py:1] EngineCore failed to start.\n"
             "RuntimeError: Engine core initialization failed.\n")
    log = first + _CLEAN_START.format(middle="")
    finding = check_startup(read_sources({"server_log": SourceText("server_log", "vllm.log", log)}))
    assert finding.status == "pass", finding.message


# ---------------------------------------------------------------------------------------------------------------
# host: GPUs and fabric manager


@pytest.mark.parametrize("kw, env, status", [
    pytest.param({"collect_env": "collect_env/07.txt"}, {"gpus_required": 8}, "fail", id="4-of-8"),
    pytest.param({"collect_env": "collect_env/10.txt"}, {"gpus_required": 8}, "pass", id="8-of-8"),
    pytest.param({"collect_env": "collect_env/07.txt", "server_log": "logs/07.txt"}, {}, "pass", id="tp2-from-log"),
    pytest.param({"collect_env": "collect_env/07.txt", "server_log": "logs/12.txt"}, {}, "fail", id="tp8-from-log"),
    pytest.param({"collect_env": "collect_env/03.txt"}, {"gpus_required": 1}, "fail", id="cpu-container"),
    pytest.param({"collect_env": "collect_env/10.txt"}, {}, "not-observable", id="requirement-unknown"),
    pytest.param({}, {"gpus_required": 8}, "not-observable", id="nothing"),
])
def test_gpus_visible(kw, env, status):
    kw = {k: real(v) for k, v in kw.items()}
    finding = check_gpus(sources_from_texts(**kw), EnvironmentParams(**env))
    assert finding.status == status, finding.message


@pytest.mark.parametrize("smi, env, status", [
    pytest.param(query_smi([("Completed", "Success")] * 8), {}, "pass", id="hgx-up"),
    pytest.param(query_smi([("Completed", "Success")] * 7 + [("In Progress", "N/A")]), {}, "fail", id="one-in-progress"),
    pytest.param(query_smi([("Not Started", "N/A")] * 8), {}, "fail", id="fabric-manager-down"),
    pytest.param(real("nvidia_smi/01.txt"), {}, "not-observable", id="8xH200-table-only"),
    pytest.param(real("nvidia_smi/02.txt"), {}, "info", id="h200-nvl-pcie"),
    pytest.param(real("nvidia_smi/03.txt"), {}, "info", id="4xA100-no-nvswitch"),
    pytest.param(real("nvidia_smi/05.txt"), {"nvswitch": True}, "not-observable", id="forced-nvswitch-no-fabric"),
])
def test_fabric_manager(smi, env, status):
    finding = check_fabric(sources_from_texts(nvidia_smi=smi), EnvironmentParams(**env))
    assert finding.status == status, finding.message
    if status == "fail":
        assert "GPU 7" in finding.message or "Not Started" in finding.message


# ---------------------------------------------------------------------------------------------------------------
# the sheet


def test_healthy_chain_passes_and_the_table_has_the_seed_rows():
    collect_env = real("collect_env/10.txt").replace("0.16.0", "0.33.0")
    s = read_sources({"collect_env": SourceText("collect_env", "<ce>", collect_env),
                      "server_log": SourceText("server_log", "<log>", log_with(K3_ARGS)),
                      "image_inspect": SourceText("image_inspect", "<img>", DOCKER_IMAGE),
                      "nvidia_smi": SourceText("nvidia_smi", "<smi>", query_smi([("Completed", "Success")] * 8,
                                                                                 "NVIDIA B200", "580.105.08"))},
                     api_version="0.33.0", tool_probe=ANSWERED, cache_config={"enable_prefix_caching": "True"})
    result = evaluate(s, K3, ENV)
    assert result.status == "pass", [(f.rule, f.status, f.message) for f in result.findings if f.status != "pass"]
    assert not result.mismatch
    table = environment_table(result)
    assert list(table.index[:6]) == ["Image and tag", "vLLM version", "CUDA build", "Host driver", "GPU visibility",
                                     "Build method"]
    assert {"observed", "proof kept", "expected", "status", "decision on mismatch"} <= set(table.columns)
    assert "580.105.08" in table.loc["Host driver", "observed"]
    assert "collect_env" in table.loc["CUDA build", "proof kept"]
    assert table.loc["Fabric manager", "status"] == "pass"


def test_a_mismatch_sets_the_flag_and_the_row_shows_the_worst():
    s = sources_from_texts(collect_env=real("collect_env/09.txt"), nvidia_smi=real("nvidia_smi/04.txt"))
    result = evaluate(s, K3, ENV)
    assert result.mismatch and result.status == "fail"
    rows = {r["item"]: r for r in table_rows(result)}
    assert rows["CUDA build"]["status"] == "fail"
    assert "environment-rebuild" in rows["CUDA build"]["decision on mismatch"]


def test_custom_build_is_not_a_mismatch_but_never_passes():
    s = sources_from_texts(build="custom", image_inspect=DOCKER_IMAGE)
    result = evaluate(s, K3, ENV)
    assert result.experimental and result.by_rule("environment.build_method").status == "warn"
    assert not any(f.rule == "environment.build_method" and f.status == "fail" for f in result.findings)


def _all(kind: str) -> list[str]:
    return sorted(str(p.relative_to(REAL)) for p in (REAL / kind).glob("*.txt"))


@pytest.mark.parametrize("i", range(14), ids=lambda i: f"combo-{i + 1:02d}")
def test_every_real_world_artifact_combination_evaluates_without_crashing(i):
    """Each collect_env, nvidia-smi and log file, paired round-robin: findings with known rules, a table, no raise."""
    ce, smi, logs = _all("collect_env"), _all("nvidia_smi"), _all("logs")
    s = sources_from_texts(collect_env=real(ce[i % len(ce)]), nvidia_smi=real(smi[i % len(smi)]),
                           server_log=real(logs[i % len(logs)]), version="0.33.0")
    result = evaluate(s, K3, ENV)
    assert {f.rule for f in result.findings} <= set(RULES)
    assert {f"environment.{rule}" for rule in ("driver_branch", "cuda_build", "vllm_version", "flags", "startup",
                                               "gpus_visible", "fabric_manager", "image", "build_method")} <= \
        {f.rule for f in result.findings}
    assert len(environment_table(result)) >= 9
    json.dumps([f.model_dump(mode="json") for f in result.findings])  # the record must serialise
