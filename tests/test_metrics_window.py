"""Window arithmetic between two snapshots: counter deltas with resets, histogram bucket deltas, quantiles."""

from __future__ import annotations

import pytest

from k3lib.io.metrics import Snapshot, delta, histogram_quantile, window_histogram, window_quantile


def snap(text: str, t_s: float) -> Snapshot:
    return Snapshot.from_text(text, endpoint="http://h:8000/metrics", t_wall=1_750_000_000 + t_s,
                              t_mono_ns=int(t_s * 1e9))


def counters(e0: float, e1: float, reason: str = "") -> str:
    text = (f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {e0}\n'
            f'vllm:prompt_tokens_total{{engine="1",model_name="m"}} {e1}\n')
    if reason:
        text += f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="m"}} 3\n'
    return text


def test_delta_sums_engines_and_gives_rate():
    d = delta(snap(counters(100, 50), 0), snap(counters(160, 90), 10), "prompt_tokens_total")
    assert (d.value, d.reset, d.elapsed_s, d.rate_per_s) == (100.0, False, 10.0, 10.0)


def test_delta_reports_a_reset_instead_of_subtracting():
    d = delta(snap(counters(100, 50), 0), snap(counters(30, 80), 5), "prompt_tokens_total")
    assert d.reset is True
    assert d.reset_series == ('http://h:8000/metrics{engine="0",model_name="m"}',)
    assert d.value == 60.0  # 30 after the reset (lower bound) + 30 on engine 1; never -70 + 30


def test_delta_counts_series_born_inside_the_window_from_zero():
    d = delta(snap(counters(1, 1), 0), snap(counters(1, 1, reason="stop"), 1), "request_success_total")
    assert (d.value, d.reset) == (3.0, False)


def test_delta_of_absent_counter_is_none_and_vanished_series_are_listed():
    assert delta(snap("", 0), snap("", 1), "num_preemptions_total").value is None
    d = delta(snap(counters(1, 1), 0), snap('vllm:prompt_tokens_total{engine="0",model_name="m"} 4\n', 1),
              "prompt_tokens_total")
    assert d.value == 3.0
    assert d.vanished_series == ('http://h:8000/metrics{engine="1",model_name="m"}',)


def test_delta_refuses_a_gauge():
    with pytest.raises(ValueError, match="not a counter"):
        delta(snap("", 0), snap("", 1), "kv_cache_usage_perc")


def ttft(counts: dict[str, float], engine: str = "0", total_sum: float = 0.0) -> str:
    lines = [f'vllm:time_to_first_token_seconds_bucket{{engine="{engine}",le="{le}",model_name="m"}} {c}'
             for le, c in counts.items()]
    lines.append(f'vllm:time_to_first_token_seconds_count{{engine="{engine}",model_name="m"}} {counts["+Inf"]}')
    lines.append(f'vllm:time_to_first_token_seconds_sum{{engine="{engine}",model_name="m"}} {total_sum}')
    return "\n".join(lines) + "\n"


BEFORE = {"0.1": 10, "0.5": 20, "1.0": 25, "+Inf": 25}
AFTER = {"0.1": 14, "0.5": 44, "1.0": 52, "+Inf": 54}


@pytest.mark.parametrize(
    "q, expected",
    [
        # window buckets: ≤0.1: 4, ≤0.5: 24, ≤1.0: 27, +Inf: 29
        pytest.param(0.5, 0.1 + 0.4 * (14.5 - 4) / 20, id="p50-in-second-bucket"),  # 0.31
        pytest.param(0.1, 0.1 * 2.9 / 4, id="p10-first-bucket-from-zero"),  # 0.0725
        pytest.param(0.9, 0.5 + 0.5 * (26.1 - 24) / 3, id="p90"),  # 0.85
        pytest.param(0.99, 1.0, id="p99-in-inf-bucket-gives-highest-finite-bound"),
    ],
)
def test_window_quantile_hand_computed(q, expected):
    before, after = snap(ttft(BEFORE, total_sum=5.0), 0), snap(ttft(AFTER, total_sum=12.25), 60)
    assert window_quantile(before, after, "time_to_first_token_seconds", q) == pytest.approx(expected)
    window = window_histogram(before, after, "time_to_first_token_seconds")
    assert (window.count, window.sum, window.reset) == (29.0, 7.25, False)
    assert window.mean == pytest.approx(0.25)


def test_window_merges_engines():
    before = snap(ttft(BEFORE) + ttft(BEFORE, engine="1"), 0)
    after = snap(ttft(AFTER) + ttft(BEFORE, engine="1"), 1)  # engine 1 idle during the window
    assert window_quantile(before, after, "time_to_first_token_seconds", 0.5) == pytest.approx(0.31)
    assert window_histogram(None, after, "time_to_first_token_seconds").count == 79.0


def test_window_histogram_reset_is_flagged():
    window = window_histogram(snap(ttft(AFTER), 0), snap(ttft(BEFORE), 1), "time_to_first_token_seconds")
    assert window.reset is True
    assert window.count == 25.0  # post-reset observations, not a negative difference


def test_empty_window_has_no_quantile():
    s = snap(ttft(BEFORE), 0)
    assert window_quantile(s, s, "time_to_first_token_seconds", 0.5) is None
    assert window_histogram(None, snap("", 0), "time_to_first_token_seconds") is None


@pytest.mark.parametrize(
    "buckets, q, expected",
    [
        pytest.param([(1.0, 10), (2.0, 10), (float("inf"), 10)], 0.5, 0.5, id="all-in-first"),
        pytest.param([(1.0, 0), (2.0, 10), (float("inf"), 10)], 1.0, 2.0, id="q1-top-of-bucket"),
        pytest.param([(-1.0, 5), (float("inf"), 10)], 0.2, -1.0, id="non-positive-first-bound"),
        pytest.param([(1.0, 6), (2.0, 5), (3.0, 10), (float("inf"), 10)], 0.8, 2.5, id="non-monotonic-repaired"),
        pytest.param([(1.0, 5)], 0.5, None, id="no-inf-bucket"),
    ],
)
def test_histogram_quantile_edges(buckets, q, expected):
    got = histogram_quantile(q, buckets)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_quantile_outside_unit_interval_is_refused():
    with pytest.raises(ValueError):
        histogram_quantile(1.5, [(1.0, 1), (float("inf"), 1)])
