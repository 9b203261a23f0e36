"""`prefcall bench --quick --only limit` end to end with the embedded GGUF model (the one real-model bench test)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest


@pytest.mark.model
def test_quick_limit_section_runs_with_the_embedded_model(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "prefcall.cli", "bench", "--quick", "--only", "limit",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    limit = report["sections"]["limit"]
    assert limit["status"] == "ok", limit.get("reason")
    raw = limit["figures"]["raw"]
    # Every raw figure is produced, whatever the load (the bench times decoding itself; see bench.model).
    for key in ("prompt_tps", "gen_tps", "grammar_gen_tps", "grammar_token_cost_ratio"):
        assert isinstance(raw[key], float) and math.isfinite(raw[key]) and raw[key] > 0, (key, raw[key])
    for name, strategy in limit["figures"]["strategies"].items():
        # The ratio's size is a benchmark figure (noisy on shared cores); the test checks it was measured.
        assert strategy.get("status") == "skipped" or math.isfinite(strategy["overhead_ratio_p50"]) and strategy["overhead_ratio_p50"] > 0, name
    assert (tmp_path / "bench.json").is_file() and (tmp_path / "bench.md").is_file()
