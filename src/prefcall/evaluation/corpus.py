"""A generated NLSI-style corpus over catalogues the shared data does not have (`prefcall corpus build`).

Why: the shared data has one author style (NLSI's "If I ask for X, my preferred Y is Z"), string arguments only,
no chains and no multi-instruction items in its dev file. Fits and reports need more: typed arguments
(integers, booleans, enums), lowercase and common-noun values ("the airport"), numbers written as words
("three"), standing instructions in several phrasings, chains, several instructions at once, two values for one
argument, conditions, overrides and requests no instruction applies to.

What it makes (deterministic: the same code gives the same bytes; a test checks the shipped copy):
- `catalogue.json`: 16 functions in prefcall's catalogue format, typed, with descriptions and required arguments;
  two of them have similar names or arguments on purpose (PlayMusic / BuyConcertTickets; account_type /
  recipient_account_type).
- `items.json`: NLSI-format items (example_id, user_utterance, all_standing_instructions,
  applicable_standing_instructions, api_calls, example_type) plus `function`, `style` and `classes` (the
  failure classes an item exercises). Example types: none (no instruction applies), simple, multiple (2-3
  instructions for one request), override (the user's words replace an instruction's value), conditional (an
  instruction that applies because of a value the user gave), chain (a second function), multi_value (two
  instructions give two values of one argument: one call per value).
- Gold values: what the user wrote, as the schema types it ("three" people -> 3, "with covered parking" ->
  True), and an instruction's value; a chained call takes from the request only values that fit its own
  arguments (lodging after a ferry to Victoria is in Victoria).

Split (read by `prefcall split build`): four functions (BookPetCare, ReserveBook, SetThermostat,
BuyConcertTickets) and three instruction styles (`colon`, `default`, `usual`) are report-only: no tune item uses
them. The rest is split half and half by a hash of the id.

Authored for prefcall from scratch: no template or value is taken from a shared data set.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefcall.evaluation.corpus_domains import DOMAINS, NUMBER_WORDS, Domain, Slot

SEED = 20261125
ITEMS_PER_FUNCTION = 40
CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "corpus"
BUILD_COMMAND = "prefcall corpus build"
# Held out of every fit (the split file's rule names the same ones; a test checks they agree).
REPORT_FUNCTIONS = ("BookPetCare", "ReserveBook", "SetThermostat", "BuyConcertTickets")
TUNE_STYLES = ("nlsi", "when", "prefer")
REPORT_STYLES = ("colon", "default", "usual")
STYLES = TUNE_STYLES + REPORT_STYLES


# -- phrasing ---------------------------------------------------------------------------------------------------

INSTRUCTION_STYLES: dict[str, tuple[str, ...]] = {
    # {noun}: "fitness classes"; {activity}: "book a fitness class"; {slot}: "level"; {v}: value; {fact}: noun phrase
    "nlsi": ("If I ask for {Noun}, my preferred {slot} is {v}.",),
    "when": ("When I {activity}, I want {fact}.", "Whenever I {activity}, go with {fact}."),
    "prefer": ("I prefer {fact} when I {activity}.", "For {noun} I like {fact}."),
    "colon": ("{Noun}: {slot} {v}.", "{Noun} - always {fact}."),
    "default": ("Please default to {fact} for {noun}.", "Unless I say otherwise, use {fact} for {noun}."),
    "usual": ("My usual {slot} for {noun} is {v}.", "I normally {activity} with {fact}."),
}
FLAG_STYLES: dict[str, tuple[str, ...]] = {  # booleans: the fact says the value
    "nlsi": ("If I ask for {Noun}, I prefer {fact}.",),
    "when": ("When I {activity}, I want {fact}.",),
    "prefer": ("I prefer {fact} when I {activity}.",),
    "colon": ("{Noun}: {fact}.",),
    "default": ("Please default to {fact} for {noun}.",),
    "usual": ("I normally {activity} with {fact}.",),
}
CONDITION_STYLES = ("If I {activity} {ask}, I want {fact}.", "When the request is {ask}, use {fact}.")
CHAIN_STYLES = ("Whenever I {activity}, also {other}.", "If I ask for {Noun}, also check {other_noun}.")
MULTI_STYLES = ("I like {fact} for {noun}.", "{fact} is also fine for {noun}.")
CLOSERS = ("", " please", ", thanks", "")


@dataclass
class Item:
    example_id: str
    user_utterance: str
    all_standing_instructions: list[str]
    applicable_standing_instructions: list[str]
    api_calls: list[str]
    example_type: str
    function: str
    style: str
    classes: list[str] = field(default_factory=list)


def render_call(function: str, args: dict[str, Any]) -> str:
    parts = []
    for name, value in args.items():
        if isinstance(value, bool):
            parts.append(f"{name}={'True' if value else 'False'}")
        elif isinstance(value, (int, float)):
            parts.append(f"{name}={value}")
        else:
            parts.append(f'{name}="{value}"')
    return f"{function}({', '.join(parts)})"


class Builder:
    """Items for one domain at a time, drawn with one seeded generator so the whole corpus is reproducible."""

    def __init__(self, seed: int = SEED, domains: Sequence[Domain] = DOMAINS) -> None:
        self.rng = random.Random(seed)
        self.domains = tuple(domains)  # the catalogue's functions (distractor instructions are about the others)
        self.by_name = {d.function: d for d in self.domains}

    # -- pieces --
    def value(self, slot: Slot) -> tuple[str, Any]:
        return self.rng.choice(slot.values)

    def ask(self, slot: Slot, said: str, gold: Any) -> str:
        if slot.type == "boolean":
            return slot.ask[0] if gold else slot.ask[1]
        return self.rng.choice(slot.ask).format(v=said)

    def fact(self, slot: Slot, said: str, gold: Any) -> str:
        if slot.type == "boolean":
            return slot.fact[0] if gold else slot.fact[1]
        return self.rng.choice(slot.fact).format(v=said)

    def instruction(self, domain: Domain, slot: Slot, said: str, gold: Any, style: str) -> str:
        table = FLAG_STYLES if slot.type == "boolean" else INSTRUCTION_STYLES
        template = self.rng.choice(table[style])
        text = template.format(Noun=domain.noun.title(), noun=domain.noun, activity=domain.activity, slot=slot.words,
                               v=said, fact=self.fact(slot, said, gold))
        return text[0].upper() + text[1:]

    def request(self, domain: Domain, clauses: list[str]) -> str:
        text = " ".join([self.rng.choice(domain.openers), *clauses]).strip()
        closer = self.rng.choice(CLOSERS)
        text += "" if "please" in text.lower() and "please" in closer else closer
        text = text[0].upper() + text[1:] + "."
        if self.rng.random() < 0.2:  # some people type in lower case
            text = text.lower()
        return f"User: {text}"

    def distractors(self, domain: Domain, k: int) -> list[str]:
        """Instructions about other functions (never applicable)."""
        others = [d for d in self.domains if d.function != domain.function and d.function not in
                  {c for c, _ in domain.chains} and domain.function not in {c for c, _ in d.chains}]
        out = []
        for other in self.rng.sample(others, k):
            slot = self.rng.choice(other.slots)
            said, gold = self.value(slot)
            out.append(self.instruction(other, slot, said, gold, self.rng.choice(STYLES)))
        return out

    def user_part(self, domain: Domain, exclude: set[str], n: int) -> tuple[dict[str, Any], list[str]]:
        """The request's own values: every required argument (unless excluded) and `n` optional ones."""
        args: dict[str, Any] = {}
        clauses: list[str] = []
        required = [s for s in domain.slots if s.required and s.name not in exclude]
        optional = [s for s in domain.slots if not s.required and s.name not in exclude]
        for slot in required + self.rng.sample(optional, min(n, len(optional))):
            said, gold = self.value(slot)
            args[slot.name] = gold
            clauses.append(self.ask(slot, said, gold))
        return args, clauses

    # -- example types --
    def make(self, domain: Domain, kind: str, style: str) -> Item | None:
        rng = self.rng
        classes: list[str] = []
        free = [s for s in domain.slots if not s.required]
        if kind == "none":
            args, clauses = self.user_part(domain, set(), 2)
            applicable: list[str] = []
        elif kind in ("simple", "multiple"):
            chosen = rng.sample(free, min(len(free), 1 if kind == "simple" else rng.choice((2, 3))))
            if kind == "multiple" and len(chosen) < 2:
                return None
            args, clauses = self.user_part(domain, {s.name for s in chosen}, 1)
            applicable = []
            for slot in chosen:
                said, gold = self.value(slot)
                args[slot.name] = gold
                applicable.append(self.instruction(domain, slot, said, gold, style))
        elif kind == "override":
            slot = rng.choice(free)
            choices = [v for v in slot.values if v[1] is not None]
            if len({g for _, g in choices}) < 2:
                return None
            (said_i, gold_i), (said_u, gold_u) = rng.sample(choices, 2)
            while gold_i == gold_u:
                (said_i, gold_i), (said_u, gold_u) = rng.sample(choices, 2)
            args, clauses = self.user_part(domain, {slot.name}, 1)
            args[slot.name] = gold_u
            clauses.append(self.ask(slot, said_u, gold_u))
            # The instruction is about this function, but the user's words win: it does not apply.
            applicable = []
            overridden = self.instruction(domain, slot, said_i, gold_i, style)
        elif kind == "conditional":
            enum_slots = [s for s in domain.slots if s.enum and s.type == "string"]
            targets = [s for s in free if s not in enum_slots]
            if not enum_slots or not targets:
                return None
            cond, slot = rng.choice(enum_slots), rng.choice(targets)
            c_said, c_gold = self.value(cond)
            said, gold = self.value(slot)
            args, clauses = self.user_part(domain, {cond.name, slot.name}, 0)
            args[cond.name] = c_gold
            clauses.append(self.ask(cond, c_said, c_gold))
            args[slot.name] = gold
            text = rng.choice(CONDITION_STYLES).format(activity=domain.activity, ask=self.ask(cond, c_said, c_gold),
                                                       fact=self.fact(slot, said, gold))
            applicable = [text[0].upper() + text[1:]]
            other = [v for v in cond.values if v[1] != c_gold]
            o_said, o_gold = rng.choice(other)
            o_slot_said, o_slot_gold = self.value(slot)
            unmet = rng.choice(CONDITION_STYLES).format(activity=domain.activity, ask=self.ask(cond, o_said, o_gold),
                                                        fact=self.fact(slot, o_slot_said, o_slot_gold))
            overridden = unmet[0].upper() + unmet[1:]  # a condition the request does not meet: never applies
        elif kind == "multi_value":
            names = [s for s in free if s.type == "string" and not s.enum and len(s.values) >= 2]
            if not names:
                return None
            slot = rng.choice(names)
            (said_a, gold_a), (said_b, gold_b) = rng.sample(slot.values, 2)
            args, clauses = self.user_part(domain, {slot.name}, 1)
            applicable = [self.instruction(domain, slot, said_a, gold_a, style),
                          rng.choice(MULTI_STYLES).format(fact=self.fact(slot, said_b, gold_b), noun=domain.noun)]
            applicable[1] = applicable[1][0].upper() + applicable[1][1:]
            calls = [render_call(domain.function, args | {slot.name: gold_a}),
                     render_call(domain.function, args | {slot.name: gold_b})]
            classes.append("d:several-values")
            return self._item(domain, kind, style, clauses, applicable, calls, classes)
        elif kind == "chain":
            if not domain.chains:
                return None
            target, mapping = domain.chains[0]
            other = self.by_name[target]
            args, clauses = self.user_part(domain, set(), 1)
            needed = [a for a in mapping.values() if a not in args]
            for name in needed:  # the chain's values must be in the request
                slot = domain.slot(name)
                said, gold = self.value(slot)
                args[name] = gold
                clauses.append(self.ask(slot, said, gold))
            text = rng.choice(CHAIN_STYLES).format(activity=domain.activity, other=other.activity,
                                                   Noun=domain.noun.title(), other_noun=other.noun)
            applicable = [text[0].upper() + text[1:]]
            second = {theirs: args[ours] for theirs, ours in mapping.items() if ours in args}
            calls = [render_call(domain.function, args), render_call(target, second)]
            classes.append("c:chain-values")
            return self._item(domain, kind, style, clauses, applicable, calls, classes)
        else:
            raise ValueError(kind)
        extra = [overridden] if kind in ("override", "conditional") else []
        if kind == "override":
            classes.append("override")
        return self._item(domain, kind, style, clauses, applicable, [render_call(domain.function, args)], classes,
                          extra)

    def _item(self, domain: Domain, kind: str, style: str, clauses: list[str], applicable: list[str],
              calls: list[str], classes: list[str], extra: list[str] = ()) -> Item:
        rng = self.rng
        everything = applicable + list(extra) + self.distractors(domain, rng.choice((2, 3, 4)))
        rng.shuffle(everything)
        utterance = self.request(domain, clauses)
        call_text = " ".join(calls)
        if any(w in call_text for w in NUMBER_WORDS.values()) or any(
                f" {w} " in f" {utterance.lower()} " for w in NUMBER_WORDS.values()):
            classes.append("b:number-words")
        if any(v.startswith(("the ", "my ")) for v in _strings(calls)):
            classes.append("b:common-noun")
        if domain.function == "TransferMoney":
            classes.append("a:similar-arguments")
        if domain.function in ("PlayMusic", "BuyConcertTickets"):
            classes.append("f:similar-functions")
        return Item("", utterance, everything, applicable, calls, kind, domain.function, style, sorted(set(classes)))


def _strings(calls: list[str]) -> list[str]:
    out = []
    for call in calls:
        out += [part.split('"')[1] for part in call.split("=")[1:] if part.startswith('"')]
    return out


KINDS = ("none", "simple", "simple", "multiple", "override", "conditional", "multi_value", "chain")


def draw_items(builder: Any, domains: Sequence[Any], kinds: Sequence[str], styles: Sequence[str],
               tune_styles: Sequence[str], report_functions: Sequence[str], per_function: int,
               mixed_every: int = 2) -> list[Item]:
    """`per_function` items per domain from `builder.make(domain, kind, style)` (None: try the next kind), kinds in
    turn; a report-only function, and every `mixed_every`-th item of the rest, draws among all styles, the others
    among the tune styles; ids "<function>-NN"; shuffled, so that `--limit N` of any part samples every function and
    type."""
    items: list[Item] = []
    for domain in domains:
        report_only = domain.function in report_functions
        made = attempts = 0
        while made < per_function and attempts < per_function * 10:
            attempts += 1
            kind = kinds[attempts % len(kinds)]
            style = builder.rng.choice(styles if report_only or made % mixed_every == mixed_every - 1 else tune_styles)
            item = builder.make(domain, kind, style)
            if item is None:
                continue
            made += 1
            item.example_id = f"{domain.function}-{made:02d}"
            items.append(item)
    builder.rng.shuffle(items)
    return items


def build_items(seed: int = SEED, per_function: int = ITEMS_PER_FUNCTION) -> list[Item]:
    items = draw_items(Builder(seed), DOMAINS, KINDS, STYLES, TUNE_STYLES, REPORT_FUNCTIONS, per_function)
    for item in items:
        if item.example_type in ("none", "conditional", "chain"):
            item.style = "-"  # these kinds use no instruction style (conditions and chains have their own)
    return items


def function_entry(name: str, description: str, properties: dict[str, Any], required: Sequence[str]
                   ) -> dict[str, Any]:
    """One function of a generated catalogue, as the catalogue files write it."""
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(required)}}


def write_corpus(out: Path, prefix: str, catalogue_: dict[str, Any], items: Sequence[Any]) -> list[Path]:
    """`<prefix>catalogue.json` and `<prefix>items.json` in `out` (items: dataclasses, written field by field)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{prefix}catalogue.json", out / f"{prefix}items.json"]
    paths[0].write_text(dumps(catalogue_), encoding="utf-8")
    paths[1].write_text(dumps([item.__dict__ for item in items]), encoding="utf-8")
    return paths


def domains_catalogue(name: str, description: str, domains: Sequence[Domain]) -> dict[str, Any]:
    """A catalogue of `domains` (their slots' schemas, required arguments) as the catalogue files write it."""
    functions = [function_entry(d.function, d.description, {s.name: s.schema() for s in d.slots},
                                [s.name for s in d.slots if s.required]) for d in domains]
    return {"name": name, "description": description, "functions": functions}


def catalogue() -> dict[str, Any]:
    return domains_catalogue("corpus", "prefcall's generated corpus catalogue (prefcall.evaluation.corpus): 16 "
                             "everyday functions with typed arguments, none from the shared data sets.", DOMAINS)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def build(out: Path = CORPUS_DIR) -> list[Path]:
    return write_corpus(out, "", catalogue(), build_items())
