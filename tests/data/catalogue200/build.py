"""Build tests/data/catalogue200: a deterministic 200-tool catalogue and tool-selection requests against it, for
the large-catalogue checks (the shortlist of strategies/shortlist.py) and `prefcall bench --only catalogue`.

    python tests/data/catalogue200/build.py            # writes catalogue.json and requests.jsonl
    python tests/data/catalogue200/build.py --check    # exit 1 when they are not what it writes

It reads only files of this repository (no ../shared/data, no model, no network):
- the hand-written tool lists of tests/data/nlt2 (ide, home, telecom: 10 tools each) and tests/data/nlt (its
  support, calendar, banking, travel, health, restaurant and email domains; its smart_home and coding domains are
  left out, as their tools repeat home's and ide's);
- the shipped catalogues src/prefcall/data/catalogues/nlsi.json and sgd.json and the corpus catalogue
  src/prefcall/data/corpus/catalogue.json;
- the tools of tests/data/nlt2's converted BFCL items (third-party one-line descriptions), sorted by name, until
  the catalogue holds 200.
A name already taken is skipped (the first one stays). Descriptions longer than 60 words are cut there.

Requests: every item of tests/data/nlt2's three hand-written domains (ide, home, telecom: 106 items, a quarter
of them needing no tool, a third needing two to four), with their context, messages, expected tools and nlt2 id
(the frozen split's side of that id says whether a fit may read it). Each domain's ten tools are one block of the
catalogue; the N-tool catalogue of a request is its domain's block followed by the first N - 10 other tools in
catalogue order (for ide requests, whose block comes first, that is the catalogue's first N tools).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
NLT2 = REPO / "tests" / "data" / "nlt2" / "items.jsonl"
NLT = [REPO / "tests" / "data" / "nlt" / "dev.jsonl", REPO / "tests" / "data" / "nlt" / "report.jsonl"]
CATALOGUES = [REPO / "src" / "prefcall" / "data" / "catalogues" / "nlsi.json",
              REPO / "src" / "prefcall" / "data" / "catalogues" / "sgd.json",
              REPO / "src" / "prefcall" / "data" / "corpus" / "catalogue.json"]
BLOCKS = ("ide", "home", "telecom")
NLT_DOMAINS = ("support", "calendar", "banking", "travel", "health", "restaurant", "email")
SIZE = 200
MAX_WORDS = 60


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _short(text: str) -> str:
    words = text.split()
    return " ".join(words[:MAX_WORDS]) + (" ..." if len(words) > MAX_WORDS else "")


def build() -> tuple[dict, list[dict]]:
    nlt2 = _rows(NLT2)
    nlt = [row for path in NLT for row in _rows(path)]
    tools: dict[str, dict] = {}

    def add(name: str, description: str, block: str) -> None:
        if name not in tools and len(tools) < SIZE:
            tools[name] = {"name": name, "description": _short(description), "block": block}

    for domain in BLOCKS:
        first = next(row for row in nlt2 if row["domain"] == domain)
        for tool in first["tools"]:
            add(tool["name"], tool["description"], domain)
    for domain in NLT_DOMAINS:
        first = next(row for row in nlt if row["domain"] == domain)
        for tool in first["tools"]:
            add(tool["name"], tool["description"], f"nlt-{domain}")
    for path in CATALOGUES:
        catalogue = json.loads(path.read_text(encoding="utf-8"))
        for function in catalogue["functions"]:
            add(function["name"], function.get("description", ""), f"catalogue-{path.stem}")
    third_party = {t["name"]: t["description"] for row in nlt2 if row["domain"] == "bfcl" for t in row["tools"]}
    for name in sorted(third_party):
        add(name, third_party[name], "bfcl")
    if len(tools) != SIZE:
        raise SystemExit(f"only {len(tools)} distinct tools found; {SIZE} needed")
    catalogue = {
        "name": "catalogue200",
        "description": "200 tools from many services (tests/data/catalogue200/build.py), for large-catalogue checks",
        "functions": [{"name": t["name"], "description": t["description"],
                       "parameters": {"type": "object", "properties": {}}} for t in tools.values()],
    }
    blocks = {t["name"]: t["block"] for t in tools.values()}
    requests = []
    for row in nlt2:
        if row["domain"] not in BLOCKS:
            continue
        assert all(blocks.get(name) == row["domain"] for name in row["expected"]), row["id"]
        requests.append({"id": row["id"], "block": row["domain"], "context": row["context"],
                         "messages": row["messages"], "expected": row["expected"]})
    return catalogue | {"blocks": blocks}, requests


def render(catalogue: dict, requests: list[dict]) -> tuple[str, str]:
    return (json.dumps(catalogue, ensure_ascii=False, indent=1) + "\n",
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the files differ from what it builds")
    args = parser.parse_args(argv)
    texts = render(*build())
    paths = (HERE / "catalogue.json", HERE / "requests.jsonl")
    if args.check:
        stale = [p.name for p, text in zip(paths, texts) if not p.exists() or p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"stale: {', '.join(stale)}; run python tests/data/catalogue200/build.py", file=sys.stderr)
            return 1
        return 0
    for path, text in zip(paths, texts):
        path.write_text(text, encoding="utf-8")
    print(f"wrote {paths[0]} ({SIZE} tools) and {paths[1]} ({texts[1].count(chr(10))} requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
