"""Parameters: layering, overrides, and one clear line with exit 2 for every malformed file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from k3lib.cli.main import main
from k3lib.core.errors import BadInputError
from k3lib.core.params import load_params

ROOT = Path(__file__).resolve().parents[1]

VALID = """
target:
  base_url: http://127.0.0.1:8000
"""

MALFORMED = [
    pytest.param("target:\n  timeout_s: fast\n", "target.timeout_s", id="wrong-type"),
    pytest.param("target:\n  base_url: http://127.0.0.1:8000\n  colour: blue\n", "target.colour", id="unknown-key"),
    pytest.param("recipe:\n  name: kimi-k3\n", "target", id="missing-target"),
    pytest.param("target:\n  base_url: ftp://example\n", "target.base_url", id="bad-url-scheme"),
    pytest.param("target:\n  base_url: http://127.0.0.1:99999\n", "target.base_url", id="bad-url-port"),
    pytest.param("target:\n  base_url: null\n  timeout_s: -3\n", "target.timeout_s", id="negative-duration"),
    pytest.param("target:\n  api_key_env: sk-live-abc123\n", "target.api_key_env", id="key-value-not-name"),
    pytest.param("- just\n- a list\n", "mapping", id="not-a-mapping"),
    pytest.param("target: {base_url: [unclosed\n", "not valid YAML", id="broken-yaml"),
    pytest.param("target:\n  gpu_metrics:\n    source: dcgm\n", "gpu_metrics", id="dcgm-without-url"),
    pytest.param("target: {}\ncontract:\n  planned_concurrency: 0\n", "contract.planned_concurrency", id="zero-concurrency"),
    pytest.param("target: {}\nrecipe:\n  vllm_min: latest\n", "recipe.vllm_min", id="bad-version"),
]


@pytest.mark.parametrize("text, needle", MALFORMED)
def test_malformed_parameters_exit_2_with_one_line(tmp_path, capsys, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    assert main(["validate", "-p", str(f)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert str(f) in lines[0], "the message names the file"
    assert needle in lines[0], "the message names the field or the problem"


def test_layering_left_to_right_then_set(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(VALID + "contract:\n  planned_concurrency: 3\n  max_context_tokens: 8192\n")
    b.write_text("contract:\n  planned_concurrency: 6\n")
    p = load_params([a, b], ["contract.max_context_tokens=16384", "target.emulator.faults=[slow, crash=5]"])
    assert p.contract.planned_concurrency == 6
    assert p.contract.max_context_tokens == 16384
    assert p.target.emulator.faults == ("slow", "crash=5")


def test_error_names_the_file_that_set_the_field(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(VALID)
    b.write_text("contract:\n  planned_concurrency: many\n")
    with pytest.raises(BadInputError) as info:
        load_params([a, b])
    assert info.value.source == str(b)
    assert info.value.field == "contract.planned_concurrency"


def test_set_error_names_the_override(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text(VALID)
    with pytest.raises(BadInputError) as info:
        load_params([a], ["target.timeout_s=-1"])
    assert info.value.source == "--set target.timeout_s"
    with pytest.raises(BadInputError):
        load_params([a], ["no-equals-sign"])


def test_extends_is_relative_to_the_file_and_cycles_are_refused(tmp_path):
    (tmp_path / "base.yaml").write_text("recipe:\n  vllm_min: '0.27.1'\n")
    (tmp_path / "t.yaml").write_text("extends: base.yaml\n" + VALID)
    assert load_params([tmp_path / "t.yaml"]).recipe.vllm_min == "0.27.1"
    (tmp_path / "x.yaml").write_text("extends: y.yaml\n")
    (tmp_path / "y.yaml").write_text("extends: x.yaml\n")
    with pytest.raises(BadInputError, match="extends itself"):
        load_params([tmp_path / "x.yaml"])


@pytest.mark.parametrize("name", ["emulator.yaml", "production.example.yaml", "kimi-k3.yaml"])
def test_shipped_parameter_files(name):
    path = ROOT / "parameters" / name
    if name == "kimi-k3.yaml":  # a recipe profile alone has no target: it is layered under a target file
        with pytest.raises(BadInputError) as info:
            load_params([path])
        assert info.value.field == "target"
        return
    p = load_params([path])
    assert p.recipe.name == "kimi-k3"
    assert p.recipe.cuda_major == 13 and p.recipe.driver_branch_min == 580
    assert "--tool-call-parser kimi_k3" in p.recipe.required_flags


def test_recipe_profile_carries_the_source_document_values():
    p = load_params([ROOT / "parameters" / "emulator.yaml"])
    assert p.recipe.vllm_min == "0.27.1"
    assert set(p.recipe.required_flags) == {"--enable-auto-tool-choice", "--tool-call-parser kimi_k3",
                                            "--reasoning-parser kimi_k3", "--trust-remote-code"}
    assert p.recipe.prefix_caching is True


def test_the_k3_profile_follows_vllms_k3_recipe():
    """Production sampling, room for K3's reasoning, both stream modes, a 1 % tool-call tolerance, a cold load
    waited for as long as the recipe's engine waits (VLLM_ENGINE_READY_TIMEOUT_S=3600)."""
    p = load_params([ROOT / "parameters" / "production.example.yaml"])
    s = p.recipe.sampling
    assert (s.temperature, s.top_p, s.thinking) == (1.0, 0.95, True) and s.max_tokens >= 16384
    assert p.contract.client_stream_modes == ("non-stream", "stream") and p.contract.max_tool_call_failure_rate == 0.01
    assert p.axes.capacity.ready_timeout_s >= 3600 and p.recipe.spec_decode_min_acceptance_length is not None


def test_a_kimi_k3_recipe_cannot_drop_the_flag_vllms_recipe_adds(tmp_path):
    f = tmp_path / "k3.yaml"
    f.write_text(textwrap.dedent(VALID) + textwrap.dedent("""\
        recipe:
          name: kimi-k3
          vllm_min: "0.27.1"
          cuda_major: 13
          driver_branch_min: 580
          required_flags: [--enable-auto-tool-choice, --tool-call-parser kimi_k3, --reasoning-parser kimi_k3]
        """))
    with pytest.raises(BadInputError, match=r"the server flags --trust-remote-code"):
        load_params([f])


def test_fault_flag_refused_for_a_real_target(tmp_path, capsys):
    f = tmp_path / "real.yaml"
    f.write_text(textwrap.dedent(VALID))
    assert main(["validate", "-p", str(f), "--fault", "slow"]) == 2
    assert "embedded emulator only" in capsys.readouterr().err
