"""In-memory MCP client tests of every tool, resource and prompt (FakeEngine/FakeEmbedder, tmp DB)."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp_types import ElicitResult
from test_server_support import TRAVEL_TOOLS, RuleEngine, make_server, server_settings, travel_engine

from prefcall.engine.fake import FakeEmbedder
from prefcall.errors import ModelNotFoundError
from prefcall.server.app import create_server
from prefcall.server.services import Services

ALL_TOOLS = {
    "parse_request", "select_tools_nlt", "clarify", "tag_profile", "create_profile", "add_instruction",
    "remove_instruction", "list_instructions", "list_catalogues", "import_catalogue", "report_feedback",
}  # fmt: skip
DELTA = "When I book flights, I always fly Delta."


def run(fn, *args):
    return anyio.run(fn, *args)


class Session:
    """A connected client plus the tools' output schemas, validating every structured result."""

    def __init__(self, client: Client, schemas: dict[str, dict[str, Any]]) -> None:
        self.client = client
        self.schemas = schemas

    async def ok(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, result.content[0].text
        jsonschema.validate(result.structured_content, self.schemas[tool])
        return result.structured_content

    async def error(self, tool: str, arguments: dict[str, Any]) -> str:
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, f"{tool} should have failed: {result.structured_content}"
        text = result.content[0].text
        assert "\n" not in text.strip(), f"error message is not one line: {text!r}"
        return text


async def connect(server, **kwargs) -> tuple[Client, Session]:
    client = Client(server, **kwargs)
    await client.__aenter__()
    tools = await client.list_tools()
    return client, Session(client, {t.name: t.output_schema for t in tools.tools})


async def seeded(session: Session, user: str = "alice", instruction: str = DELTA) -> None:
    await session.ok("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS, "replace": True})
    await session.ok("add_instruction", {"user_id": user, "text": instruction})


def with_session(server, body, **client_kwargs):
    async def main():
        client, session = await connect(server, **client_kwargs)
        try:
            return await body(session)
        finally:
            await client.__aexit__(None, None, None)

    return run(main)


# ------------------------------------------------------------------------------- listing
def test_every_tool_is_listed_with_schemas_and_annotations(tmp_path: Path) -> None:
    async def body(session: Session):
        tools = {t.name: t for t in (await session.client.list_tools()).tools}
        assert ALL_TOOLS <= set(tools)
        for tool in tools.values():
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema and tool.output_schema.get("type") == "object", tool.name
            assert tool.description and tool.annotations is not None
            assert tool.annotations.open_world_hint is False
        for name in ("parse_request", "select_tools_nlt", "clarify", "list_instructions", "list_catalogues"):
            assert tools[name].annotations.read_only_hint is True
        for name in ("remove_instruction", "import_catalogue"):
            assert tools[name].annotations.destructive_hint is True
        for name in ("add_instruction", "report_feedback", "tag_profile", "create_profile"):
            assert tools[name].annotations.read_only_hint is False
            assert tools[name].annotations.destructive_hint is False
        assert tools["add_instruction"].annotations.idempotent_hint is False
        assert "dialogue" in tools["parse_request"].input_schema["required"]

    with_session(make_server(tmp_path), body)


# ------------------------------------------------------------------------------- the tools
def test_parse_request_fills_calls_from_the_users_instructions(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        result = await session.ok("parse_request", {"user_id": "alice", "dialogue": "Find me a flight to Boston",
                                                    "catalogue": "travel", "config": "default"})
        assert result["decision"] == "call" and result["status"] == "ok"
        assert result["calls"] == [{"name": "GetFlights",
                                    "arguments": {"destination_city": "Boston", "airlines": "Delta"}}]
        assert DELTA in result["instructions_used"]
        assert result["trace"]["model_calls"] >= 2 and result["trace"]["prompt_tokens"] > 0
        assert 0.0 <= result["confidence"] <= 1.0

    with_session(make_server(tmp_path), body)


def test_parse_request_says_which_evidence_refused_a_request_no_tool_fits(tmp_path: Path) -> None:
    engine = travel_engine()
    # Stage 1's model finds "None" likely for this request only (a constant preference would be calibrated away).
    engine.scorer = lambda prompt, candidate: -0.1 if (candidate.strip() == "None") == ("weather" in prompt) else -6.0

    async def body(session: Session):
        await seeded(session)
        result = await session.ok("parse_request", {"user_id": "alice", "dialogue": "What's the weather like?",
                                                    "catalogue": "travel", "config": "full"})
        assert result["decision"] == "refuse" and result["calls"] == [], json.dumps(result)
        why = [n for n in result["notes"] if n.startswith("refuse: the request is not about the catalogue")]
        assert len(why) == 1 and 'stage 1 scored "None"' in why[0] and "the closest function Get" in why[0]

    with_session(make_server(tmp_path, engine=engine), body)


def _prefers(function: str, **values: str):
    """A scorer for the fake: stage 1 likes `function`; for argument A (the prompt ends in `{"A": `) the model
    likes values[A] and otherwise null, as a model reading the request would."""
    def score(prompt: str, candidate: str) -> float:
        argument = re.search(r'\{"(\w+)": $', prompt)
        if argument is None:
            return -0.1 if candidate.strip() == function else -4.0
        wanted = values.get(argument.group(1))
        if wanted is None:
            return -0.1 if candidate == "null" else -12.0
        # Sure of its answers: with closing quotes healed a real model's right values sit ~6 nats above null.
        return -0.1 if candidate == json.dumps(wanted) else -12.0
    return score


def test_parse_request_accepts_turns_with_earlier_calls_and_the_full_config(tmp_path: Path) -> None:
    engine = travel_engine()
    engine.scorer = _prefers("GetFlights", destination_city="Boston", airlines="Delta")

    async def body(session: Session):
        await seeded(session)
        dialogue = [
            {"role": "user", "content": "Find me a flight to Boston"},
            {"role": "assistant", "content": "Here are flights.",
             "calls": [{"name": "GetFlights", "arguments": {"destination_city": "Boston"}}]},
            {"role": "user", "content": "And a hotel there"},
        ]
        result = await session.ok("parse_request", {"user_id": "alice", "dialogue": dialogue,
                                                    "catalogue": "travel", "config": "full"})
        assert result["config"] == "full" and result["decision"] == "call", json.dumps(result)
        # The full config (scored stage 1, grounded values, preferences from tags, post-check): the city comes from
        # the user's words, the airline from alice's standing instruction, and the result says who set what.
        assert result["calls"][0]["arguments"] == {"destination_city": "Boston", "airlines": "Delta"}
        origins = {p["argument"]: (p["origin"], p.get("instruction")) for p in result["provenance"]}
        assert origins == {"destination_city": ("user", None), "airlines": ("instruction", DELTA)}
        prompt = "\n".join(engine.prompts)
        assert "And a hotel there" in prompt and "GetFlights" in prompt  # earlier turns and calls reach the model

    with_session(make_server(tmp_path, engine=engine), body)


def test_parse_request_returns_the_conversations_state_and_takes_it_back_for_the_next_turn(tmp_path: Path) -> None:
    engine = travel_engine()
    engine.scorer = _prefers("GetFlights", destination_city="Boston", origin_city="Denver", airlines="Delta")

    async def body(session: Session):
        await seeded(session)
        first = await session.ok("parse_request", {"user_id": "alice", "dialogue": "Find me a flight to Boston",
                                                   "catalogue": "travel", "config": "full"})
        state = first["state"]
        assert state["active"] == "GetFlights" and state["turn"] == 0
        held = state["functions"]["GetFlights"]["arguments"]
        assert held["destination_city"] == {"value": "Boston", "origin": "user", "turn": 0, "instruction": None,
                                            "source": held["destination_city"]["source"]}
        assert held["airlines"]["origin"] == "instruction" and held["airlines"]["instruction"] == DELTA
        # Stateless: the next turn alone, with the state the first one returned. The new value is added with its
        # turn; the city from turn 0 stays, with its turn and source.
        second = await session.ok("parse_request", {"user_id": "alice", "dialogue": "Leaving from Denver",
                                                    "catalogue": "travel", "config": "full", "state": state})
        after = second["state"]["functions"]["GetFlights"]["arguments"]
        assert second["state"]["turn"] == 1
        assert (after["origin_city"]["value"], after["origin_city"]["turn"], after["origin_city"]["origin"]) == \
            ("Denver", 1, "user")
        assert (after["destination_city"]["value"], after["destination_city"]["turn"]) == ("Boston", 0)
        # The same conversation sent whole, with the first turn's call on the assistant turn: the same answer.
        whole = await session.ok("parse_request", {"user_id": "alice", "catalogue": "travel", "config": "full",
                                                   "dialogue": [
            {"role": "user", "content": "Find me a flight to Boston"},
            {"role": "assistant", "content": "Here are flights.", "calls": first["calls"]},
            {"role": "user", "content": "Leaving from Denver"}]})
        assert whole["calls"] == second["calls"]
        assert {k: v["value"] for k, v in whole["state"]["functions"]["GetFlights"]["arguments"].items()} == \
            {k: v["value"] for k, v in after.items()}
        # A state for another catalogue is refused, in one line.
        wrong = {**state, "functions": {"BookTrain": {"arguments": {}, "turn": 0}}}
        message = await session.error("parse_request", {"user_id": "alice", "dialogue": "Leaving from Denver",
                                                        "catalogue": "travel", "state": wrong})
        assert "BookTrain" in message and "travel" in message

    with_session(make_server(tmp_path, engine=engine), body)


def test_parse_request_keeps_a_named_conversations_state_per_user_and_gives_the_stateless_answer(
        tmp_path: Path) -> None:
    engine = travel_engine()
    engine.scorer = _prefers("GetFlights", destination_city="Boston", origin_city="Denver", airlines="Delta")

    async def body(session: Session):
        await seeded(session)
        await session.ok("add_instruction", {"user_id": "bob", "text": DELTA})
        ask = {"catalogue": "travel", "config": "full"}
        first = await session.ok("parse_request", {**ask, "user_id": "alice", "dialogue": "Find me a flight to Boston",
                                                   "conversation_id": "trip"})
        stateless = await session.ok("parse_request", {**ask, "user_id": "alice", "dialogue": "Leaving from Denver",
                                                       "state": first["state"]})
        kept = await session.ok("parse_request", {**ask, "user_id": "alice", "dialogue": "Leaving from Denver",
                                                  "conversation_id": "trip"})
        assert kept["calls"] == stateless["calls"] and kept["state"] == stateless["state"]
        assert kept["state"]["functions"]["GetFlights"]["arguments"]["destination_city"]["turn"] == 0
        # Another user's conversation of the same name starts afresh.
        other = await session.ok("parse_request", {**ask, "user_id": "bob", "dialogue": "Leaving from Denver",
                                                   "conversation_id": "trip"})
        assert other["state"]["turn"] == 0 and "destination_city" not in \
            other["state"]["functions"].get("GetFlights", {}).get("arguments", {})
        message = await session.error("parse_request", {**ask, "user_id": "alice", "dialogue": "Leaving from Denver",
                                                        "conversation_id": "trip", "state": first["state"]})
        assert "not both" in message

    with_session(make_server(tmp_path, engine=engine), body)


def test_two_turns_of_one_conversation_at_once_run_one_after_the_other() -> None:
    from prefcall.schemas.model import Call
    from prefcall.schemas.state import DialogueState
    from prefcall.server.conversations import Conversations

    now = [0.0]
    kept = Conversations(limit=2, ttl_s=60.0, clock=lambda: now[0])
    key = ("local", "alice", "travel", "trip")
    order: list[str] = []

    async def turn(name: str, call: Call) -> None:
        async with kept.turn(key):
            state = kept.get(key) or DialogueState()
            order.append(f"{name} read {len(state.functions)}")
            await anyio.sleep(0.01)
            kept.put(key, state.updated([call], state.turn + 1))

    async def both() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(turn, "a", Call(name="GetFlights", arguments={"destination_city": "Boston"}))
            group.start_soon(turn, "b", Call(name="GetHotels", arguments={"location": "Boston"}))

    run(both)
    assert sorted(order) == ["a read 0", "b read 1"] or sorted(order) == ["a read 1", "b read 0"]
    assert set(kept.get(key).functions) == {"GetFlights", "GetHotels"}  # neither turn's values were lost
    now[0] = 61.0  # past the expiry: the conversation starts afresh
    assert kept.get(key) is None and len(kept) == 0
    for n in range(3):  # bounded: the least recently used goes first
        kept.put(("local", "alice", "travel", str(n)), DialogueState())
    assert len(kept) == 2 and kept.get(("local", "alice", "travel", "0")) is None


def test_select_tools_nlt_with_a_tool_list_and_with_a_catalogue(tmp_path: Path) -> None:
    engine = RuleEngine([("Message:", "Thinking: flights are asked for.\nGetFlights - YES\nGetHotels - NO\n"
                                      "Assessment finished.")])

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
        openai_tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                          "parameters": t["inputSchema"]}} for t in TRAVEL_TOOLS]
        for source in ({"tools": TRAVEL_TOOLS}, {"tools": openai_tools}, {"catalogue": "travel"}):
            result = await session.ok("select_tools_nlt", {"message": "A flight to Boston please", **source,
                                                           "mode": "generate"})
            assert result["mode"] == "generate"
            assert {d["name"] for d in result["decisions"]} <= {"GetFlights", "GetHotels"}
        scored = await session.ok("select_tools_nlt", {"message": "A flight", "tools": TRAVEL_TOOLS, "mode": "score"})
        assert [d["name"] for d in scored["decisions"]] == ["GetFlights", "GetHotels"]
        assert all(0.0 <= d["probability"] <= 1.0 for d in scored["decisions"])

    with_session(make_server(tmp_path, engine=engine), body)


def test_select_tools_nlt_default_is_calibrated_scoring_where_no_tool_is_an_answer(tmp_path: Path) -> None:
    import math

    # A model that says YES to everything (P = 0.98, like the embedded model), a little more to the hotel tool
    # when the message asks for a hotel: calibration against content-free requests keeps only that one.
    def scorer(prompt: str, candidate: str) -> float:
        p = 0.995 if "Message: Book me a hotel" in prompt and prompt.endswith("GetHotels -") else 0.98
        return math.log(p if candidate == " YES" else 1 - p)

    engine = RuleEngine()
    engine.scorer = scorer

    async def body(session: Session):
        first = await session.ok("select_tools_nlt", {"message": "Book me a hotel in Paris", "tools": TRAVEL_TOOLS})
        assert first["mode"] == "score" and first["status"] == "ok"
        assert first["selected"] == ["GetHotels"]
        chosen = {d["name"]: d for d in first["decisions"]}
        assert chosen["GetHotels"]["probability"] > 0.5 >= chosen["GetFlights"]["probability"]
        # The host sees why: each tool's evidence and the rule that decided.
        assert chosen["GetHotels"]["score"] > chosen["GetFlights"]["score"]
        assert chosen["GetHotels"]["lexical"] > 0 and math.isfinite(chosen["GetHotels"]["model_logodds"])
        assert first["threshold"] is not None and set(first["rule"]) >= {"model_weight", "lexical_weight", "threshold"}
        # The content-free baseline is computed once per catalogue: the second request scores only its own tools.
        none = await session.ok("select_tools_nlt", {"message": "thanks, that's all", "tools": TRAVEL_TOOLS})
        assert none["status"] == "ok" and none["selected"] == [] and len(none["decisions"]) == 2
        assert none["trace"]["model_calls"] == len(TRAVEL_TOOLS) < first["trace"]["model_calls"]

    with_session(make_server(tmp_path, engine=engine), body)


def test_select_tools_nlt_reports_reasoning_when_the_model_writes_it(tmp_path: Path) -> None:
    from prefcall.strategies.nlt import nlt_system_prompt

    marker = nlt_system_prompt([])[:30]
    engine = RuleEngine([(marker, "Thinking: the user wants a flight.\nGetFlights - YES\nGetHotels - NO\n"
                                  "Assessment finished.")])

    async def body(session: Session):
        result = await session.ok("select_tools_nlt", {"message": "A flight to Boston", "tools": TRAVEL_TOOLS,
                                                       "mode": "generate"})
        assert result["status"] == "ok", result
        assert result["selected"] == ["GetFlights"]
        assert "flight" in (result["reasoning"] or "")

    with_session(make_server(tmp_path, engine=engine), body)


def test_clarify_returns_the_question_as_data_without_elicitation(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        result = await session.ok("clarify", {"user_id": "alice", "dialogue": "Find me a hotel",
                                              "catalogue": "travel"})
        assert result["decision"] in ("question", "continue", "limitation")
        assert result["elicited"] is False
        if result["decision"] == "question":
            assert result["question"] and result["missing_arguments"]

    with_session(make_server(tmp_path), body)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_clarify_asks_the_user_through_elicitation_and_folds_the_answer_in(tmp_path: Path, mode: str) -> None:
    asked: list[Any] = []

    async def answer(context, params):
        asked.append(params)
        fields = params.requested_schema["properties"]
        return ElicitResult(action="accept", content={name: "Paris" for name in fields})

    async def body(session: Session):
        await seeded(session)
        result = await session.ok("clarify", {"user_id": "alice", "dialogue": "Find me a hotel",
                                              "catalogue": "travel"})
        if not asked:
            pytest.fail(f"no elicitation happened; clarify said {result}")
        assert asked[0].message == result["question"] or asked[0].message
        assert result["elicited"] is True and result["elicitation_action"] == "accept"
        assert set(result["answer"].values()) == {"Paris"}

    with_session(make_server(tmp_path), body, elicitation_callback=answer, mode=mode)


def test_clarify_reports_a_declined_elicitation(tmp_path: Path) -> None:
    async def decline(context, params):
        return ElicitResult(action="decline")

    async def body(session: Session):
        await seeded(session)
        result = await session.ok("clarify", {"user_id": "alice", "dialogue": "Find me a hotel",
                                              "catalogue": "travel"})
        if result["decision"] == "question":
            assert result["elicited"] is True and result["elicitation_action"] == "decline"
            assert result["question"]

    with_session(make_server(tmp_path), body, elicitation_callback=decline)


def test_tag_profile_stores_valid_tags_and_skips_fresh_ones(tmp_path: Path) -> None:
    # tag_profile uses the tagger parse_request uses (constrained structured tags: function scored, values chosen
    # among the instruction's spans), so the stored tag is the one parse_request would make.
    engine = travel_engine()
    engine.scorer = _prefers("GetFlights", airlines="Delta")

    async def body(session: Session):
        await seeded(session)
        result = await session.ok("tag_profile", {"user_id": "alice", "catalogue": "travel"})
        assert result["tagged"] == 1 and result["invalid"] == 0, result
        assert result["instructions"][0]["tags"] == (
            "[IN:GET_FLIGHTS When I book flights, I always fly [SL:AIRLINES Delta ] . ]")
        profile = await session.ok("list_instructions", {"user_id": "alice"})
        assert profile["instructions"][0]["tags"] == result["instructions"][0]["tags"]
        again = await session.ok("tag_profile", {"user_id": "alice", "catalogue": "travel"})
        assert again["skipped"] == 1 and again["tagged"] == 0

    with_session(make_server(tmp_path, engine=engine), body)


def test_profile_tools_add_list_remove(tmp_path: Path) -> None:
    async def body(session: Session):
        created = await session.ok("create_profile", {"user_id": "carol"})
        assert created["action"] == "created"
        assert (await session.ok("create_profile", {"user_id": "carol"}))["action"] == "exists"
        first = await session.ok("add_instruction", {"user_id": "carol", "text": "I like Thai food."})
        await session.ok("add_instruction", {"user_id": "carol", "text": "I fly United."})
        listed = await session.ok("list_instructions", {"user_id": "carol"})
        assert [i["text"] for i in listed["instructions"]] == ["I like Thai food.", "I fly United."]
        removed = await session.ok("remove_instruction", {"user_id": "carol",
                                                          "instruction_id": first["instruction"]["id"]})
        assert removed["instructions"] == 1
        assert "no instruction" in await session.error(
            "remove_instruction", {"user_id": "carol", "instruction_id": 999})

    with_session(make_server(tmp_path), body)


def test_catalogue_tools_import_list_and_refuse_overwrites(tmp_path: Path) -> None:
    async def body(session: Session):
        imported = await session.ok("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
        assert imported == {"name": "travel", "functions": ["GetFlights", "GetHotels"], "replaced": False}
        listed = await session.ok("list_catalogues", {})
        names = {c["name"]: c for c in listed["catalogues"]}
        assert {"nlsi", "sgd", "travel"} <= set(names) and names["nlsi"]["builtin"] is True
        assert "replace=true" in await session.error("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
        again = await session.ok("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS[:1], "replace": True})
        assert again["replaced"] is True and again["functions"] == ["GetFlights"]
        assert "built-in" in await session.error("import_catalogue", {"name": "nlsi", "tools": TRAVEL_TOOLS})

    with_session(make_server(tmp_path), body)


def test_report_feedback_stores_a_demonstration(tmp_path: Path) -> None:
    from prefcall.storage.demos import DemoStore

    async def body(session: Session):
        await seeded(session)
        call = {"name": "GetFlights", "arguments": {"destination_city": "Boston", "airlines": "Delta"}}
        stored = await session.ok("report_feedback", {"user_id": "alice", "dialogue": "A flight to Boston",
                                                      "catalogue": "travel", "calls": [call]})
        assert stored["stored"] is True and stored["demonstration_id"]
        corrected = await session.ok("report_feedback", {"user_id": "alice", "dialogue": "A flight to Boston",
                                                         "catalogue": "travel", "calls": [call],
                                                         "outcome": "corrected"})
        assert corrected["corrected"] is True
        rejected = await session.ok("report_feedback", {"user_id": "alice", "dialogue": "A flight",
                                                        "catalogue": "travel", "calls": [call],
                                                        "outcome": "rejected"})
        assert rejected["stored"] is False
        assert "not in catalogue" in await session.error(
            "report_feedback", {"user_id": "alice", "dialogue": "x", "catalogue": "travel",
                                "calls": [{"name": "BookTrain", "arguments": {}}]})
        return stored["demonstration_id"]

    demo_id = with_session(make_server(tmp_path), body)
    demos = DemoStore(tmp_path / "prefcall.db").all("travel")
    assert demo_id in {d.id for d in demos}
    assert any(d.calls[0].arguments.get("airlines") == "Delta" and DELTA in d.instructions for d in demos)


# ------------------------------------------------------------------------------- resources and prompt
def test_resources_and_prompt(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        client = session.client
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert {"profiles://{user_id}", "schemas://{catalogue}"} <= templates
        assert "schemas://catalogues" in {str(r.uri) for r in (await client.list_resources()).resources}
        profile = json.loads((await client.read_resource("profiles://alice")).contents[0].text)
        assert profile["user_id"] == "alice" and profile["instructions"][0]["text"] == DELTA
        listing = json.loads((await client.read_resource("schemas://catalogues")).contents[0].text)
        assert "travel" in {c["name"] for c in listing["catalogues"]}
        catalogue = json.loads((await client.read_resource("schemas://travel")).contents[0].text)
        assert [f["name"] for f in catalogue["functions"]] == ["GetFlights", "GetHotels"]
        with pytest.raises(Exception, match="unknown catalogue"):
            await client.read_resource("schemas://nowhere")
        with pytest.raises(Exception, match="unknown user"):
            await client.read_resource("profiles://nobody")
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert "use_prefcall" in prompts
        prompt = await client.get_prompt("use_prefcall", {"user_id": "alice", "catalogue": "travel"})
        text = prompt.messages[0].content.text
        assert "parse_request" in text and "alice" in text and "report_feedback" in text

    with_session(make_server(tmp_path), body)


# ------------------------------------------------------------------------------- model loading, logging
def test_a_tool_call_waits_for_the_model_and_reports_progress(tmp_path: Path) -> None:
    release = threading.Event()

    def slow_engine(settings):
        release.wait(30)  # still loading until the tool call is under way (no race with a loaded machine)
        return travel_engine()

    services = Services(server_settings(tmp_path), load_engine=slow_engine, load_embedder=lambda s: FakeEmbedder())
    server = create_server(server_settings(tmp_path), services=services)
    progress: list[Any] = []

    async def body(session: Session):
        await seeded(session)  # profile tools do not wait for the model
        assert not services.models.ready

        async def on_progress(value, total, message):
            progress.append(message)
            release.set()  # the call is waiting for the model and said so: now let the load finish

        async def call():
            return await session.client.call_tool(
                "parse_request", {"user_id": "alice", "dialogue": "A flight to Boston", "catalogue": "travel",
                                  "config": "default"}, progress_callback=on_progress)

        async with anyio.create_task_group() as group:
            outcome = {}

            async def run_call():
                outcome["result"] = await call()

            group.start_soon(run_call)  # the load ends on the first progress report (or, failing that, after 30 s)
        result = outcome["result"]
        assert not result.is_error, result.content[0].text
        assert result.structured_content["calls"][0]["arguments"]["airlines"] == "Delta"

    with_session(server, body)
    assert progress and "loading" in progress[0]


def test_a_failed_model_load_is_a_tool_error_and_profiles_still_work(tmp_path: Path) -> None:
    def missing(settings):
        raise ModelNotFoundError("model file not found: /nope.gguf: set PREFCALL_MODEL")

    services = Services(server_settings(tmp_path), load_engine=missing, load_embedder=lambda s: FakeEmbedder())
    server = create_server(server_settings(tmp_path), services=services)

    async def body(session: Session):
        await seeded(session)
        message = await session.error("parse_request", {"user_id": "alice", "dialogue": "A flight",
                                                        "catalogue": "travel"})
        assert "PREFCALL_MODEL" in message
        assert (await session.ok("list_instructions", {"user_id": "alice"}))["instructions"]

    with_session(server, body)


def test_log_notifications_reach_clients_that_opt_in(tmp_path: Path) -> None:
    messages: list[str] = []

    async def on_log(params):
        messages.append(str(params.data))

    async def body(session: Session):
        await seeded(session)
        await session.ok("parse_request", {"user_id": "alice", "dialogue": "A flight to Boston",
                                           "catalogue": "travel", "config": "default"})

    with_session(make_server(tmp_path), body, logging_callback=on_log, log_level="info")
    assert any("parse_request for alice" in m for m in messages)
    assert any("decision call" in m for m in messages)


def test_injected_stores_are_used(tmp_path: Path) -> None:
    from prefcall.storage.profiles import ProfileStore
    from prefcall.schemas.registry import CatalogueRegistry
    from prefcall.storage.demos import DemoStore

    db = tmp_path / "injected.db"
    profiles = ProfileStore(db)
    profiles.create_user("erin")
    profiles.add_instruction("erin", "When I book flights, I always fly KLM.")
    # A factory: DemoStore's SQLite connection is bound to the thread that opens it (the model thread).
    server = create_server(server_settings(tmp_path), engine=travel_engine(), embedder=FakeEmbedder(),
                           store=profiles, catalogues=lambda: CatalogueRegistry(db), demos=lambda: DemoStore(db))

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "travel", "tools": TRAVEL_TOOLS})
        result = await session.ok("parse_request", {"user_id": "erin", "dialogue": "A flight to Boston",
                                                    "catalogue": "travel", "config": "default"})
        assert result["calls"][0]["arguments"]["airlines"] == "KLM"
        await session.ok("report_feedback", {"user_id": "erin", "dialogue": "A flight to Boston",
                                             "catalogue": "travel", "calls": result["calls"]})

    with_session(server, body)
    assert DemoStore(db).count("travel") == 1
    assert not (tmp_path / "prefcall.db").exists()  # nothing fell back to the settings' database


def test_parse_request_asks_about_a_value_the_schema_does_not_allow_and_names_the_problem(tmp_path: Path) -> None:
    table = [{"name": "BookTable", "description": "Book a table at a restaurant.", "inputSchema": {
        "type": "object", "properties": {
            "restaurant": {"type": "string", "description": "the restaurant's name"},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many people"}},
        "required": ["restaurant", "party_size"]}}]
    engine = travel_engine()
    engine.scorer = _prefers("BookTable", restaurant="Nopa", party_size=45)

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "tables", "tools": table, "replace": True})
        await session.ok("create_profile", {"user_id": "bob"})
        result = await session.ok("parse_request", {"user_id": "bob", "dialogue": "Book a table at Nopa for 45 people",
                                                    "catalogue": "tables", "config": "full"})
        assert result["decision"] == "ask", json.dumps(result)
        assert result["calls"] == [{"name": "BookTable", "arguments": {"restaurant": "Nopa"}}]  # 45 is never called
        [missing] = result["missing"]
        assert (missing["argument"], missing["reason"]) == ("party_size", "invalid")
        assert missing["problem"] == "45 is more than party size allows (at most 20)"
        assert result["question"].startswith("45 is more than party size allows (at most 20).")

    with_session(make_server(tmp_path, engine=engine), body)


def test_parse_request_asks_about_a_room_type_the_enum_cannot_take_instead_of_calling_without_it(tmp_path: Path) -> None:
    # Class g: "a penthouse room" against single/double/suite is no candidate of the enum; the model likes only
    # the city. The answer names the user's value and the options; the room is never dropped silently.
    hotel = [{"name": "BookHotel", "description": "Reserve a hotel room.", "inputSchema": {
        "type": "object", "properties": {
            "city": {"type": "string", "description": "city"},
            "room": {"type": "string", "description": "room type", "enum": ["single", "double", "suite"]}},
        "required": ["city"]}}]
    engine = travel_engine()
    engine.scorer = _prefers("BookHotel", city="Rome")

    async def body(session: Session):
        await session.ok("import_catalogue", {"name": "hotels", "tools": hotel, "replace": True})
        await session.ok("create_profile", {"user_id": "bob"})
        ask = await session.ok("parse_request", {"user_id": "bob", "dialogue": "Book a penthouse room in Rome",
                                                 "catalogue": "hotels", "config": "full"})
        assert ask["decision"] == "ask", json.dumps(ask)
        assert ask["calls"] == [{"name": "BookHotel", "arguments": {"city": "Rome"}}]
        [missing] = ask["missing"]
        assert (missing["argument"], missing["reason"]) == ("room", "invalid")
        assert missing["problem"] == "'penthouse' is not one of the room options (single, double, suite)"
        call = await session.ok("parse_request", {"user_id": "bob", "dialogue": "Book a hotel room in Rome",
                                                  "catalogue": "hotels", "config": "full"})
        assert (call["decision"], call["calls"]) == ("call", [{"name": "BookHotel", "arguments": {"city": "Rome"}}])

    with_session(make_server(tmp_path, engine=engine), body)


def test_a_model_without_a_fit_of_its_own_is_noticed_once_and_a_fitted_one_is_not(tmp_path: Path, caplog) -> None:
    import logging

    from model_files import FileEngine

    from prefcall.storage import fits

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")

    async def body(session: Session):
        await seeded(session)
        for _ in range(2):
            await session.ok("parse_request", {"user_id": "alice", "dialogue": "Find me a flight to Boston",
                                               "catalogue": "travel"})

    with caplog.at_level(logging.WARNING, logger="prefcall.server"):
        with_session(make_server(tmp_path, FileEngine(model)), body)
    notices = [r.getMessage() for r in caplog.records if "has no fit of its own" in r.getMessage()]
    assert len(notices) == 1 and "prefcall fit --model REF" in notices[0]
    caplog.clear()
    engine = FileEngine(model)
    fits.save(fits.Fit(fingerprint=fits.engine_fingerprint(engine, tmp_path / "data") or "", grounding={}),
              tmp_path / "data" / fits.FITS_DIR)
    with caplog.at_level(logging.WARNING, logger="prefcall.server"):
        with_session(make_server(tmp_path, engine), body)
    assert not [r for r in caplog.records if "has no fit of its own" in r.getMessage()]


def test_clarify_refuses_through_mcp_by_the_models_fitted_check_as_parse_request_does(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """A model whose fit has a check: the MCP server's clarify asks it, as its parse_request does. The embedder's
    rule alone keeps both requests; the model says the flight tools cannot tell a joke."""
    import dataclasses

    from prefcall.storage import fits
    from prefcall.strategies import model_check, relevance

    class CheckedEngine(RuleEngine):
        @property
        def info(self):
            return dataclasses.replace(super().info, model_path=str(model))

    def scorer(prompt: str, candidate: str) -> float:
        if model_check.QUESTIONS[2].question in prompt:  # the model reads the request: a joke is no flight
            return {"Yes": -3.0, "No": 0.0}[candidate] if "joke" in prompt else {"Yes": 0.0, "No": -3.0}[candidate]
        return -1.0

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF fake weights")
    engine = CheckedEngine([("fills in the arguments of the API function GetFlights", '{"destination": "Boston"}')])
    engine.scorer = scorer
    monkeypatch.setattr(relevance, "ask_rule", lambda embedder: relevance.RelevanceRule(
        embedder=embedder.name, threshold=-10.0))
    fits.save(fits.Fit(fingerprint=fits.engine_fingerprint(engine, tmp_path / "data") or "",
                       check={"weights": [0.0, 0.0, 1.0], "threshold": 0.0, "question": 2}),
              tmp_path / "data" / fits.FITS_DIR)

    async def body(session: Session):
        await seeded(session)
        joke = await session.ok("clarify", {"user_id": "alice", "dialogue": "Tell me a joke about airline food",
                                            "catalogue": "travel"})
        assert joke["decision"] == "limitation", joke
        assert any("the model's check (refused)" in e for e in joke["evidence"]), joke["evidence"]
        flight = await session.ok("clarify", {"user_id": "alice", "dialogue": "Find me a flight to Boston",
                                              "catalogue": "travel"})
        assert flight["decision"] != "limitation", flight
        refused = await session.ok("parse_request", {"user_id": "alice", "dialogue": "Tell me a joke about airline "
                                                     "food", "catalogue": "travel", "config": "full"})
        assert refused["decision"] == "refuse", refused

    with_session(make_server(tmp_path, engine), body)
