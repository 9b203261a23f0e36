"""Values for arguments whose schema names a `format` (date, time, date-time): the words a user writes
("tomorrow", "7 pm", "next Friday", "March 3") normalised to the form the schema asks for, or the reason they
cannot be ("February 30 is not a date that exists").

ISO forms pass as they are. Dates: relative days (today, tonight, tomorrow, the day after tomorrow, yesterday),
weekdays (`Friday`, `this Friday`, `next Friday`: the next one after today), and dates written out, parsed by
python-dateutil with the missing parts (the year) taken from today. Times: `7 pm`, `7:15am`, `19:30`, `noon`,
`midnight`, written `HH:MM:SS`. Date-times: a date and a time together, or what dateutil reads. Anything else is
a problem to ask the user about, never a guess.
"""

from __future__ import annotations

import datetime as dt
import re

from dateutil import parser as date_parser

FORMATS = ("date", "time", "date-time")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE = {"today": 0, "tonight": 0, "this evening": 0, "this afternoon": 0, "this morning": 0, "tomorrow": 1,
             "tomorrow morning": 1, "tomorrow evening": 1, "tomorrow night": 1, "the day after tomorrow": 2,
             "day after tomorrow": 2, "yesterday": -1}
_WEEKDAY_RE = re.compile(r"^(?:on\s+)?(?:(this|next|coming|this coming)\s+)?(" + "|".join(_WEEKDAYS) + r")$")
_TIME_RE = re.compile(r"^(?:at\s+)?(\d{1,2})(?:[:.](\d{2}))?(?::(\d{2}))?\s*(a\.?m\.?|p\.?m\.?)?$")
_NAMED_TIMES = {"noon": (12, 0), "midday": (12, 0), "midnight": (0, 0)}


def normalise(text: str, fmt: str, today: dt.date | None = None) -> tuple[str | None, str | None]:
    """(the value in the schema's format, None) or (None, why the words cannot be one)."""
    today = today or dt.date.today()
    words = " ".join(str(text).strip().lower().rstrip(".!?,").split())
    if fmt == "date":
        return _date(str(text).strip(), words, today)
    if fmt == "time":
        found = _time(words)
        return (found, None) if found else (None, f"'{text}' is not a time of day")
    if fmt == "date-time":
        return _date_time(str(text).strip(), words, today)
    return str(text), None


def _date(text: str, words: str, today: dt.date) -> tuple[str | None, str | None]:
    try:
        return dt.date.fromisoformat(words).isoformat(), None
    except ValueError:
        pass
    if words in _RELATIVE:
        return (today + dt.timedelta(days=_RELATIVE[words])).isoformat(), None
    weekday = _WEEKDAY_RE.match(words)
    if weekday:
        ahead = (_WEEKDAYS.index(weekday.group(2)) - today.weekday()) % 7 or 7
        return (today + dt.timedelta(days=ahead)).isoformat(), None
    if not re.search(r"\d|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec", words):
        return None, f"'{text}' is not a date"
    parsed, problem = _parse(text, words, today, "a date")
    return (parsed.date().isoformat(), None) if parsed else (None, problem)


def _parse(text: str, words: str, today: dt.date, what: str) -> tuple[dt.datetime | None, str | None]:
    """dateutil's reading of the words, the missing parts from today; or why it has none."""
    try:
        return date_parser.parse(words, default=dt.datetime(today.year, today.month, today.day)), None
    except (ValueError, OverflowError) as exc:
        if "out of range" in str(exc) or "must be in" in str(exc):
            return None, f"{text} is not a date that exists"
        return None, f"'{text}' is not {what}"


def _time(words: str) -> str | None:
    if words in _NAMED_TIMES:
        hour, minute = _NAMED_TIMES[words]
        return f"{hour:02d}:{minute:02d}:00"
    match = _TIME_RE.match(words)
    if not match:
        return None
    hour, minute, second = int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0)
    half = (match.group(4) or "").replace(".", "")
    if half and not 1 <= hour <= 12:
        return None
    if half == "pm" and hour != 12:
        hour += 12
    elif half == "am" and hour == 12:
        hour = 0
    if not half and match.group(2) is None:
        return None  # a bare number ("7") is not a time without "pm" or minutes
    if hour > 23 or minute > 59 or second > 59:
        return None
    return f"{hour:02d}:{minute:02d}:{second:02d}"


def _date_time(text: str, words: str, today: dt.date) -> tuple[str | None, str | None]:
    try:
        return dt.datetime.fromisoformat(words.upper().replace(" ", "T")).isoformat(), None
    except ValueError:
        pass
    split = re.match(r"^(.*?)\s+(?:at\s+)?(\d{1,2}(?:[:.]\d{2})?\s*(?:a\.?m\.?|p\.?m\.?)?|noon|midnight)$", words)
    if split:
        day, problem = _date(split.group(1), split.group(1), today)
        clock = _time(split.group(2))
        if day and clock:
            return f"{day}T{clock}", None
        if problem:
            return None, problem
    parsed, problem = _parse(text, words, today, "a date and time")
    return (parsed.replace(tzinfo=None).isoformat(), None) if parsed else (None, problem)
