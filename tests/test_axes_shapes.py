"""The axes' JSON shapes (k3lib/axes/shapes.py, k3lib/axes/agent/shapes.py) are TypedDicts: nothing checks them at run
time, so each is held here to the dict its writer really produces (the same keys, in the same order), and the records
that replaced a hand-written to_dict dump the same row."""

from __future__ import annotations

from k3lib.axes.agent.checks import CheckResult, RateRow, check_rows, rates
from k3lib.axes.agent.scenario import RunSettings, assistant_message, history_message, parsed_reply, reply_record
from k3lib.axes.agent.shapes import CheckRow, ParsedReply, SettingsRow, StoredCall
from k3lib.axes.estimate import AxisEstimate, PhaseEstimate
from k3lib.axes.probe import EndpointProbe
from k3lib.axes.shapes import RecordedCall, Reply
from k3lib.io.crosscheck import CrossCheck, CrossCheckDict, CrossCheckItem, CrossCheckItemDict
from k3lib.io.chatstream import ToolCall
from k3lib.io.client.records import ChatRecord


def keys(shape: type) -> list[str]:
    return list(shape.__annotations__)


def record(**fields) -> ChatRecord:
    base = {"request_id": "r1", "url": "http://127.0.0.1:1/v1/chat/completions", "stream": True,
            "wall_anchor_ns": 0, "perf_anchor_ns": 0, "enqueued_ns": 0, "sent_ns": 10, "done_ns": 2_000_000,
            "http_status": 200, "content": "done", "reasoning": "think", "reasoning_field": "reasoning",
            "tool_calls": (ToolCall(0, "c1", "function", "lookup_order", '{"order_id": "A-1042"}'),)}
    return ChatRecord(**{**base, **fields})


def test_a_reply_record_has_the_shape_the_client_writes():
    rec = record()
    reply = reply_record(rec)
    assert list(reply) == keys(Reply)
    assert list(reply["tool_calls"][0]) == keys(RecordedCall)
    parsed = parsed_reply(rec)
    assert list(parsed) == keys(ParsedReply)
    assert list(parsed["tool_calls"][0]) == keys(StoredCall) == list(rec.tool_calls[0].model_dump())


def test_the_assistant_message_goes_back_as_received_or_as_the_history_mode_drops_it():
    both = assistant_message(record(reasoning_field="both"))
    assert both["reasoning"] == both["reasoning_content"] == "think" and both["tool_calls"][0]["id"] == "c1"
    assert list(history_message(both, "full")) == list(both)
    assert list(history_message(both, "drop-reasoning")) == ["role", "content", "tool_calls"]
    assert list(history_message(both, "drop-tool-calls")) == ["role", "content", "reasoning", "reasoning_content"]
    assert "reasoning_content" not in assistant_message(record())


def test_check_rows_and_settings_are_their_models_dumps():
    rows = check_rows([CheckResult("function_name", True, "lookup_order")])
    assert rows == [{"check": "function_name", "passed": True, "detail": "lookup_order"}]
    assert list(rows[0]) == keys(CheckRow)
    assert keys(SettingsRow) == list(RunSettings.model_fields)


def test_a_rate_row_dumps_the_row_the_record_keeps():
    row = next(r for r in rates([(1, CheckResult("function_name", True, "x"))] * 2
                                + [(1, CheckResult("function_name", False, "y"))], [1]) if r.check == "function_name")
    assert row.model_dump() == {"level": 1, "check": "function_name", "passed": 2, "failed": 1, "total": 3,
                                "rate": 0.6667}
    assert row.pass_rate == 2 / 3  # judged whole, shown rounded
    empty = RateRow(level=2, check="final_answer", passed=0, failed=0, total=0)
    assert empty.pass_rate is None and empty.model_dump()["rate"] is None


def test_an_axis_estimate_dumps_the_plans_entry():
    phases = (PhaseEstimate("a", 3, 1.04, "requests", at_most=5), PhaseEstimate("b", 2, 2.0, "duration"))
    est = AxisEstimate.of("02_agent_tools.ipynb", "agent", phases)
    assert est.requests == 5 and est.at_most == 7 and est.seconds > 4.5
    assert est.model_dump(mode="json") == {
        "notebook": "02_agent_tools.ipynb", "axis": "agent", "seconds": round(est.seconds, 1), "requests": 5,
        "at_most": 7, "phases": [{"name": "a", "requests": 3, "seconds": 1.04, "bound": "requests", "at_most": 5,
                                  "warning": None},
                                 {"name": "b", "requests": 2, "seconds": 2.0, "bound": "duration", "at_most": None,
                                  "warning": None}]}


def test_the_cross_check_and_the_probe_rows_have_their_shapes():
    item = CrossCheckItem("requests", 3.0, 3.0, 0.0, "requests")
    check = CrossCheck((item,))
    assert list(check.model_dump()) == keys(CrossCheckDict)
    assert list(item.model_dump()) == keys(CrossCheckItemDict)
    probe = EndpointProbe("health", "http://x/health", 200, 1.5, "x" * 10, "text/plain", None, "now")
    row = probe.kept(4).model_dump()
    assert list(row) == list(EndpointProbe.model_fields) and row["body"] == "xxxx" and row["body_truncated"] is True
    assert EndpointProbe.model_validate(row) == probe.kept(4) and probe.body_truncated is False
