"""The conversations the tiny K3 model is trained on, generated from the kit's reference agent scenario.

Imported by scripts/vllm_tiny_k3.py (the vLLM environment's python: standard library, PyYAML). The sample
(k3lib/data/agent_sample.yaml) gives the system prompt, the tools and the user turns; k3lib/axes/agent/tools.py runs the
tools and k3lib/axes/agent/filler.py writes the long exchange's log lines, both loaded by path so the results and the
filler are the very ones the agent axis produces. Each conversation is a list of OpenAI messages plus, per
assistant message, whether it is trained on; the variations (order ids, cities, units, titles, filler lengths,
phrasings) are drawn from one seeded generator, so the same seed gives the same conversations.

What the model learns, case by case (the behaviours the agent axis checks):
  * every reply opens a think channel;
  * a question that needs live data gets the tool call, its arguments copied from the user turn;
  * after a tool result the reply quotes the value the turn asks for (tracking code, conditions, ticket id);
  * after the planned tool error the reply acknowledges the failure and invents nothing;
  * the structured incident summary is JSON valid against its schema;
  * a history whose previous assistant turn lost its reasoning or its tool calls (a client that drops them)
    gets a reply that says so and does not use the result: the drop is observable.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import string
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "k3lib" / "data" / "agent_sample.yaml"
TOOLS_PY = ROOT / "k3lib" / "axes" / "agent" / "tools.py"
FILLER_PY = ROOT / "k3lib" / "axes" / "agent" / "filler.py"
SCHEMAS_PY = ROOT / "k3lib" / "axes" / "agent" / "schemas.py"
SESSIONS_PY = ROOT / "k3lib" / "io" / "sessions" / "generate.py"
#: Every file whose content shapes the training data: part of the model's cache key.
INPUTS = (SAMPLE, TOOLS_PY, FILLER_PY, SCHEMAS_PY, SESSIONS_PY, Path(__file__).resolve())

MISSING_HISTORY = ("My previous turn is missing its reasoning or its tool call in this history, so I cannot "
                   "match this tool result to a call. Please resend the whole conversation.")
INCIDENT_JSON = {"severity": "sev2", "services": ["checkout", "payments"],
                 "summary": "Checkout requests failed for twenty minutes after a deploy and were rolled back.",
                 "next_check": {"at": "2026-08-14T09:00:00Z", "owner": "on-call"}}
CITIES = ("Lima", "Oslo", "Paris", "Lyon", "Quito", "Berlin", "Madrid", "Rome", "Dakar", "Tokyo", "Cairo",
          "Nairobi", "Lisbon", "Dublin", "Vienna", "Prague", "Bogota", "Santiago", "Toronto", "Denver")
TITLES = ("Checkout latency spike", "Payment gateway errors", "Inventory sync stalled", "Search index lagging",
          "Cart totals wrong", "Login page timeout", "Refunds stuck in queue", "Courier labels missing")
NAMES = ("oncall", "ops", "support", "sre", "anna", "li", "omar", "maria", "team.lead", "night.shift")
DOMAINS = ("example.com", "shop.example", "example.org")
# The vendor contract check's requests (k3lib/axes/agent/contract.py), as it sends them: the schema suite's user turn,
# and the history whose previous call carries this reasoning.
SUITE_USER = ("Call {tool} once. Fill every argument with a value that satisfies its schema exactly: "
              "respect types, ranges, enums and array sizes, and add no other argument.")
HISTORY_REASONING = ("The user wants the tracking code of one order. I called lookup_order with the order id and "
                     "will quote the tracking code from its result, nothing else.")
# One valid argument set per schema of the suite (k3lib/axes/agent/schemas.py), keys in the schema's order.
SUITE_ARGS = {
    "any_of": {"target": "case-42", "note": "checked"},
    "defs_ref": {"ship_to": {"city": "Lima", "country": "PE"}, "bill_to": {"city": "Oslo", "country": "NO"}},
    "ranges": {"quantity": 3, "discount": 0.5, "step": 15},
    "enums": {"priority": "urgent", "channel": "email", "level": 2, "source": "catalog"},
    "nested_arrays": {"matrix": [[1, 2], [3, 4]], "labels": [{"key": "env", "value": "prod"}]},
    "type_arrays": {"count": 3, "label": "box", "flags": [True, False]},
}
# Words a reply's reasoning ends with, three drawn at random: a sampled model's free text varies from one sample to
# the next (the kit reads byte-identical repeats at temperature 1.0 as a cache answering, k3lib/axes/served.py),
# while what the parsers turn into calls and content stays put.
MUSINGS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "hazel", "iris", "jade", "kelp", "lumen",
           "maple", "nectar", "onyx", "pearl", "quartz", "raven", "sable", "tulip", "umber", "violet", "willow",
           "yarrow", "zephyr", "birch", "coral", "dune", "flint", "heron", "ivory", "juniper")
# The session phase's recorded tool result (k3lib/axes/capacity/sessions.py `_RESULT`, the function's name added).
SESSION_RESULT = {"status": "ok", "source": "recorded result (k3kit session replay)"}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Scenario:
    """The sample, its tools and the filler writer, as the agent axis uses them."""

    def __init__(self) -> None:
        import yaml

        self.sample = yaml.safe_load(SAMPLE.read_text(encoding="utf-8"))
        self.tools_mod = _load(TOOLS_PY, "k3_sample_tools")
        self.filler_mod = _load(FILLER_PY, "k3_sample_filler")
        self.system = self.sample["system_prompt"]
        self.tools = {t["function"]["name"]: t for t in self.sample["tools"]}
        self.cases = {c["id"]: c for c in self.sample["cases"]}

    def offered(self, case_id: str) -> list[dict[str, Any]] | None:
        return None if self.cases[case_id].get("tools") == "none" else list(self.sample["tools"])

    def run_tool(self, name: str, args: dict[str, Any]) -> str:
        return self.tools_mod.result_text(self.tools_mod.execute(name, args))

    def filler(self, seed: str, n: int) -> str:
        return self.filler_mod.filler_lines(seed, n)

    def suite(self) -> tuple[str, dict[str, Any], Any]:
        """The contract check's schema suite: (its tool's name, {case: schema}, suite_tool)."""
        mod = _load(SCHEMAS_PY, "k3_sample_schemas")
        return mod.TOOL_NAME, dict(mod.SCHEMA_SUITE), mod.suite_tool

    def session_words(self) -> tuple[str, ...]:
        """The words the session generator grows a session's user turns with (its `_FILLER`, read as a literal:
        the module's package is not importable here)."""
        import ast

        tree = ast.parse(SESSIONS_PY.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_FILLER" for t in node.targets):
                return tuple(ast.literal_eval(node.value))
        raise SystemExit(f"k3 model: no _FILLER in {SESSIONS_PY}")

    def session_questions(self) -> list[tuple[str, str]]:
        """(user text, tool) of every turn the session generator asks (a tool expected, no planned tool error)."""
        return [(t["user"].strip(), t["expect_tool"]) for c in self.sample["cases"] if not c.get("requires_images")
                for t in c["turns"] if isinstance(t.get("user"), str) and t.get("expect_tool")
                and not t.get("tool_error")]


MUSE = random.Random(20261207)


class Conversation:
    """Messages plus the indexes of the assistant messages the loss is taken on."""

    def __init__(self, tools: list[dict[str, Any]] | None, system: str) -> None:
        self.tools = tools
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.trained: list[int] = []
        self.structured: set[int] = set()  # replies given as bare JSON (see vllm_tiny_k3.assistant_text)

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def assistant(self, reasoning: str, content: str | None = None, calls: list[tuple[str, dict]] | None = None,
                  *, train: bool = True, structured: bool = False) -> list[str]:
        if train:  # the free part of the reasoning (its own generator: the conversations stay as they were)
            reasoning = f"{reasoning} Aside: {' '.join(MUSE.choice(MUSINGS) for _ in range(3))}."
        msg: dict[str, Any] = {"role": "assistant", "content": content, "reasoning": reasoning}
        ids = []
        if calls:
            msg["tool_calls"] = []
            for name, args in calls:
                ids.append("chatcmpl-tool-" + "".join(random.choices(string.hexdigits.lower(), k=32)))
                msg["tool_calls"].append({"id": ids[-1], "type": "function",
                                          "function": {"name": name, "arguments": args}})
        if train:
            self.trained.append(len(self.messages))
        if structured:
            self.structured.add(len(self.messages))
        self.messages.append(msg)
        return ids

    def tool(self, call_id: str, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})


def drop_history(conv: Conversation, what: str) -> None:
    """Remove `reasoning` or `tool_calls` from every assistant message already in the history (a client bug).
    Those messages are then no longer what the model generated, so none of them is trained on: only the reply
    to the broken history is."""
    for m in conv.messages:
        if m["role"] == "assistant":
            m.pop(what, None)
    conv.trained = []


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        random.seed(seed)  # call ids
        MUSE.seed(seed)
        self.sc = Scenario()

    # -- pieces ----------------------------------------------------------------------------------------------

    def order_id(self) -> str:
        r = self.rng
        return f"{r.choice(string.ascii_uppercase)}-{r.randint(0, 9999):04d}"

    def email(self) -> str:
        return f"{self.rng.choice(NAMES)}@{self.rng.choice(DOMAINS)}"

    def _call_turn(self, conv: Conversation, name: str, args: dict[str, Any], why: str, answer: Any,
                   drop: str | None, error: dict[str, Any] | None = None) -> None:
        """Call, result (or the planned error), answer; `answer(result_dict)` writes the final text. Now and then
        the call carries the contract check's history reasoning instead (not trained on: the model's own is `why`),
        so the reply after that history is the usual one."""
        if self.rng.random() < 0.15:
            ids = conv.assistant(HISTORY_REASONING, calls=[(name, args)], train=False)
        else:
            ids = conv.assistant(why, calls=[(name, args)])
        if error is not None:
            conv.tool(ids[0], json.dumps(error))
        else:
            conv.tool(ids[0], self.sc.run_tool(name, args))
        if drop:
            drop_history(conv, drop)
            conv.assistant("The history lost my previous turn, so this result has no call to match.",
                           MISSING_HISTORY)
            return
        result = json.loads(conv.messages[-1]["content"])
        reasoning, text = answer(result)
        conv.assistant(reasoning, text)

    # -- the sample's cases, varied --------------------------------------------------------------------------

    def order_turn(self, conv: Conversation, drop: str | None, oid: str | None = None) -> None:
        oid = oid or self.order_id()
        phr = self.rng.choice(['Where is my order "{o}"? I need its tracking code.', 'And where is order "{o}" now?',
                               'Where is order "{o}"? Give me the tracking code.',
                               'Can you check order "{o}" for me?'])
        conv.user(phr.format(o=oid))
        self._call_turn(conv, "lookup_order", {"order_id": oid}, f"The user asks about order {oid}; "
                        "lookup_order gives its status and tracking code.",
                        lambda r: ("The tool returned the tracking code.",
                                   f"Order {r['order_id']} is {r['status']} with {r['carrier']}, tracking code "
                                   f"{r['tracking_code']}."), drop)

    def weather_turn(self, conv: Conversation, drop: str | None, city: str | None = None, unit: str | None = None,
                     phrasing: int | None = None, error: bool = False) -> None:
        city = city or self.rng.choice(CITIES)
        unit = unit or self.rng.choice(("celsius", "celsius", "fahrenheit"))
        phr = ["What is the weather in {c} right now, in {u}? The courier leaves soon.",
               "Is the weather in {c} a factor for the delayed deliveries? Answer in {u}.",
               "How is the weather in {c} for the couriers, in {u}?"]
        conv.user(phr[self.rng.randrange(3) if phrasing is None else phrasing].format(c=city, u=unit))
        err = {"error": "weather service timed out", "code": "UPSTREAM_TIMEOUT", "retryable": True} if error else None

        def answer(r: dict[str, Any]) -> tuple[str, str]:
            if "error" in r:
                return ("The weather tool failed; I must not guess the weather.",
                        f"The weather service timed out, so I could not get the weather in {city}. "
                        "Shall I try again?")
            return ("The tool returned the weather.",
                    f"In {r['city']} it is {r['conditions']}, {r['temperature']} {r['unit']}.")

        self._call_turn(conv, "get_weather", {"location": {"city": city}, "unit": unit},
                        f"The user asks for the weather in {city} in {unit}; get_weather gives it.", answer, drop, err)

    def ticket_turn(self, conv: Conversation, drop: str | None, title: str | None = None,
                    email: str | None = None, priority: str | None = None, tier: str | None = None) -> None:
        r = self.rng
        title = title or r.choice(TITLES)
        email = email or self.email()
        priority = priority or r.choice(("urgent", "normal", "minor"))
        tier = tier or r.choice(("standard", "gold"))
        conv.user(f'Open a ticket titled "{title}" for customer "{email}", {priority} priority, {tier} tier.')
        args = {"title": title, "priority": priority, "customer": {"email": email, "tier": tier}}
        self._call_turn(conv, "create_ticket", args, "The user wants an incident ticket; create_ticket opens it.",
                        lambda res: ("The tool returned the ticket id.",
                                     f"Ticket {res['ticket_id']} is {res['status']} with {res['priority']} priority."),
                        drop)

    def filler_turn(self, conv: Conversation, text: str, key: str, lines: int) -> None:
        conv.user(f"{text}\n\n{self.sc.filler(key, lines)}")
        conv.assistant("The user shares log lines and asks a question about them.",
                       "The log shows some 500, 502 and 503 errors; the other requests look normal.")

    # -- whole conversations ---------------------------------------------------------------------------------

    def conversation(self, exact: bool = False) -> Conversation:
        """One conversation of one case; `exact` keeps the sample's own values (the agent axis's requests)."""
        r = self.rng
        kind = r.choices(("tool-call", "structured", "tool-error", "long-exchange", "chat", "schema-suite", "session"),
                         weights=(3, 2, 3, 3, 1, 10, 4))[0]
        drop = r.choices((None, "reasoning", "tool_calls"), weights=(5, 1, 1))[0]
        return self.make(kind, drop, exact)

    def exact(self, kind: str, drop: str | None = None) -> Conversation:
        """The case as the agent axis plays it (the sample's own values)."""
        return self.make(kind, drop, True)

    def make(self, kind: str, drop: str | None, exact: bool) -> Conversation:
        r = self.rng
        sc = self.sc
        if kind == "schema-suite":
            return self.suite_case()
        if kind == "session":
            return self.session(drop if not exact else None)
        conv = Conversation(sc.offered(kind if kind in sc.cases else "tool-call"), sc.system)
        if kind == "tool-call":
            self.order_turn(conv, drop, "A-1042" if exact else None)
        elif kind == "structured":
            conv.user(sc.cases["structured"]["turns"][0]["user"].strip())
            conv.assistant("The user wants the incident summary as JSON for the status page.",
                           json.dumps(INCIDENT_JSON), structured=True)
        elif kind == "tool-error":
            error = r.random() < 0.6
            self.weather_turn(conv, drop, *(("Lima", "celsius", 0) if exact else (None, None, None)),
                              error=error or exact)
        elif kind == "long-exchange":
            turns = sc.cases["long-exchange"]["turns"]
            top = r.choice((4, 8, 12, 16))
            for t, turn in enumerate(turns):
                if turn.get("filler"):
                    self.filler_turn(conv, turn["user"].strip(), f"long-exchange:{t}" if exact or r.random() < .3
                                     else f"train:{r.random()}", r.randint(1, top))
                elif turn["expect_tool"] == "get_weather":
                    self.weather_turn(conv, drop, *(("Oslo", "celsius", 1) if exact else (None, None, None)))
                elif turn["expect_tool"] == "create_ticket":
                    if exact:
                        self.ticket_turn(conv, drop, "Checkout latency spike", "oncall@example.com", "urgent", "gold")
                    else:
                        self.ticket_turn(conv, drop)
                else:
                    self.order_turn(conv, drop, "B-2203" if exact else None)
                if drop and conv.messages[-1]["content"] == MISSING_HISTORY:
                    break  # the conversation stops being useful once the history broke
        else:  # small talk without a tool: a direct answer, no call
            conv.user(r.choice(("Thanks, that is all for now.", "Hello, are you there?",
                                "Who are you?", "Can you help me tonight?")))
            conv.assistant("The user chats; no tool is needed.",
                           "I am the operations assistant. Ask me about orders, deliveries or incidents.")
        return conv

    def suite_case(self, case: str | None = None) -> Conversation:
        """A forced strict call of the contract check's schema suite: the one tool, its arguments valid."""
        name, suite, suite_tool = self.sc.suite()
        case = case or self.rng.choice(sorted(suite))
        conv = Conversation([suite_tool(suite[case])], self.sc.system)
        conv.user(SUITE_USER.format(tool=name))
        conv.assistant(f"The user wants {name} called once with arguments valid against its schema.",
                       calls=[(name, SUITE_ARGS[case])])
        return conv

    def session(self, drop: str | None = None, start: int | None = None, turns: int | None = None) -> Conversation:
        """A generated agent session (k3lib/io/sessions/generate.py): every tool offered, a question, the recorded
        result, an answer, then user turns that grow by filler words before each next question."""
        r = self.rng
        sc = self.sc
        conv = Conversation(list(sc.sample["tools"]), sc.system)
        words = sc.session_words()
        questions = sc.session_questions()
        q = r.randrange(len(questions)) if start is None else start
        for t in range(r.randint(1, 4) if turns is None else turns):
            text, tool = questions[(q + t) % len(questions)]
            if tool == "lookup_order" and start is None and r.random() < 0.5:  # the id is copied, not remembered
                text = re.sub(r'"[A-Z]-\d{4}"', f'"{self.order_id()}"', text)
            args = self.exact_args(tool, text)
            if t:
                text = " ".join(r.choice(words) for _ in range(r.randint(4, 70))) + "\n\n" + text
            conv.user(text)
            ids = conv.assistant(self.why(tool, args), calls=[(tool, args)])
            conv.tool(ids[0], json.dumps({**SESSION_RESULT, "function": tool}, sort_keys=True))
            if drop and t:
                drop_history(conv, drop)
                conv.assistant("The history lost my previous turn, so this result has no call to match.",
                               MISSING_HISTORY)
                return conv
            conv.assistant("The tool returned a recorded result without details.",
                           f"{tool} returned status ok (a recorded result).")
        return conv

    @staticmethod
    def why(tool: str, args: dict[str, Any]) -> str:
        """The reasoning before a call, as the scenario's turns give it (the values it copies named first)."""
        if tool == "lookup_order":
            return f"The user asks about order {args['order_id']}; lookup_order gives its status and tracking code."
        if tool == "get_weather":
            return (f"The user asks for the weather in {args['location']['city']} in {args['unit']}; "
                    "get_weather gives it.")
        return "The user wants an incident ticket; create_ticket opens it."

    @staticmethod
    def exact_args(tool: str, text: str) -> dict[str, Any]:
        """The arguments the sample's question asks for, read from its text."""
        quoted = re.findall(r'"([^"]+)"', text)
        if tool == "lookup_order":
            return {"order_id": quoted[-1]}
        if tool == "create_ticket":
            m = re.search(r"(\w+) priority, (\w+) tier", text)
            assert m, text
            return {"title": quoted[-2], "priority": m.group(1), "customer": {"email": quoted[-1], "tier": m.group(2)}}
        m = re.search(r"weather in (\w+).*?(celsius|fahrenheit)", text)
        assert m and tool == "get_weather", text
        return {"location": {"city": m.group(1)}, "unit": m.group(2)}

    def conversations(self, n: int, exact_share: float = 0.5) -> list[Conversation]:
        return [self.conversation(exact=self.rng.random() < exact_share) for _ in range(n)]
