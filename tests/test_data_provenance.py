"""Every file in src/prefcall/data says where it came from (its README's table), the commands named there exist
in this repository, and no data file or document names a path outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import prefcall
from prefcall.cli import build_parser

DATA = Path(prefcall.__file__).resolve().parent / "data"
ROOT = DATA.parents[2]
OUTSIDE = re.compile(r"(?<![\w.])(/work/|/tmp/|research/s\d|fit_struct\.py)")


def table() -> dict[str, str]:
    """file pattern -> 'made by' cell, from the README's table."""
    rows = {}
    for line in (DATA / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def listed(path: Path, rows: dict[str, str]) -> bool:
    rel = path.relative_to(DATA).as_posix()
    return any(rel == name or (("*" in name) and re.fullmatch(name.replace(".", r"\.").replace("*", ".*"), rel))
               for name in rows)


def test_every_data_file_is_in_the_provenance_table():
    rows = table()
    files = [p for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    missing = [p.relative_to(DATA).as_posix() for p in files if not listed(p, rows)]
    assert not missing, f"add these to src/prefcall/data/README.md with the command that made them: {missing}"


def test_the_table_reads_its_rows():
    rows = table()
    assert "splits.json" in rows and "prefcall split build" in rows["splits.json"]
    assert listed(DATA / "fits" / "gguf-sha256-0123.json", rows)
    assert not listed(DATA / "elsewhere.json", rows)


def test_every_fitted_rule_of_a_shipped_fit_names_the_command_that_made_it():
    from prefcall.storage.fits import Fit

    files = sorted((DATA / "fits").glob("*.json"))
    assert files
    for path in files:
        fit = Fit.model_validate_json(path.read_text(encoding="utf-8"))
        notes = {"grounding": fit.source, "selection": fit.source.get("selection"),
                 "relevance": fit.source.get("relevance"), "none_prior": fit.source.get("none_prior"),
                 "calibration_floor": fit.source.get("calibration_floor")}
        for field, note in notes.items():
            if getattr(fit, field):
                assert isinstance(note, dict) and "prefcall fit" in str(note.get("command")) and note.get("commit"), \
                    f"{path.name}: {field} has no command"
    assert any(Fit.model_validate_json(p.read_text(encoding="utf-8")).none_prior for p in files)


def commands(cell: str) -> list[list[str]]:
    return [c.split() for c in re.findall(r"`([^`]+)`", cell) if c.split()[0] in ("prefcall", "python")
            or "prefcall " in c or "python " in c]


def test_the_commands_in_the_table_exist():
    parser = build_parser()
    subcommands = {a.dest: a for a in parser._actions if a.dest == "command"}  # noqa: SLF001
    names = set(next(iter(subcommands.values())).choices) if subcommands else set()
    seen = 0
    for cell in table().values():
        for words in commands(cell):
            words = [w for w in words if "=" not in w or w.startswith("-")]  # drop VAR=value prefixes
            if words[0] == "prefcall":
                assert words[1] in names, f"`{' '.join(words)}`: no prefcall subcommand {words[1]}"
            elif words[:2] == ["python", "-m"]:
                module = ROOT / "src" / Path(*words[2].split(".")).with_suffix(".py")
                assert module.is_file(), f"`{' '.join(words)}`: no module {module}"
            elif words[0] == "python":
                assert (ROOT / words[1]).is_file(), f"`{' '.join(words)}`: no script {words[1]}"
            seen += 1
    assert seen >= 8


@pytest.mark.parametrize("path", sorted([*DATA.rglob("*.json"), *DATA.rglob("*.md"), ROOT / "README.md",
                                         ROOT / "RESULTS.md", ROOT / "BENCHMARKS.md", *ROOT.glob("docs/*.md")]),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_path_outside_the_repository(path: Path):
    text = path.read_text(encoding="utf-8")
    found = sorted({m.group(0) for m in OUTSIDE.finditer(text)})
    assert not found, f"{path.relative_to(ROOT)} names places outside the repository: {found}"


def test_the_outside_pattern_sees_what_it_must():
    assert OUTSIDE.search("--out /work/runs/s7/x") and OUTSIDE.search("see research/s4/collect.py")
    assert OUTSIDE.search("(/tmp/bench-final)") and not OUTSIDE.search("../shared/data/nlsi/dev.json")
    assert not OUTSIDE.search("~/.local/share/prefcall")
