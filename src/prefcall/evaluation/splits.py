"""The frozen split: which items of each data source a fit may read (`tune`) and which a report is made on (`report`).

One file, `prefcall/data/splits.json`, lists per source the item keys of each part. Every fit and every report reads
it: `prefcall eval` evaluates the report part of a known source unless told otherwise (`--split tune|report|all`),
and the demonstrations and value memories of an NLSI evaluation come from the tune part only. A source is known
by the SHA-256 of its file, never by its name, so a different file with the same name (a test fixture, a newer
release) is never split by another file's lists.

The file is built by `prefcall split build` from ../shared/data and the repository's own NLT set, deterministically
(the same data gives the same file; a test checks that the shipped file is what the command builds). The rules,
per source, are in `RULES` and printed into the file:

- An item that a fit has read, or whose results an earlier session reported and set rules by looking at
  ("inspected"), is `tune`: a report must not contain it. The ranges are the ones docs/results-history.md and the data files'
  `source` fields name (NLSI dev 0-49 inspected, 100-219 read by the TAPS gate calibration, 300-402 read by the
  grounding fit; BFCL simple 0-49 inspected and 50-99 read by the relevance fit; BFCL irrelevance 0-49 inspected and
  50-149 read by the relevance fit; BFCL multiple 0-49 inspected; ACEBench special_incomplete 30-49 read by the
  relevance fit; SGD: the dialogues of the first 50 user turns).
- Report-only sources take no tuning items at all: ACEBench normal_preference (a real preference set), ACEBench
  special_irrelevant, BFCL live_relevance. Their first items were reported by earlier sessions (ACEBench: the
  first 30) but no fit read them; the report says so.
- Held-out domains (NLSI: the travel, hotel, bus, rental-car and movie APIs; the generated corpus: four functions
  and three instruction styles) and services (SGD: RideSharing_1) are report-only: no item that touches one is ever `tune`. Such an item that a fit already read is `retired`
  (neither tune nor report).
- The remaining items are `report` when the source has few unread items (NLSI, BFCL irrelevance), else split
  half and half by a hash of source and key (`sha256(source:key)`, first byte < 128 -> report).
- The second NLT set (tests/data/nlt2/items.jsonl) is split both ways, so a rule can be fitted on either NLT set
  and reported on the other: its hand-written items half and half by the hash of their id; an item converted
  from shared data (its `source` lists the shared items it was made from) takes the part those items have in
  their own source's split (tune, report; mixed or retired -> retired), so fitting on nlt2's tune part never
  reads a message another source reports on. Both kinds fall on both sides. The first NLT set's dev/report
  files stay as they are: all of nlt2 is unseen by rules fitted on tests/data/nlt/dev.jsonl.

Keys are the items' ids as `prefcall eval` gives them (NLSI's example_id, a repeated one as `id#2`; BFCL and
ACEBench `id`; SGD `dialogue_id`, so all turns of a dialogue fall on one side; NLT `id`; TAPS tags the position).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.errors import ConfigError
from prefcall.evaluation.data import read_json

SPLIT_FILE = "splits.json"
BUILD_COMMAND = "prefcall split build"
Part = Literal["tune", "report", "all"]
PARTS = ("tune", "report", "all")


class SourceSplit(BaseModel):
    """One source's parts: item keys, the file's hash and the rule that made them."""

    path: str  # "shared:nlsi/dev.json" or "repo:tests/data/nlt/dev.jsonl"
    sha256: str
    key: str  # what an item's key is
    tune: list[str] = Field(default_factory=list)
    report: list[str] = Field(default_factory=list)
    retired: list[str] = Field(default_factory=list)  # read by a fit, but in a held-out domain: neither part
    held_out: list[str] = Field(default_factory=list)  # domains / services no tuning item touches
    rule: str = ""

    def part(self, name: str) -> set[str]:
        if name == "tune":
            return set(self.tune)
        if name == "report":
            return set(self.report)
        return set(self.tune) | set(self.report)

    def keys(self) -> set[str]:
        return set(self.tune) | set(self.report) | set(self.retired)


class SplitFile(BaseModel):
    about: str = Field(default="", alias="_about")
    command: str = BUILD_COMMAND
    sources: dict[str, SourceSplit] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def by_hash(self, digest: str) -> tuple[str, SourceSplit] | None:
        for name, source in self.sources.items():
            if source.sha256 == digest:
                return name, source
        return None

    def dump(self) -> str:
        return json.dumps(self.model_dump(by_alias=True), indent=1, ensure_ascii=False) + "\n"


# -- reading ---------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def packaged() -> SplitFile:
    """The split file shipped with prefcall (src/prefcall/data/splits.json)."""
    text = resources.files("prefcall").joinpath("data", SPLIT_FILE).read_text(encoding="utf-8")
    return SplitFile.model_validate_json(text)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_of(path: Path, splits: SplitFile | None = None) -> tuple[str, SourceSplit] | None:
    """The split entry of this data file (by its content hash), or None when the file is not a split source."""
    if not Path(path).is_file():
        return None
    return (splits or packaged()).by_hash(file_sha256(path))


class Selection(BaseModel):
    """What a run evaluated: the part, the sources it came from and how many items each gave."""

    part: str
    sources: dict[str, int] = Field(default_factory=dict)  # source -> items kept
    unsplit: list[str] = Field(default_factory=list)  # files that are not split sources (all their items kept)
    note: str = ""

    def describe(self) -> str:
        if not self.sources:
            return f"all items (not split sources: {', '.join(self.unsplit) or 'none'})"
        parts = ", ".join(f"{name}: {n}" for name, n in self.sources.items())
        return f"{self.part} split of {parts} ({BUILD_COMMAND} -> prefcall/data/{SPLIT_FILE})"


def select(items: Sequence[Any], files: Sequence[Path], part: str | None, key: Callable[[Any], str],
           splits: SplitFile | None = None, limit: int | None = None,
           offset: int = 0) -> tuple[list[Any], Selection]:
    """The first `limit` items of `part` ("tune", "report", "all"; None: "report" where the files are split
    sources) after skipping `offset` of them, and what they are.

    A file that is not a split source keeps all its items when no part was asked for; asking for tune or report
    on it is an error (there is no such part), as is a run that mixes split and unsplit files."""
    if part is not None and part not in PARTS:
        raise ConfigError(f"--split {part!r}: use one of {', '.join(PARTS)}")
    splits = splits or packaged()
    found = [(path, source_of(path, splits)) for path in files]
    known = [(path, entry) for path, entry in found if entry is not None]
    unknown = [str(path) for path, entry in found if entry is None]
    if not known:
        if part in ("tune", "report"):
            raise ConfigError(f"--split {part}: {', '.join(unknown) or 'the data'} is not a source of the split file "
                              f"(prefcall/data/{SPLIT_FILE}); pass --split all or a shared data file")
        return _window(list(items), offset, limit), Selection(part="all", unsplit=unknown)
    if unknown and part != "all":
        raise ConfigError(f"{', '.join(unknown)} is not a source of the split file while other files are: "
                          "evaluate them apart, or pass --split all")
    chosen = part or "report"
    allowed: dict[str, set[str]] = {name: entry.part(chosen) for _, (name, entry) in known}
    every = set().union(*allowed.values())
    kept = _window([item for item in items if chosen == "all" or key(item) in every], offset, limit)
    counts: Counter[str] = Counter()
    for item in kept:
        for name, keys in allowed.items():
            if key(item) in keys:
                counts[name] += 1
                break
    return kept, Selection(part=chosen, sources=dict(counts), unsplit=unknown,
                           note="" if chosen != "all" else "tune and report items together: not a report figure")


def _window(items: list[Any], offset: int, limit: int | None) -> list[Any]:
    """Items `offset` .. `offset + limit` (all after `offset` without a limit)."""
    start = max(0, offset)
    return items[start:] if limit is None else items[start:start + max(0, limit)]


def tune_keys(path: Path, splits: SplitFile | None = None) -> set[str] | None:
    """The tune keys of a split source, or None when the file is not one."""
    found = source_of(path, splits)
    return None if found is None else set(found[1].tune)


# -- building --------------------------------------------------------------------------------------------------


def unique_ids(ids: Iterable[str]) -> list[str]:
    """Ids made unique by position: a repeated id becomes id#2, id#3 ... (NLSI dev repeats one example_id)."""
    seen: Counter[str] = Counter()
    out = []
    for raw in ids:
        seen[raw] += 1
        out.append(raw if seen[raw] == 1 else f"{raw}#{seen[raw]}")
    return out


def half(source: str, key: str) -> str:
    return "report" if hashlib.sha256(f"{source}:{key}".encode()).digest()[0] < 128 else "tune"


@dataclass
class Rule:
    """How one source is split. `read`: index ranges [start, end) already read by a fit or inspected (-> tune);
    `rest`: what the other items become ("report", "tune", "half", or "inherit": an item with a `source` list of
    "shared-file:key" takes those items' part, one without hash-halves); `held_out`: report-only domains."""

    path: str
    key: str
    read: list[tuple[int, int]] = field(default_factory=list)
    rest: str = "half"
    held_out: list[str] = field(default_factory=list)
    why: str = ""


# The generated corpus's held-out functions and instruction styles (prefcall.evaluation.corpus says why).
CORPUS_HELD_OUT_FUNCTIONS = ("BookPetCare", "ReserveBook", "SetThermostat", "BuyConcertTickets")
CORPUS_HELD_OUT_STYLES = ("colon", "default", "usual")
# The generated profile corpus's (prefcall.evaluation.corpus_profile says why).
PROFILE_HELD_OUT_FUNCTIONS = ("SendParcel", "SubscribeNewsletter", "FindGym")
PROFILE_HELD_OUT_STYLES = ("plain",)
# The generated misfit corpus's (prefcall.evaluation.corpus_misfit says why).
MISFIT_HELD_OUT_FUNCTIONS = ("RequestMovingQuote", "ScheduleWindowCleaning", "RenewLibraryCard")
MISFIT_HELD_OUT_STYLES = ("labelled",)
# The generated phrase corpus's (prefcall.evaluation.corpus_phrase says why; its report styles are the corpus's).
PHRASE_HELD_OUT_FUNCTIONS = ("FindRecipe", "BookTutor", "ReportLostItem")
NLSI_HELD_OUT = ["GetTravel", "GetHotels", "GetBuses", "GetRentalCars", "GetMovies"]
SGD_HELD_OUT = ["RideSharing_1"]

RULES: dict[str, Rule] = {r.path: r for r in [
    Rule("shared:nlsi/dev.json", "example_id (a repeated id: id#2)", [(0, 50), (100, 220), (300, 403)], "report",
         NLSI_HELD_OUT, "0-49 inspected (reported, rules set by looking); 100-219 read by the TAPS gate calibration; "
         "300-402 read by the grounding fit; the unread rest is report; the travel, hotel, bus, rental-car and "
         "movie APIs are held out (their read items retired)"),
    Rule("shared:sgd/dev_dialogues_001.json", "dialogue_id", [], "half", SGD_HELD_OUT,
         "dialogues holding the first 50 user turns inspected (DST runs with --limit 30/50); RideSharing_1 held "
         "out; the rest half and half by hash"),
    Rule("shared:bfcl/BFCL_v4_simple_python.json", "id", [(0, 100)], "half", [],
         "0-49 inspected, 50-99 read by the relevance fit; the rest half and half by hash"),
    Rule("shared:bfcl/BFCL_v4_multiple.json", "id", [(0, 50)], "half", [],
         "0-49 inspected; the rest half and half by hash"),
    Rule("shared:bfcl/BFCL_v4_irrelevance.json", "id", [(0, 150)], "report", [],
         "0-49 inspected, 50-149 read by the relevance fit; the unread rest is report"),
    Rule("shared:bfcl/BFCL_v4_live_relevance.json", "id", [], "report", [],
         "report-only source (real requests a function serves: false refusals)"),
    Rule("shared:acebench/data_normal_preference.json", "id", [], "report", [],
         "report-only source (a real preference set); earlier sessions reported its first items, no fit read it"),
    Rule("shared:acebench/data_special_incomplete.json", "id", [(30, 50)], "report", [],
         "30-49 read by the relevance fit; 0-29 report (reported before at 1.5B, read by no fit)"),
    Rule("shared:acebench/data_special_irrelevant.json", "id", [], "report", [],
         "report-only source (no call is right); earlier sessions reported its first 30, no fit read it"),
    Rule("shared:taps/tags_train.json", "position", [], "tune", [], "TAPS train: tag examples and fits"),
    Rule("shared:taps/tags_dev.json", "position", [], "report", [], "TAPS dev: reports"),
    Rule("repo:src/prefcall/data/corpus/items.json", "example_id", [], "half",
         [*CORPUS_HELD_OUT_FUNCTIONS, *(f"style:{s}" for s in CORPUS_HELD_OUT_STYLES)],
         "prefcall's generated corpus (prefcall corpus build): four functions and three instruction styles held "
         "out; the rest half and half by hash"),
    Rule("repo:src/prefcall/data/corpus/profile_items.json", "example_id", [], "half",
         [*PROFILE_HELD_OUT_FUNCTIONS, *(f"style:{s}" for s in PROFILE_HELD_OUT_STYLES)],
         "prefcall's generated profile corpus (prefcall corpus build): three functions and the plain style held "
         "out; the rest half and half by hash"),
    Rule("repo:src/prefcall/data/corpus/profile_prose_items.json", "example_id", [], "half",
         list(PROFILE_HELD_OUT_FUNCTIONS),
         "the profile corpus's prose part (facts written without a key, in other words than the held-out plain "
         "style): its three held-out functions report-only; the rest half and half by hash"),
    Rule("repo:src/prefcall/data/corpus/misfit_items.json", "example_id", [], "half",
         [*MISFIT_HELD_OUT_FUNCTIONS, *(f"style:{s}" for s in MISFIT_HELD_OUT_STYLES)],
         "prefcall's generated misfit corpus (prefcall corpus build): three functions and the labelled style held "
         "out; the rest half and half by hash"),
    Rule("repo:src/prefcall/data/corpus/phrase_items.json", "example_id", [], "half",
         [*PHRASE_HELD_OUT_FUNCTIONS, *(f"style:{s}" for s in CORPUS_HELD_OUT_STYLES)],
         "prefcall's generated phrase corpus (prefcall corpus build; lowercase common-noun values): three "
         "functions and the corpus's three report instruction styles held out; the rest half and half by hash"),
    Rule("repo:tests/data/nlt/dev.jsonl", "id", [], "tune", [], "prefcall's NLT dev set: the NLT rule's fit"),
    Rule("repo:tests/data/nlt/report.jsonl", "id", [], "report", [], "prefcall's NLT report set"),
    Rule("repo:tests/data/select/items.jsonl", "id", [], "inherit", [],
         "prefcall's selection sets (one, none and two of N tools; injected tools): items converted from shared data "
         "take the part their source items have in this file (mixed or retired -> retired); a hand-written query's "
         "items halve by the hash of their `group`, so a query's variants stay on one side"),
    Rule("repo:tests/data/nlt2/items.jsonl", "id", [], "inherit", [],
         "prefcall's second NLT set (NLT that travels), split both ways so a rule fitted on either NLT set is "
         "reported on the other: hand-written items half and half by hash of id; items converted from shared data "
         "take the part their source items have in this file (mixed or retired -> retired); both kinds on both "
         "sides. For rules fitted on tests/data/nlt/dev.jsonl all of it is unseen"),
]}


def resolve(path: str, shared: Path, repo: Path) -> Path:
    root, _, rest = path.partition(":")
    return (shared if root == "shared" else repo) / rest


def _records(path: Path) -> list[Any]:
    data = read_json(path)
    return data if isinstance(data, list) else [data]


def _keys_and_domains(rule: Rule, records: list[Any]) -> list[tuple[str, set[str]]]:
    if rule.key.startswith("example_id"):
        keys = unique_ids(str(r["example_id"]) for r in records)
        # The functions called, and for the generated corpus the instruction style (held out as "style:NAME").
        return [(k, {str(c).split("(", 1)[0].strip() for c in r.get("api_calls") or []}
                 | ({f"style:{r['style']}"} if r.get("style") else set()))
                for k, r in zip(keys, records)]
    if rule.key == "dialogue_id":
        return [(str(r["dialogue_id"]), set(r.get("services") or [])) for r in records]
    if rule.key == "position":
        return [(str(i), set()) for i in range(len(records))]
    return [(str(r["id"]), set()) for r in records]


def _inspected_dialogues(records: list[Any], turns: int = 50) -> int:
    """How many leading dialogues hold the first `turns` user turns (SGD DST runs used --limit 30 and 50)."""
    seen = 0
    for index, dialogue in enumerate(records):
        seen += sum(t.get("speaker") == "USER" for t in dialogue.get("turns", []))
        if seen >= turns:
            return index + 1
    return len(records)


def _inherited(record: Any, built: dict[str, SourceSplit]) -> str | None:
    """The part of the shared items a converted item was made from (`source`: ["file:key", ...]); None when it has
    none (a hand-written item)."""
    parts = set()
    for ref in record.get("source") or []:
        name, _, key = str(ref).rpartition(":")
        if name not in built:
            raise ConfigError(f"an item's source {ref!r} names no split source built before it")
        entry = built[name]
        parts.add("tune" if key in entry.tune else "report" if key in entry.report else "retired")
    if not parts:
        return None
    return parts.pop() if len(parts) == 1 else "retired"


def build_source(name: str, rule: Rule, path: Path, built: dict[str, SourceSplit] | None = None) -> SourceSplit:
    records = _records(path)
    rows = _keys_and_domains(rule, records)
    read = list(rule.read)
    if rule.key == "dialogue_id":
        read = [(0, _inspected_dialogues(records))]
    is_read = [any(a <= i < b for a, b in read) for i in range(len(rows))]
    out = SourceSplit(path=rule.path, sha256=file_sha256(path), key=rule.key, held_out=list(rule.held_out),
                      rule=rule.why)
    for (key, domains), was_read, record in zip(rows, is_read, records):
        held = bool(domains & set(rule.held_out))
        inherited = _inherited(record, built or {}) if rule.rest == "inherit" else None
        if inherited:
            getattr(out, inherited).append(key)
        elif was_read:
            (out.retired if held else out.tune).append(key)
        elif held or rule.rest == "report":
            out.report.append(key)
        elif rule.rest == "tune":
            out.tune.append(key)
        else:  # an item of a `group` (a query's variants in the selection sets) halves by the group, not its id
            group = record.get("group") if isinstance(record, dict) else None
            (out.report if half(name, str(group or key)) == "report" else out.tune).append(key)
    return out


def build(shared: Path, repo: Path, about: str = "") -> SplitFile:
    """The split file from the data under `shared` (../shared/data) and `repo` (the checkout): deterministic."""
    sources = {}
    for path, rule in RULES.items():
        file = resolve(path, shared, repo)
        if not file.is_file():
            raise ConfigError(f"split source {file} does not exist: build the split beside ../shared/data "
                              "(PREFCALL_SHARED_DATA) in a source checkout")
        name = path.split(":", 1)[1]
        sources[name] = build_source(name, rule, file, sources)
    return SplitFile(_about=about or ABOUT, command=BUILD_COMMAND, sources=sources)


ABOUT = ("The frozen split (prefcall.evaluation.splits): per source, the item keys a fit may read (tune) and "
         "the ones reports are made on (report); retired: read by an earlier fit but in a held-out domain. "
         "Sources are matched by the file's sha256. Built by `prefcall split build`; the rules are in each "
         "source's `rule` and in the module's docstring.")
