"""The exposition parser: strict text through prometheus_client, pasted dumps line by line with skips recorded."""

from __future__ import annotations

import math

import pytest

from k3lib.io.metrics import Snapshot, parse_exposition

CLEAN = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.75e+09
"""


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for s in parse_exposition(text).samples}


def test_strict_text_keeps_total_suffix_on_samples():
    exp = parse_exposition(CLEAN)
    assert exp.strict and not exp.skipped
    # prometheus_client names the family `vllm:prompt_tokens`, but the sample keeps `_total`.
    assert values(CLEAN)["vllm:prompt_tokens_total"] == 1234.0
    assert exp.types["vllm:prompt_tokens"] == "counter"
    assert all(isinstance(s.value, float) for s in exp.samples)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(CLEAN.replace("\n", "\r\n"), id="crlf"),
        pytest.param("\x1b[32m" + CLEAN.replace("\n", "\x1b[0m\n", 1), id="ansi"),
        pytest.param("$ curl -s localhost:8000/metrics | grep vllm\n" + CLEAN, id="shell-prompt"),
        pytest.param("```text\n" + CLEAN + "```\n", id="markdown-fence"),
        pytest.param("".join("    " + line + "\n" for line in CLEAN.splitlines()), id="indented"),
        pytest.param("".join(f"2025-06-01T10:00:0{i}.123456789Z {line}\n"
                             for i, line in enumerate(CLEAN.splitlines())), id="kubectl-timestamps"),
        pytest.param("".join(f"[pod/vllm-0/vllm] {line}\n" for line in CLEAN.splitlines()), id="collector-prefix"),
        pytest.param(CLEAN + 'vllm:generation_tokens_total{engine="0",model_na', id="cut-off-last-line"),
        pytest.param(CLEAN + "-- end of paste --\n", id="trailing-garbage"),
        pytest.param("\n".join(l for l in CLEAN.splitlines() if not l.startswith("#")) + "\n", id="grep-no-type"),
        pytest.param(CLEAN + CLEAN, id="pasted-twice"),
    ],
)
def test_pasted_layouts_read_the_same_samples(text):
    assert values(text) == values(CLEAN)


def test_skipped_lines_are_recorded_with_line_numbers():
    exp = parse_exposition("$ curl x\n" + CLEAN + "vllm:broken{a=\"1\"\n")
    assert not exp.strict
    assert [(s.line_no, s.line) for s in exp.skipped] == [(1, "$ curl x"), (8, 'vllm:broken{a="1"')]
    assert exp.types["vllm:num_requests_running"] == "gauge"


def test_prose_with_colon_is_not_a_sample():
    exp = parse_exposition("Avg prompt throughput: 5.0\nvllm:a 1\n```\n")
    assert {s.name for s in exp.samples} == {"vllm:a"}


def test_labels_with_spaces_braces_and_escapes():
    text = 'garbage line\nvllm:lora_requests_info{running_lora_adapters="a b}",waiting_lora_adapters="q\\"x"} 2.5\n'
    (sample,) = parse_exposition(text).samples
    assert dict(sample.labels) == {"running_lora_adapters": "a b}", "waiting_lora_adapters": 'q"x'}
    assert sample.value == 2.5


def test_nan_gauge_is_ignored_by_aggregation():
    snap = Snapshot.from_text('vllm:kv_cache_usage_perc{engine="0"} NaN\nvllm:kv_cache_usage_perc{engine="1"} 0.3\n')
    assert snap.value("kv_cache_usage_perc") == 0.3
    assert math.isnan(parse_exposition("vllm:a NaN\n").samples[0].value)


def test_empty_text_gives_no_samples_and_null_values():
    snap = Snapshot.from_text("")
    assert snap.value("prompt_tokens_total") is None
    assert snap.model_name() is None


def test_help_text_ending_in_a_number_is_not_a_sample():
    text = "2025-06-01T10:00:00Z # HELP vllm:x Buckets up to 5\n2025-06-01T10:00:00Z vllm:x 1\n```\n"
    assert values(text) == {"vllm:x": 1.0}


def test_inspect_refuses_text_without_samples():
    from k3lib.core.errors import ArtifactError
    from k3lib.io.metrics import inspect_metrics

    with pytest.raises(ArtifactError, match="line 1 reads 'INFO 06-01 server started'"):
        inspect_metrics("INFO 06-01 server started\n\n")


def test_package_all_is_sorted_and_importable():
    import k3lib.io.metrics as metrics

    assert metrics.__all__ == sorted(metrics.__all__)
    assert all(hasattr(metrics, name) for name in metrics.__all__)
