"""Dates and times in words, normalised to a schema's `format` (prefcall.schemas.formats)."""

from __future__ import annotations

import datetime as dt

import pytest

from prefcall.schemas import formats

TODAY = dt.date(2026, 11, 25)  # a Wednesday


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-12-01", "2026-12-01"), ("today", "2026-11-25"), ("tomorrow", "2026-11-26"), ("Tonight", "2026-11-25"),
    ("the day after tomorrow", "2026-11-27"), ("Friday", "2026-11-27"), ("next Wednesday", "2026-12-02"),
    ("on Monday", "2026-11-30"), ("March 3", "2026-03-03"), ("3 March 2027", "2027-03-03"),
    ("December 24th", "2026-12-24"),
])
def test_dates_in_words_become_iso_dates(text: str, expected: str):
    assert formats.normalise(text, "date", TODAY) == (expected, None)


@pytest.mark.parametrize(("text", "problem"), [
    ("February 30", "February 30 is not a date that exists"), ("soonish", "'soonish' is not a date"),
    ("2026-02-30", "2026-02-30 is not a date that exists"),
])
def test_a_date_that_cannot_be_is_a_problem_never_a_guess(text: str, problem: str):
    assert formats.normalise(text, "date", TODAY) == (None, problem)


@pytest.mark.parametrize(("text", "expected"), [
    ("7 pm", "19:00:00"), ("7pm", "19:00:00"), ("7:15 a.m.", "07:15:00"), ("19:30", "19:30:00"),
    ("noon", "12:00:00"), ("midnight", "00:00:00"), ("12 am", "00:00:00"), ("at 6 PM", "18:00:00"),
])
def test_times_in_words_become_clock_times(text: str, expected: str):
    assert formats.normalise(text, "time", TODAY) == (expected, None)


@pytest.mark.parametrize("text", ["7", "25:00", "13 pm", "teatime"])
def test_a_time_that_cannot_be_is_a_problem(text: str):
    value, problem = formats.normalise(text, "time", TODAY)
    assert value is None and problem == f"'{text}' is not a time of day"


def test_date_times_join_a_day_and_a_clock_time():
    assert formats.normalise("tomorrow at 7 pm", "date-time", TODAY) == ("2026-11-26T19:00:00", None)
    assert formats.normalise("2026-12-01T08:30:00", "date-time", TODAY) == ("2026-12-01T08:30:00", None)
    assert formats.normalise("February 30 at 9am", "date-time", TODAY) == (None, "february 30 is not a date that exists")
    assert formats.normalise("x", "email", TODAY) == ("x", None)  # formats it does not know pass through
