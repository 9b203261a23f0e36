"""Standing instructions as preferences, applied to calls by rules over their tags.

A validated TAPS tag of an instruction becomes a `Preference`: the function it is about, the argument values it
requires (`conditions`: slots inside the instruction's condition clause, "If cuisine is Steakhouse ..."), the values
it sets (`actions`: the other slots; several values of one argument mean one call each), and further functions
it asks to call as well (`also`: "If I ask for Travel, then also look at Hotels"), with their own values.

`apply_preferences` runs the rules to a fixpoint over the calls the dialogue produced:
- a preference applies to a call of its function when every condition holds on that call's values;
- the dialogue wins: an argument the user stated is never overwritten (nor one the user's words probably give,
  too weakly to be set alone: `Draft.heard` is set in its place), and a preference whose condition the user
  contradicts does not apply, nor one about another kind of the request than the user asked for ("Search for
  Sushi restaurants that serve alcohol" when the user wants a Diner);
- two unconditional instructions that give one argument different values ("my stylist is Ana", "Ben is fine
  too") are two wishes, not a conflict: the call is made once per value, each value with its own instruction
  (a conditional instruction never adds a value beside another instruction's: the first one to set it wins; one
  whose condition clause has no tagged value, so cannot be checked, comes after all others);
- conditions may be met by values other preferences set ("Request Sports events" + "If event type is Sports then
  look for category as Baseball"), hence the fixpoint; where an instruction put that value on another argument
  ("my favourite kind is Music" read as the category) and the condition's argument is the one whose options hold
  it (event_type: Music, Sports), the value moves there and the condition holds (`_move_to_condition`);
- `also` adds a call of the named function (once) when a call of the preference's function is made;
- every value records which instruction set it (`Provenance`).
The model never re-derives a preference's values: they come from the tag, deterministically.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from prefcall.retrieval.text import tokenize
from prefcall.schemas.model import Call, Catalogue, Function
from prefcall.strategies.grounding.fill import flag_value
from prefcall.strategies.selection import DomainModel, condition_values, domain_condition, slot_clause, split_condition
from prefcall.tagging.tags import (
    TagNode,
    TagTree,
    argument_for_slot,
    function_for_intent,
    slot_value,
)

Origin = Literal["user", "offer", "instruction", "call", "default"]  # offer: the assistant's, accepted by the user
_EDGE = " .,;:!?\"'"


class Provenance(BaseModel):
    argument: str
    value: Any
    origin: Origin
    instruction: str | None = None  # the standing instruction that set it
    source: str = ""  # the words it was read from


class Preference(BaseModel):
    instruction: str
    function: str
    conditions: dict[str, Any] = Field(default_factory=dict)
    actions: dict[str, list[Any]] = Field(default_factory=dict)
    also: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)  # function -> its actions
    # The instruction has a condition clause about a value ("If you're after seafood, ...") but no value of it was
    # tagged: the condition cannot be checked, so it is applied after every other preference and sets only
    # arguments nothing else set.
    unchecked_condition: bool = False
    # Values written as a kind of the request ("Search for Sushi restaurants that serve alcohol"): the instruction
    # is about that kind, so a request for another kind ("a Diner") takes none of its values.
    kinds: dict[str, Any] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.actions or self.also)


class Draft(BaseModel):
    """A call being built: each argument's values (several -> one call each) and where they came from."""

    name: str
    values: dict[str, list[Any]] = Field(default_factory=dict)
    provenance: dict[str, Provenance] = Field(default_factory=dict)
    # (instruction, argument) whose value `_move_to_condition` moved to another argument: not set again there.
    moved: list[tuple[str, str]] = Field(default_factory=list)
    # Per argument left unset, a value the user's own words probably give it (grounded.HEARD_FLOOR): where an
    # instruction would set another value there, the user's is taken instead (the dialogue wins).
    heard: dict[str, Provenance] = Field(default_factory=dict)

    def set(self, argument: str, values: list[Any], provenance: Provenance) -> None:
        self.values[argument] = list(values)
        self.provenance[argument] = provenance

    def calls(self) -> list[Call]:
        """One call per combination of multi-valued arguments (usually one call)."""
        keys = list(self.values)
        combos = itertools.product(*(self.values[k] for k in keys)) if keys else [()]
        return [Call(name=self.name, arguments=dict(zip(keys, combo))) for combo in combos]


class Applied(BaseModel):
    drafts: list[Draft]
    used: list[str] = Field(default_factory=list)  # instructions that set a value or added a call, in order
    skipped: dict[str, str] = Field(default_factory=dict)  # instruction -> why it did not apply


# ---------------------------------------------------------------------------- tags -> preference
def preference_from_tags(instruction: str, tree: TagTree, catalogue: Catalogue) -> Preference | None:
    """The preference a validated tag expresses; None when its intent is not in the catalogue."""
    tops = [c for c in tree.children if isinstance(c, TagNode) and c.kind == "IN"]
    if not tops:
        return None
    main = function_for_intent(tops[0].label, catalogue)
    if main is None:
        return None
    domains = DomainModel.build(catalogue)
    condition_range = _condition_range(instruction, domains)
    preference = Preference(instruction=instruction, function=main.name)
    _collect(tops[0].children, main, main, preference, instruction, condition_range, catalogue, domains)
    for other in tops[1:]:  # side-by-side intents: "Check out both RentalCars and Hotels"
        function = function_for_intent(other.label, catalogue)
        if function is not None and function.name != main.name:
            preference.also.setdefault(function.name, {})
            _collect(other.children, main, function, preference, instruction, condition_range, catalogue, domains)
    if condition_range is not None and not preference.conditions:
        # A condition clause with value words ("If you're after seafood") that no tag checks; one that only
        # names the request in other words ("When I reserve parking") is no condition.
        condition = instruction[condition_range[0]:condition_range[1]]
        preference.unchecked_condition = bool(condition_values(condition, domains))
    return preference


def _condition_range(instruction: str, domains: DomainModel) -> tuple[int, int] | None:
    """Where the instruction's condition clause is; a clause that only names the request is none, and of one that
    names it and goes on to a value ("If I ask for Restaurants and cuisine is curry"), the value's part is."""
    condition, _ = split_condition(instruction)
    if not condition:
        return None
    start = instruction.find(condition)
    if start < 0:
        return None
    if domain_condition(condition, domains):
        part = slot_clause(condition, domains)
        return None if part is None else (start + part[0], start + part[1])
    return start, start + len(condition)


def _collect(children: Sequence[TagNode | str], main: Function, intent: Function, preference: Preference,
             instruction: str, condition_range: tuple[int, int] | None, catalogue: Catalogue,
             domains: DomainModel) -> None:
    for child in children:
        if isinstance(child, str):
            continue
        if child.kind == "IN":
            function = function_for_intent(child.label, catalogue)
            if function is None:
                continue
            if function.name != main.name:
                preference.also.setdefault(function.name, {})
            _collect(child.children, main, function, preference, instruction, condition_range, catalogue, domains)
            continue
        argument = argument_for_slot(child.label, intent)
        span = child.text().strip(_EDGE)
        if argument is None or not span:
            continue
        spec = intent.properties[argument]
        value = flag_value(argument, span) if spec.get("type") == "boolean" else slot_value(span, spec)
        position = instruction.lower().find(span.lower())
        in_condition = condition_range is not None and condition_range[0] <= position < condition_range[1]
        if intent.name != main.name:
            preference.also.setdefault(intent.name, {}).setdefault(argument, []).append(value)
        elif in_condition:
            preference.conditions[argument] = value
        else:
            if value not in preference.actions.setdefault(argument, []):
                preference.actions[argument].append(value)
            if position >= 0 and _names_request(instruction[position + len(span):], domains.name_words[main.name]):
                preference.kinds[argument] = value


def _names_request(after: str, name_words: set[str]) -> bool:
    """The word after a value names the request's function ("Sushi *restaurants*"): the value is a kind of it."""
    following = tokenize(after, drop_stop_words=False)[:1]
    return bool(following) and following[0] in name_words


# ---------------------------------------------------------------------------- application
def same_value(a: Any, b: Any) -> bool:
    def norm(v: Any) -> str:
        return " ".join(re.findall(r"[a-z0-9]+", str(v).lower()))
    return norm(a) == norm(b)


def apply_preferences(drafts: list[Draft], preferences: Sequence[Preference], catalogue: Catalogue,
                      *, max_rounds: int = 6, facts: Collection[str] = ()) -> Applied:
    """Apply preferences to the drafts (the dialogue's calls) until nothing changes; see the module docstring.
    `facts`: instructions that state a fact about the user, not a wish (strategies.statements): their values never
    add a second call beside another instruction's (the first one to set the argument wins)."""
    drafts = [d.model_copy(deep=True) for d in drafts]
    used: list[str] = []
    skipped: dict[str, str] = {}
    # An instruction that cannot be one of several wishes for an argument: a conditional one, or a fact.
    conditional = {p.instruction: bool(p.conditions) or p.unchecked_condition or p.instruction in facts
                   for p in preferences}
    ordered = sorted(preferences, key=lambda p: p.unchecked_condition)  # stable: otherwise in the given order
    for _ in range(max_rounds):
        changed = False
        for preference in ordered:
            for draft in [d for d in drafts if d.name == preference.function]:
                function = catalogue.function(draft.name)
                if _move_to_condition(preference, draft, function):
                    changed = True
                unmet = _unmet(preference, draft)
                if unmet:
                    skipped.setdefault(preference.instruction, unmet)
                    continue
                for argument, values in preference.actions.items():
                    if (preference.instruction, argument) in draft.moved:
                        continue
                    if argument in draft.values or function is None or argument not in function.properties:
                        twin = _twin(function, draft, argument, values)
                        if twin is not None and draft.provenance[argument].origin == "user":
                            # The user gave this argument; its twin, with the same options, is open: the
                            # instruction's value is the twin's ("I want my savings account" when the user named
                            # the recipient's checking account).
                            draft.set(twin, values, Provenance(argument=twin, value=values[0] if len(values) == 1
                                                               else values, origin="instruction",
                                                               instruction=preference.instruction))
                            changed = True
                            _mark(used, preference.instruction)
                        elif argument in draft.values and draft.provenance[argument].origin == "user":
                            skipped.setdefault(preference.instruction, f"the user stated {argument}")
                        elif argument in draft.values and _another_wish(preference, draft.provenance[argument],
                                                                        conditional):
                            clones = _one_call_per_value(drafts, draft, argument, values, preference)
                            drafts += clones
                            if clones:
                                changed = True
                                _mark(used, preference.instruction)
                        continue
                    heard = draft.heard.get(argument)
                    if heard is not None and not any(same_value(v, heard.value) for v in values):
                        draft.set(argument, [heard.value], heard)
                        skipped.setdefault(preference.instruction, f"the user named {argument} {heard.value!r}")
                        changed = True
                        continue
                    draft.set(argument, values, Provenance(argument=argument, value=values[0] if len(values) == 1
                                                           else values, origin="instruction",
                                                           instruction=preference.instruction))
                    changed = True
                    _mark(used, preference.instruction)
                for name, actions in preference.also.items():
                    if catalogue.function(name) is None:
                        continue
                    chained = next((d for d in drafts if d.name == name), None)
                    if chained is None:
                        chained = Draft(name=name)
                        drafts.append(chained)
                        changed = True
                        _mark(used, preference.instruction)
                    for argument, values in actions.items():
                        if argument not in chained.values:
                            chained.set(argument, values, Provenance(argument=argument, value=values[0],
                                                                     origin="instruction",
                                                                     instruction=preference.instruction))
                            changed = True
                            _mark(used, preference.instruction)
        if not changed:
            break
    for instruction in used:
        skipped.pop(instruction, None)
    return Applied(drafts=drafts, used=used, skipped=skipped)


def _twin(function: Function | None, draft: Draft, argument: str, values: list[Any]) -> str | None:
    """The one other argument of the function with the same options as `argument` (account_type and
    recipient_account_type), unset in the draft, when the draft holds a different value for `argument`; None
    otherwise (arguments without options have no twin: a free text or a number could be anything's)."""
    if function is None or argument not in function.properties or argument not in draft.values:
        return None
    options = function.properties[argument].get("enum")
    if not options or any(same_value(v, h) for v in values for h in draft.values[argument]):
        return None
    twins = [a for a, schema in function.properties.items() if a != argument and schema.get("enum") == options]
    return twins[0] if len(twins) == 1 and twins[0] not in draft.values else None


def _another_wish(preference: Preference, earlier: Provenance, conditional: dict[str, bool]) -> bool:
    """Both this preference and the instruction that set the argument are unconditional, and they differ."""
    return (earlier.origin == "instruction" and earlier.instruction is not None
            and earlier.instruction != preference.instruction and not conditional.get(preference.instruction, True)
            and not conditional.get(earlier.instruction, True))


def _one_call_per_value(drafts: list[Draft], draft: Draft, argument: str, values: list[Any],
                        preference: Preference) -> list[Draft]:
    """Copies of `draft` with `argument` set to each of `values` that no call of this function holds yet."""
    held = [v for d in drafts if d.name == draft.name for v in d.values.get(argument, [])]
    clones = []
    for value in values:
        if any(same_value(value, h) for h in held):
            continue
        clone = draft.model_copy(deep=True)
        clone.set(argument, [value], Provenance(argument=argument, value=value, origin="instruction",
                                                instruction=preference.instruction))
        clones.append(clone)
        held.append(value)
    return clones


def _move_to_condition(preference: Preference, draft: Draft, function: Function | None) -> bool:
    """A condition on an unset argument whose value an instruction gave to one other argument of the call, where
    the condition's argument lists that value among its options and the other argument does not: the two
    instructions name one value, and the one that names its argument outright places it. The value moves (with its
    provenance); the user's own values never move."""
    if function is None:
        return False
    moved = False
    for argument, wanted in preference.conditions.items():
        if argument in draft.values or argument not in function.properties:
            continue
        option = _option(function.properties[argument], wanted)
        holders = [a for a, vs in draft.values.items()
                   if a != argument and len(vs) == 1 and same_value(vs[0], wanted)]
        if option is None or len(holders) != 1:
            continue
        holder = holders[0]
        earlier = draft.provenance.get(holder)
        if earlier is None or earlier.origin != "instruction" or \
                _option(function.properties.get(holder) or {}, wanted) is not None:
            continue
        del draft.values[holder], draft.provenance[holder]
        if earlier.instruction is not None:
            draft.moved.append((earlier.instruction, holder))
        draft.set(argument, [option], earlier.model_copy(update={"argument": argument, "value": option}))
        moved = True
    return moved


def _option(schema: dict[str, Any], value: Any) -> Any:
    """The enum option of `schema` that is `value` (None when the schema lists no such option)."""
    return next((o for o in schema.get("enum") or [] if same_value(o, value)), None)


def _unmet(preference: Preference, draft: Draft) -> str | None:
    for argument, kind in preference.kinds.items():
        stated = draft.provenance.get(argument)
        if stated is not None and stated.origin == "user" and not any(same_value(v, kind)
                                                                       for v in draft.values.get(argument, [])):
            return f"about {argument}={kind!r}, the user asked for {draft.values[argument][0]!r}"
    for argument, wanted in preference.conditions.items():
        have = draft.values.get(argument)
        if not have:
            return f"condition {argument}={wanted!r} not met"
        if not any(same_value(v, wanted) for v in have):
            return f"condition {argument}={wanted!r} contradicted by {have[0]!r}"
    return None


def _mark(used: list[str], instruction: str) -> None:
    if instruction not in used:
        used.append(instruction)
