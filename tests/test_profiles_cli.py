"""`prefcall profile ...` and `prefcall schema ...` end to end through prefcall.cli.main."""

from __future__ import annotations

import json

from prefcall.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_profile_lifecycle(tmp_path, capsys):
    db = str(tmp_path / "cli.db")
    assert run(capsys, "profile", "create", "alice", "--db", db)[0] == 0
    run(capsys, "profile", "add", "alice", "If I book flights I fly Delta", "--db", db)
    run(capsys, "profile", "add", "alice", "Request Restaurants in Oakland.", "--db", db)
    run(capsys, "profile", "edit", "alice", "1", "If I book flights I fly United", "--db", db)
    code, out, _ = run(capsys, "profile", "list", "alice", "--db", db)
    assert out.splitlines() == ["1. If I book flights I fly United", "2. Request Restaurants in Oakland."]
    code, out, _ = run(capsys, "profile", "show", "alice", "--db", db)
    assert json.loads(out)["user_id"] == "alice"
    export = tmp_path / "alice.json"
    run(capsys, "profile", "export", "alice", "-o", str(export), "--db", db)
    run(capsys, "profile", "remove", "alice", "2", "--db", db)
    run(capsys, "profile", "delete", "alice", "--db", db)
    code, out, _ = run(capsys, "profile", "import", str(export), "--db", db)
    assert code == 0 and "imported 2 instructions for alice" in out
    assert run(capsys, "profile", "list", "--db", db)[1].split() == ["alice"]


def test_profile_errors_are_one_line(tmp_path, capsys):
    db = str(tmp_path / "cli.db")
    code, _, err = run(capsys, "profile", "add", "ghost", "x", "--db", db)
    assert code == 2 and err.strip().count("\n") == 0 and "unknown user 'ghost'" in err
    code, _, err = run(capsys, "profile", "create", "bad/id", "--db", db)
    assert code == 2 and "user_id" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    code, _, err = run(capsys, "profile", "import", str(bad), "--db", db)
    assert code == 2 and "line 1, column 2" in err


def test_schema_commands(tmp_path, capsys):
    db = str(tmp_path / "cli.db")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "ping", "description": "Ping a host",
                                  "inputSchema": {"type": "object", "properties": {"host": {"type": "string"}}}}]))
    code, out, _ = run(capsys, "schema", "add", str(tools), "--name", "net", "--db", db)
    assert code == 0 and "1 functions" in out
    out = run(capsys, "schema", "list", "--db", db)[1]
    assert [line.split("\t")[0] for line in out.splitlines()] == ["nlsi", "sgd", "net"]
    assert run(capsys, "schema", "show", "net", "--db", db)[1].strip() == "ping - Ping a host"
    assert "Function: ping" in run(capsys, "schema", "show", "net", "--format", "spec", "--db", db)[1]
    code, _, err = run(capsys, "schema", "remove", "nlsi", "--db", db)
    assert code == 2 and "cannot be removed" in err
    assert run(capsys, "schema", "remove", "net", "--db", db)[0] == 0


def test_evaluate_selection_bm25_last_line_is_json(tmp_path, capsys):
    from pathlib import Path
    import os

    shared = Path(os.environ.get("PREFCALL_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
    data = shared / "nlsi" / "dev.json"
    if not data.is_file():  # keep the test meaningful without the shared folder: a tiny inline data set
        data = tmp_path / "dev.json"
        data.write_text(json.dumps([{
            "user_utterance": "User: Find me restaurants in Oakland.",
            "all_standing_instructions": ["If I ask for Restaurants, my preferred cuisine is Thai",
                                          "If I ask for Flights, I fly Delta Airlines"],
            "applicable_standing_instructions": ["If I ask for Restaurants, my preferred cuisine is Thai"],
            "api_calls": [], "example_type": "simple"}]))
    code, out, _ = run(capsys, "profile", "evaluate-selection", "--data", str(data), "--limit", "20", "--bm25-only")
    metrics = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and metrics["mode"] == "bm25" and 0 <= metrics["precision"] <= 1


def test_python_dash_m_runs_the_same_command_line(tmp_path):
    import subprocess
    import sys

    env = {**__import__("os").environ, "PREFCALL_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "prefcall", "profile", "show", "nobody"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and "nobody" in done.stderr
    ok = subprocess.run([sys.executable, "-m", "prefcall", "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "calibrate" in ok.stdout
