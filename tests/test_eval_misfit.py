"""`prefcall eval misfit` (class g): how an answer to a request whose value breaks the schema, or whose values fit
it, is scored; a parse failure is wrong, never a decision."""

from __future__ import annotations

from prefcall.evaluation.task import EvalItem, ScoredItem
from prefcall.evaluation.tasks.misfit import TASK, figures, score

MISFIT = EvalItem(id="BookCampsite-02", input={"dialogue": "User: Book a campsite at Red Rock for 21 nights."},
                  gold={"expect": "ask", "api_calls": ['BookCampsite(park="Red Rock")'], "argument": "nights",
                        "written": "21"}, meta={"kind": "range", "function": "BookCampsite", "style": "plain"})
VALID = EvalItem(id="BookCampsite-01", input={"dialogue": "User: Book a campsite at Red Rock for 3 nights."},
                 gold={"expect": "call", "api_calls": ['BookCampsite(park="Red Rock", nights=3)'], "argument": "",
                       "written": ""}, meta={"kind": "valid", "function": "BookCampsite", "style": "plain"})


def ask(argument: str, problem: str | None) -> dict:
    return {"status": "ok", "decision": "ask", "calls": [{"name": "BookCampsite", "arguments": {"park": "Red Rock"}}],
            "missing": [{"function": "BookCampsite", "argument": argument, "reason": "invalid", "problem": problem,
                         "question": f"What {argument} would you like?"}]}


def test_an_ask_about_the_argument_that_quotes_the_users_value_is_right():
    assert score(MISFIT, ask("nights", "21 is more than nights allows (at most 14)"))["right"] == 1.0
    unnamed = score(MISFIT, ask("nights", None))
    assert unnamed["asked"] == 1.0 and unnamed["named"] == 0.0 and unnamed["right"] == 0.0
    assert score(MISFIT, ask("park", "21 is not a park"))["asked"] == 0.0  # another argument asked about


def test_a_misfit_called_dropped_or_refused_is_wrong_and_says_which():
    dropped = {"status": "ok", "decision": "call",
               "calls": [{"name": "BookCampsite", "arguments": {"park": "Red Rock"}}]}
    assert score(MISFIT, dropped) == {"right": 0.0, "asked": 0.0, "named": 0.0, "called": 1.0, "refused": 0.0}
    assert score(MISFIT, {"status": "ok", "decision": "refuse", "calls": []})["refused"] == 1.0
    failed = score(MISFIT, {"status": "parse_error", "decision": "ask", "missing": ask("nights", "21")["missing"]})
    assert failed["right"] == 0.0 and failed["asked"] == 0.0


def test_a_valid_request_is_right_only_as_its_exact_call():
    called = {"status": "ok", "decision": "call",
              "calls": [{"name": "BookCampsite", "arguments": {"park": "red rock", "nights": 3.0}}]}
    assert score(VALID, called)["exact"] == 1.0  # values compared as every metric normalises them
    wrong = {"status": "ok", "decision": "call",
             "calls": [{"name": "BookCampsite", "arguments": {"park": "Red Rock", "nights": 4}}]}
    assert score(VALID, wrong) == {"right": 0.0, "exact": 0.0, "called": 1.0, "asked_wrongly": 0.0}
    assert score(VALID, ask("nights", None))["asked_wrongly"] == 1.0


def test_figures_count_the_decision_on_both_kinds_with_intervals():
    rows = [ScoredItem(id=i.id, input=i.input, gold=i.gold, meta=i.meta, prediction=p, scores=score(i, p))
            for i, p in [(MISFIT, ask("nights", "21 is too many")), (VALID, ask("nights", None))]]
    found = figures(rows)
    assert found["decision_accuracy"] == 0.5 and found["decision_accuracy"].n == 2 and found["misfit_named"] == 1.0
    assert found["valid_asked_wrongly"] == 1.0 and found["valid_exact"] == 0.0
    assert TASK.aggregate(rows)["by_kind"]["range"]["misfit_asked"] == 1.0


def test_the_task_reads_the_shipped_misfit_corpus_by_split():
    import argparse

    items = TASK.load(argparse.Namespace(data=None))
    assert len(items) == 200 and {i.gold["expect"] for i in items} == {"ask", "call"}
    assert [str(p) for p in TASK.data_files(argparse.Namespace(data=None))][0].endswith("misfit_items.json")
