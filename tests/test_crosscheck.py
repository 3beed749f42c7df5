"""Client vs server cross-check over one window, against the emulator on a real socket."""

from __future__ import annotations

from k3lib.io.client import SyncChatClient
from k3lib.io.crosscheck import CrossCheckItem, cross_check
from k3lib.io.metrics import scrape


def test_isolated_window_agrees_on_counts_and_latency(emulator):
    client = SyncChatClient(emulator.url)
    try:
        before = scrape([emulator.metrics_url])
        records = [client.chat([{"role": "user", "content": f"cross-check request number {i}"}], max_tokens=12)
                   for i in range(6)]
        after = scrape([emulator.metrics_url])
    finally:
        client.close()
    check = cross_check(records, before, after)
    by = {i.quantity: i for i in check.items}
    assert by["requests finished"].client == 6 and by["requests finished"].agrees
    assert by["prompt tokens"].agrees and by["prompt tokens"].client > 0
    assert by["generation tokens"].agrees and by["generation tokens"].client == by["generation tokens"].server
    assert by["TTFT p50"].agrees, by["TTFT p50"]
    assert by["e2e p90"].agrees, by["e2e p90"]
    assert check.disagreements == []


def test_foreign_load_in_the_window_is_a_disagreement(emulator):
    """Requests the client did not send (another tenant) show up as a gap, not silently."""
    client = SyncChatClient(emulator.url)
    try:
        before = scrape([emulator.metrics_url])
        mine = [client.chat([{"role": "user", "content": "mine"}], max_tokens=4)]
        client.chat([{"role": "user", "content": "someone else's request"}], max_tokens=4)
        after = scrape([emulator.metrics_url])
    finally:
        client.close()
    check = cross_check(mine, before, after)
    assert {"requests finished", "prompt tokens", "generation tokens"} <= {i.quantity for i in check.disagreements}


def test_item_arithmetic():
    assert CrossCheckItem("x", 10.0, 7.0, 2.0, "ms").agrees is False
    assert CrossCheckItem("x", 10.0, 9.0, 2.0, "ms").diff == 1.0
    assert CrossCheckItem("x", None, 9.0, 2.0, "ms").agrees is None
