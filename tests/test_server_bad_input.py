"""Bad input: each is a clear, one-line tool error; the server keeps serving and the store is unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_server_support import TRAVEL_TOOLS, make_server
from test_server_tools import DELTA, Session, seeded, with_session

FLIGHT = "Find me a flight to Boston"


def store_snapshot(db: Path) -> list[tuple]:
    """Every row of the profile and catalogue tables: the store must be byte-for-byte unchanged."""
    with sqlite3.connect(db) as conn:
        rows = []
        for table in ("users", "instructions", "catalogues"):
            rows += [(table, *r) for r in conn.execute(f"select * from {table} order by 1")]  # noqa: S608
        return rows


BAD_CALLS = [
    ("unknown user", "parse_request", {"user_id": "nobody", "dialogue": FLIGHT, "catalogue": "travel"},
     "unknown user 'nobody'"),
    ("unknown catalogue", "parse_request", {"user_id": "alice", "dialogue": FLIGHT, "catalogue": "trains"},
     "unknown catalogue 'trains'"),
    ("empty dialogue", "parse_request", {"user_id": "alice", "dialogue": "   ", "catalogue": "travel"},
     "dialogue is empty"),
    ("empty turn list", "parse_request", {"user_id": "alice", "dialogue": [], "catalogue": "travel"},
     "dialogue is empty"),
    ("100 KB dialogue", "parse_request", {"user_id": "alice", "dialogue": "flight " * 15_000, "catalogue": "travel"},
     "the limit is 20000 (PREFCALL_MAX_DIALOGUE_CHARS)"),
    ("100 KB of turns", "clarify",
     {"user_id": "alice", "catalogue": "travel", "dialogue": [{"role": "user", "content": "x" * 50_000}] * 2},
     "the limit is 20000 (PREFCALL_MAX_DIALOGUE_CHARS)"),
    ("lone surrogate", "parse_request", {"user_id": "alice", "dialogue": "Boston \ud800 flight", "catalogue": "travel"},
     "invalid Unicode"),
    ("lone surrogate in an instruction", "add_instruction", {"user_id": "alice", "text": "I fly \udfff Delta"},
     "invalid Unicode"),
    ("lone surrogate in a tool list", "import_catalogue",
     {"name": "odd", "tools": [{"name": "Get\ud800", "inputSchema": {"type": "object"}}]}, "invalid Unicode"),
    ("bad role", "parse_request", {"user_id": "alice", "catalogue": "travel",
                                   "dialogue": [{"role": "robot", "content": "hi"}]}, "role"),
    ("bad user id", "add_instruction", {"user_id": "../etc/passwd", "text": "I fly Delta."}, "user_id"),
    ("empty instruction", "add_instruction", {"user_id": "alice", "text": "  "}, "text is empty"),
    ("duplicate tool names (NLT)", "select_tools_nlt",
     {"message": "A flight", "tools": [TRAVEL_TOOLS[0], TRAVEL_TOOLS[0]]}, "duplicate tool names: GetFlights"),
    ("duplicate tool names (import)", "import_catalogue",
     {"name": "dupes", "tools": [TRAVEL_TOOLS[0], TRAVEL_TOOLS[1], TRAVEL_TOOLS[0]]}, "duplicate tool names"),
    ("tools and catalogue together", "select_tools_nlt",
     {"message": "A flight", "tools": TRAVEL_TOOLS, "catalogue": "travel"}, "either tools"),
    ("empty tool list", "import_catalogue", {"name": "empty", "tools": []}, "tools is empty"),
    ("bad catalogue name", "import_catalogue", {"name": "../x", "tools": TRAVEL_TOOLS}, "catalogue name"),
    ("unknown config", "parse_request", {"user_id": "alice", "dialogue": FLIGHT, "catalogue": "travel",
                                         "config": "turbo"}, "config"),
    ("unknown instruction", "remove_instruction", {"user_id": "alice", "instruction_id": 12345}, "no instruction"),
    ("wrong argument type", "remove_instruction", {"user_id": "alice", "instruction_id": "first"},
     "instruction_id"),
    ("unknown user tags", "tag_profile", {"user_id": "nobody", "catalogue": "travel"}, "unknown user"),
    ("threshold out of range", "select_tools_nlt",
     {"message": "A flight", "tools": TRAVEL_TOOLS, "mode": "score", "threshold": 2}, "threshold"),
]


@pytest.mark.parametrize(("label", "tool", "arguments", "expected"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_is_a_clear_tool_error_and_changes_nothing(
    tmp_path: Path, label: str, tool: str, arguments: dict, expected: str
) -> None:
    server = make_server(tmp_path)

    async def body(session: Session):
        await seeded(session)
        before = store_snapshot(tmp_path / "prefcall.db")
        message = await session.error(tool, arguments)
        assert expected in message, message
        assert store_snapshot(tmp_path / "prefcall.db") == before
        # Still serving: a normal request right after works.
        after = await session.ok("parse_request", {"user_id": "alice", "dialogue": FLIGHT, "catalogue": "travel",
                                                   "config": "default"})
        assert after["calls"][0]["arguments"]["airlines"] == "Delta"

    with_session(server, body)


def test_errors_point_hosts_to_tools_not_to_the_cli(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        message = await session.error("parse_request", {"user_id": "bob", "dialogue": FLIGHT, "catalogue": "travel"})
        assert "create_profile" in message and "prefcall profile" not in message

    with_session(make_server(tmp_path), body)


def test_the_dialogue_limit_comes_from_settings(tmp_path: Path) -> None:
    from test_server_support import server_settings, travel_engine

    from prefcall.engine.fake import FakeEmbedder
    from prefcall.server.app import create_server

    server = create_server(server_settings(tmp_path, max_dialogue_chars=100), engine=travel_engine(),
                           embedder=FakeEmbedder())

    async def body(session: Session):
        await seeded(session)
        message = await session.error("parse_request", {"user_id": "alice", "dialogue": "a" * 101,
                                                        "catalogue": "travel"})
        assert "the limit is 100 (PREFCALL_MAX_DIALOGUE_CHARS)" in message
        await session.ok("parse_request", {"user_id": "alice", "dialogue": FLIGHT, "catalogue": "travel",
                                           "config": "default"})

    with_session(server, body)


def test_instructions_survive_a_failing_request(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        await session.error("add_instruction", {"user_id": "alice", "text": "x" * 5000})
        profile = await session.ok("list_instructions", {"user_id": "alice"})
        assert [i["text"] for i in profile["instructions"]] == [DELTA]

    with_session(make_server(tmp_path), body)


def test_argument_errors_are_one_line_naming_the_field_of_the_branch_meant(tmp_path: Path) -> None:
    async def body(session: Session):
        await seeded(session)
        message = await session.error("parse_request", {"user_id": "alice", "catalogue": "travel",
                                                        "dialogue": [{"role": "robot", "content": "hi"}]})
        # The dialogue is a string or a list of turns: the error names the turn's field, not the union's branches.
        assert message.startswith("Error executing tool parse_request: invalid argument dialogue.0.role: ")
        assert "\n" not in message and "list[" not in message and "(and 1 more)" in message
        message = await session.error("remove_instruction", {"user_id": "alice", "instruction_id": "first"})
        assert message.startswith("Error executing tool remove_instruction: invalid argument instruction_id: ")

    with_session(make_server(tmp_path), body)
