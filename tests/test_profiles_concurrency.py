"""Two writer processes at once lose nothing; a writer SIGKILLed mid-write leaves a sound database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prefcall.storage.profiles import ProfileStore

WRITER = """
import sys
from prefcall.storage.profiles import ProfileStore
path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = ProfileStore(path)
for n in range(count):
    store.add_instruction("shared", f"{tag} instruction {n}")
"""

CRASHER = """
import sys
from prefcall.storage.profiles import ProfileStore
path, log = sys.argv[1], sys.argv[2]
store = ProfileStore(path)
with open(log, "a", buffering=1) as out:
    n = 0
    while True:
        ins = store.add_instructions("victim", [f"crash test {n} " + "x" * 500, f"crash pair {n}"])
        out.write(f"{ins[0].id} {ins[1].id}\\n")  # reported only after the commit returned
        n += 1
"""


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    path = tmp_path / "shared.db"
    with ProfileStore(path) as store:
        store.create_user("shared")
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, "50"], env=_env(), stderr=subprocess.PIPE)
        for tag in ("A", "B")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()
    with ProfileStore(path) as store:
        instructions = store.list_instructions("shared")
    texts = {i.text for i in instructions}
    assert len(instructions) == 100
    assert texts == {f"{tag} instruction {n}" for tag in "AB" for n in range(50)}
    assert [i.position for i in instructions] == list(range(1, 101))
    # Each writer's own instructions stay in the order it added them.
    for tag in "AB":
        mine = [int(i.text.split()[-1]) for i in instructions if i.text.startswith(tag)]
        assert mine == sorted(mine)


def test_sigkill_mid_write_keeps_every_committed_instruction(tmp_path):
    path = tmp_path / "crash.db"
    log = tmp_path / "committed.txt"
    with ProfileStore(path) as store:
        store.create_user("victim")
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(path), str(log)], env=_env(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 30:
            break
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    committed = {int(x) for line in lines if len(line.split()) == 2 for x in line.split()}
    assert len(committed) >= 60

    with ProfileStore(path) as store:
        assert store.db.execute("pragma integrity_check").fetchone()[0] == "ok"
        present = {i.id for i in store.list_instructions("victim")}
        positions = [i.position for i in store.list_instructions("victim")]
    assert committed <= present
    assert positions == list(range(1, len(positions) + 1))
    assert len(present) % 2 == 0  # pairs are written in one transaction: never half a pair
