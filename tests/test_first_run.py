"""The first real run, written down (issue 36): `k3 init` against the emulator and real vLLM, the production example
complete and copyable anywhere, defaults that follow the contract, the plan's estimate, and the decision's reasons
grouped by item with what closes each, in the terminal and in the index.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from k3lib.cli.main import main
from k3lib.core.errors import BadInputError
from k3lib.core.params import load_params

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ROOT / "parameters" / "production.example.yaml"


# -- k3 init -------------------------------------------------------------------------------------------------------

def _init(url: str, out: Path, capsys, *extra: str) -> tuple[str, dict]:
    assert main(["init", url, "--out", str(out), *extra]) == 0
    said = capsys.readouterr().out
    return said, yaml.safe_load(out.read_text())


def test_init_writes_what_the_emulator_shows_and_lists_the_rest(tmp_path, capsys, emulator):
    out = tmp_path / "mine.yaml"
    said, data = _init(f"{emulator.url}/v1", out, capsys)
    assert data["target"]["base_url"] == emulator.url  # the /v1 the OpenAI SDK habit adds is taken off
    assert data["target"]["model"] == "kimi-k3" and data["extends"] == "kimi-k3.yaml"
    assert data["contract"]["max_context_tokens"] == 4096  # the served max_model_len
    text = out.read_text()
    for source in ("collect_env:", "server_log:", "image_inspect:", "nvidia_smi:", "restart:", "attestation:",
                   "rollback_drill:", "gpu_metrics:"):
        assert f"# {source}" in text or f"#   {source}" in text or f"#     {source}" in text, source
    assert "gpu_metrics" in said and "next: k3 validate -p" in said
    params = load_params([out])  # the file validates, and the recipe came through extends
    assert params.recipe.name == "kimi-k3" and params.target.base_url == emulator.url
    assert main(["validate", "-p", str(out), "--plan"]) == 0
    assert "plan: 6 axes" in capsys.readouterr().out


def test_init_refuses_to_replace_a_file_and_a_server_that_does_not_answer(tmp_path, capsys, emulator):
    from test_hardening_server import closed_port

    out = tmp_path / "mine.yaml"
    out.write_text("keep me")
    assert main(["init", emulator.url, "--out", str(out)]) == 2
    assert out.read_text() == "keep me" and "--force" in capsys.readouterr().err
    assert main(["init", f"http://127.0.0.1:{closed_port()}", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "nothing answers" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


def test_init_refuses_a_missing_or_wrong_key_as_the_preflight_does(tmp_path, capsys, clean_env):
    """No key, or a wrong one: exit 2 with the preflight's own line and no file (a file written without the served
    model would carry the generic recipe, and a Kimi K3 would be judged without its checks). The right key: the
    served Kimi K3's recipe, by `extends`."""
    from k3lib.emulator import EmulatorConfig, start_emulator

    handle = start_emulator(EmulatorConfig.from_profile("demo", api_key="k3-secret-value-1"), host="127.0.0.1",
                            port=0)
    try:
        out = tmp_path / "keyed.yaml"
        assert main(["init", handle.url, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "target.api_key_env: the server asks for an API key (HTTP 401" in err
        clean_env.setenv("K3_INIT_KEY", "not-the-key")
        assert main(["init", handle.url, "--out", str(out), "--api-key-env", "K3_INIT_KEY"]) == 2
        err = capsys.readouterr().err.strip()
        assert "the server refused the key in $K3_INIT_KEY (HTTP 401" in err and not out.exists()
        clean_env.setenv("K3_INIT_KEY", "k3-secret-value-1")
        _, data = _init(handle.url, out, capsys, "--api-key-env", "K3_INIT_KEY")
        assert data["target"]["api_key_env"] == "K3_INIT_KEY" and data["target"]["model"] == "kimi-k3"
        assert data["extends"] == "kimi-k3.yaml" and load_params([out]).recipe.name == "kimi-k3"
        assert "k3-secret-value-1" not in out.read_text()  # the name, never the value
    finally:
        handle.stop()


def test_init_says_what_validate_says_of_a_url_without_scheme_and_an_unknown_host(tmp_path, capsys):
    """The same lines as `k3 validate` (the parameters' URL check, the preflight's DNS check), not "is the server
    running?"."""
    out = tmp_path / "x.yaml"
    for url, validate_args in (("vm:8011", []), ("http://nosuchhost.invalid:8011",
                                                 ["--set", "target.allow_remote_load=true"])):
        assert main(["init", url, "--out", str(out)]) == 2
        said = capsys.readouterr().err.strip().split("target.base_url: ")[-1]
        assert main(["validate", "-p", str(ROOT / "parameters/emulator.yaml"), "--set", f"target.base_url={url}",
                     *validate_args, "--plan"]) == 2
        assert said in capsys.readouterr().err and "is the server running" not in said and not out.exists()


def test_init_refuses_a_model_list_it_cannot_read(tmp_path, capsys):
    """A 5xx on /v1/models (an engine not ready): one line saying the served model cannot be read, no file."""
    import http.server
    import threading

    class Down(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Down)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "x.yaml"
        assert main(["init", f"http://127.0.0.1:{server.server_port}", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "/v1/models answers 503" in err and "cannot be read" in err and not out.exists()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.realvllm
def test_init_against_real_vllm(tmp_path, capsys, real_vllm):
    out = tmp_path / "vllm.yaml"
    _, data = _init(real_vllm.base_url, out, capsys)
    assert data["target"]["model"] == "tiny-llama" and data["contract"]["max_context_tokens"] == 2048
    assert data["recipe"]["name"] == "generic" and data["recipe"]["prefix_caching"] is True
    text = out.read_text()
    assert "(it runs 0.32.0)" in text and "block_size 128" in text
    assert main(["validate", "-p", str(out), "--plan"]) == 0
    err = capsys.readouterr().err
    assert "vLLM 0.32.0 serving tiny-llama" in err


# -- the production example ----------------------------------------------------------------------------------------

def test_the_production_example_names_every_source_a_production_needs():
    p = load_params([PRODUCTION])
    env, ops = p.axes.environment, p.axes.operations
    assert all((env.collect_env, env.server_log, env.image_inspect, env.nvidia_smi))
    assert p.target.restart and ops.attestation and ops.rollback_drill and ops.rollback_to and ops.roll_forward
    assert p.target.gpu_metrics.source != "none" and p.target.api_key_env and p.recipe.image_digest
    assert p.recipe.name == "kimi-k3"  # through extends


def test_a_copied_parameters_file_still_finds_its_recipe(tmp_path):
    copy = tmp_path / "elsewhere" / "mine.yaml"
    copy.parent.mkdir()
    shutil.copy(PRODUCTION, copy)
    assert load_params([copy]).recipe.required_flags == load_params([PRODUCTION]).recipe.required_flags
    (copy.parent / "kimi-k3.yaml").write_text("recipe: {name: my-own-k3, vllm_min: '0.30.0'}\n")
    assert load_params([copy]).recipe.name == "my-own-k3"  # a file beside it comes first
    copy.write_text(copy.read_text().replace("extends: kimi-k3.yaml", "extends: no-such-profile.yaml"))
    with pytest.raises(BadInputError, match="no-such-profile.yaml not found beside this file"):
        load_params([copy])


# -- defaults that follow the contract -----------------------------------------------------------------------------

@pytest.mark.parametrize("context", [32768, 4096, 2048])
def test_prefix_lengths_follow_the_contract(context):
    """The issue's case: 2,048 and 8,192 against a 4,096-token contract ended 15 of 18 pairs in vLLM's 400."""
    from k3lib.axes.prefix_cache.run import prefix_lengths

    p = load_params([PRODUCTION], [f"contract.max_context_tokens={context}"])
    lengths = prefix_lengths(p)
    assert len(lengths) == 2 and all(n + p.axes.prefix_cache.max_tokens <= context for n in lengths), lengths


def test_a_prefix_length_beyond_the_contract_is_bad_input():
    with pytest.raises(BadInputError) as exc:
        load_params([PRODUCTION], ["contract.max_context_tokens=4096", "axes.prefix_cache.prefix_tokens=[2048,8192]"])
    line = exc.value.one_line()
    assert "axes.prefix_cache.prefix_tokens" in line and "[8192]" in line and "at most 4080" in line


# -- the plan's estimate -------------------------------------------------------------------------------------------

def _axes(params, **speed):
    from k3lib.axes.estimate import estimate_axes
    from k3lib.batch.preflight import Speed

    return {a.axis: a for a in estimate_axes(params, Speed(**{"ttft_s": 0.05, "per_token_s": 0.01, "tokens": 16,
                                                              **speed}), embedded=False)}


def test_a_duration_bound_phase_lasts_its_duration_and_a_request_bound_one_its_requests():
    slow = _axes(load_params([PRODUCTION]))["capacity"]
    steps = [p for p in slow.phases if p.name.startswith("step")]
    # the recipe's 120 s steps against a 10 ms/token engine: the duration binds, plus the request then in flight
    # (2,048 output tokens: about 20 s alone, longer at concurrency) — never a second step's worth
    assert len(steps) == 5 and all(p.bound == "duration" and 120 < p.seconds < 240 for p in steps)  # 1 2 4 5 6
    soak = next(p for p in slow.phases if p.name.startswith("soak"))
    assert soak.bound == "duration" and 1800 < soak.seconds < 1920
    small = load_params([PRODUCTION], ["axes.capacity.step_max_requests=10", "axes.capacity.soak_max_requests=20",
                                       "axes.capacity.output_tokens=64"])
    quick = _axes(small)["capacity"]
    assert all(p.bound == "requests" and p.seconds < 120 for p in quick.phases if p.name.startswith(("step", "soak")))
    # an engine that serves one request at a time takes longer at concurrency than one that batches
    serial = _axes(small, sharing=1.0)["capacity"]
    assert serial.seconds > quick.seconds


def test_the_plan_is_about_an_hour_for_the_recipe_and_its_lines_name_each_axis():
    from k3lib.batch.acceptance import plan_estimates, plan_lines
    from k3lib.batch.preflight import Speed

    params = load_params([PRODUCTION])
    speed = Speed(0.3, 0.02, 16, 0.2)
    _, total = plan_estimates(params, speed, embedded=False)
    # five 120 s steps, a 1,800 s soak, the agent's 10 repetitions at two levels, two drill restarts
    assert 40 * 60 < total < 90 * 60
    lines = plan_lines(params, speed, embedded=False, measured=True)
    assert re.match(r"plan: 6 axes and the summary, about (\d+ min \d\d s|1 h \d\d min) in all", lines[0]), lines[0]
    assert any("soak at concurrency 5" in line for line in lines)


# -- what is missing for production --------------------------------------------------------------------------------

def _decision(*reasons: str, checklist=()) -> dict:
    return {"decision": "limited-observation", "reasons": list(reasons), "checklist": list(checklist)}


def test_a_finding_and_its_sheet_item_are_one_item_stated_once():
    from k3lib.report.missing import group_reasons, missing_lines

    finding = ("limited-observation: environment.host_container: nothing compared: no host-side source (set "
               "axes.environment.nvidia_smi to the host's nvidia-smi output)")
    item = ("limited-observation: C04 The versions seen by the host and by the container were compared: still open "
            "(nothing compared: nothing compared: no host-side source (set axes.environment.nvidia_smi to the "
            "host's nvidia-smi output))")
    row = {"id": "C04", "title": "The versions seen by the host and by the container were compared",
           "status": "open", "rules": ["environment.host_container"]}
    items = group_reasons(_decision(finding, item, "traffic cap: 1 concurrent request(s) — none measured",
                                    checklist=[row]))
    assert [(i.key, i.kind, i.closes) for i in items] == [("C04", "missing", "axes.environment.nvidia_smi")]
    lines = missing_lines(_decision(finding, item, "traffic cap: 1 concurrent request(s)", checklist=[row]))
    text = "\n".join(lines)
    assert "nothing compared: nothing compared" not in text and text.count("no host-side source") == 1
    assert "→ axes.environment.nvidia_smi" in text and "traffic cap: 1" in text


def test_a_measured_defect_is_not_listed_as_something_to_provide():
    from k3lib.report.missing import group_reasons

    fail = ("limited-observation: agent.tool_calls_present: `tool_calls` present when the turn requires a call: "
            "fails 6 of 6 (unstable tool calls: block the agents concerned)")
    row = {"id": "C06", "title": "The reference agent scenario holds", "status": "fail",
           "rules": ["agent.tool_calls_present"]}
    rebuild = ("environment-rebuild: environment.cuda_build: CUDA 12 build, the recipe asks 13 (out of the official "
               "scope)")
    items = {i.key: i for i in group_reasons(_decision(fail, rebuild, checklist=[row]))}
    assert items["C06"].kind == "measured" and items["C02"].kind == "measured"
    assert items["C02"].level == "environment-rebuild"


def test_what_is_missing_comes_in_its_groups_each_in_the_checklist_order_and_colour():
    """The target's defects; the sources the operator has not configured (each with its parameter); the kit's own
    limits on this machine (its client's calibration on a loaded host): each under its own heading in the
    terminal and in its own colour in the index, the items of a group in the checklist's order, nothing cut."""
    from k3lib.report.missing import group_reasons, missing_html, missing_lines

    inspect = ("limited-observation: environment.image: the image and its digest were not observed "
               "(image_inspect: not configured; collect_env: not configured)")
    cal = ("limited-observation: capacity.client_calibration: the client's own timing error at concurrency 5 was "
           "2,100 ms against a known-timing server, above its 50 ms gate: this machine was too loaded to time the "
           "target " + "and its latency is not read " * 8)
    fail = ("limited-observation: agent.tool_calls_present: `tool_calls` present when the turn requires a call: "
            "fails 6 of 6")
    rows = [{"id": "C06", "title": "The reference agent scenario holds", "status": "fail",
             "rules": ["agent.tool_calls_present"]},
            {"id": "C01", "title": "The image is the signed one", "status": "open", "rules": ["environment.image"]}]
    decision = _decision(cal, fail, inspect, checklist=rows)
    kinds = [(i.key, i.kind) for i in group_reasons(decision)]
    assert ("C06", "measured") in kinds and ("C01", "missing") in kinds and ("capacity.client_calibration", "kit") in kinds
    items = {i.key: i for i in group_reasons(decision)}
    assert items["C01"].closes == "axes.environment.image_inspect"
    lines = missing_lines(decision, width=100)
    heads = [line for line in lines if not line.startswith(" ")]
    assert heads[:3] == ["the target's defects, measured on it (1):",
                         "sources not configured: provide each and run again (1):",
                         "the kit's own limits on this machine (not the target's) (1):"]
    assert all(len(line) <= 100 for line in lines) and "…" not in "".join(lines)
    joined = re.sub(r"\n    (?=\S)", " ", "\n".join(lines))
    assert "and its latency is not read " * 7 in joined  # the whole reason, wrapped
    html = missing_html(decision)
    order = [html.index(f"k3-missing-{k}") for k in ("measured", "missing", "kit")]
    assert order == sorted(order)
    assert all(f".k3-missing-{k} {{ color:" in (ROOT / "k3lib/report/templates/k3offline/static/k3report.css")
               .read_text() for k in ("measured", "missing", "kit"))


@pytest.mark.slow
def test_the_demo_run_states_each_open_item_once_in_the_terminal_and_the_index(tmp_path, capsys):
    """A demo run with two sources left out: each missing item once, with its parameter, above the fold."""
    code = main(["validate", "-p", str(ROOT / "parameters" / "emulator.yaml"), "--out", str(tmp_path),
                 "--set", "axes.environment.nvidia_smi=null", "--set", "axes.operations.attestation=null"])
    wrapped = capsys.readouterr().out
    assert code == 3, wrapped
    assert all(len(line) <= 160 for line in wrapped.splitlines()) and "…" not in wrapped  # wrapped, never cut
    out = re.sub(r"\n    (?=\S)", " ", wrapped)  # an item's continuation lines joined back
    assert re.search(r"^  - C04 .*→ axes\.environment\.nvidia_smi$", out, re.M), out
    assert re.search(r"^  - C15 .*→ axes\.operations\.attestation", out, re.M), out
    assert "nothing compared: nothing compared" not in out
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    index = (run / "report" / "index.html").read_text()
    top = index[: index.index("The sheet at a glance")]
    assert "What stands between this run and production" in top and "Headline figures" in top
    decision = json.loads((run / "decision.json").read_text())
    assert len(decision["reasons"]) > len(re.findall(r"^  - ", out, re.M))  # grouped: fewer lines than reasons
