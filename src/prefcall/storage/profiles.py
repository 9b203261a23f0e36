"""User profiles: ordered standing instructions with their TAPS tags, in the prefcall SQLite database.

Positions are 1-based and contiguous per user (1 = first instruction). Instruction ids are random (not one
counter for everyone), so an id says nothing about how many instructions other users have. Every write is one
transaction taken with the write lock up front, so concurrent processes never lose or duplicate positions, and
a killed process leaves only whole, committed writes behind. An add with an idempotency key (`request_key`)
is stored once per user and key while that instruction exists.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import unicodedata
from typing import Any

from pydantic import BaseModel, Field

from prefcall.errors import LimitError, NotFoundError, ValidationError
from prefcall.storage.db import Store, utc_now

# Defaults of PREFCALL_MAX_INSTRUCTION_CHARS / PREFCALL_MAX_INSTRUCTIONS (the store reads its settings' values).
MAX_INSTRUCTION_CHARS = 2000  # standing instructions are sentences; anything longer is a paste accident
MAX_TAGS_CHARS = 8000
MAX_INSTRUCTIONS_PER_USER = 1000
MAX_ID = 2**31 - 1  # instruction ids are random in 1..MAX_ID (JSON-safe everywhere)
REQUEST_KEY_RE = re.compile(r"[\x21-\x7e]{1,200}")  # an idempotency key: 1-200 printable ASCII characters
USER_ID_RE = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
PROFILE_FORMAT = "prefcall-profile"
PROFILE_VERSION = 1


class Instruction(BaseModel):
    id: int
    user_id: str
    position: int  # 1-based
    text: str
    tags: str | None = None
    tags_model: str | None = None
    tagged_at: str | None = None
    stale: bool = False  # tags exist but were made from an earlier text of this instruction
    created_at: str = ""
    updated_at: str = ""

    @property
    def needs_tagging(self) -> bool:
        return self.tags is None or self.stale


class UserProfile(BaseModel):
    user_id: str
    created_at: str
    instructions: list[Instruction] = Field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [i.text for i in self.instructions]


# ---------------------------------------------------------------------------- input checks
def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_user_id(user_id: Any, field: str = "user_id") -> str:
    if not isinstance(user_id, str) or not USER_ID_RE.fullmatch(user_id):
        shown = repr(user_id)[:80]
        raise ValidationError(
            f"{field}: {shown} is not a valid user id; use 1-64 characters from letters, digits and _ . @ -"
        )
    return user_id


def check_request_key(key: Any) -> str:
    if not isinstance(key, str) or not REQUEST_KEY_RE.fullmatch(key):
        raise ValidationError("idempotency_key: use 1-200 printable ASCII characters without spaces (e.g. a UUID)")
    return key


def clean_text(text: Any, field: str = "text", *, limit: int = MAX_INSTRUCTION_CHARS,
               setting: str | None = None) -> str:
    """Trimmed text with Windows newlines folded; control characters other than newline and tab are rejected.

    Rejected rather than stripped: a NUL or escape sequence in an instruction is almost always a
    broken import, and silently editing the user's words would hide that.
    """
    if not isinstance(text, str):
        raise ValidationError(f"{field}: expected a string, got {type(text).__name__}")
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        raise ValidationError(f"{field}: empty; give the instruction's text")
    if len(text) > limit:
        if setting is not None:
            raise LimitError(f"{field}: {len(text)} characters", limit, setting)
        raise ValidationError(f"{field}: {len(text)} characters, more than the {limit} allowed; shorten it")
    for index, char in enumerate(text):
        if char not in "\n\t" and unicodedata.category(char) in ("Cc", "Cs"):
            raise ValidationError(
                f"{field}: control character U+{ord(char):04X} at position {index}; remove it"
                " (newlines and tabs are allowed)"
            )
    return text


# ---------------------------------------------------------------------------- the store
class ProfileStore(Store):
    """Profiles in SQLite; `ProfileStore(path)` or `ProfileStore.from_settings(settings)`. Thread-safe."""

    # -- helpers ----------------------------------------------------------------------
    def _clean_instruction(self, text: Any, field: str = "text") -> str:
        return clean_text(text, field, limit=self.settings.max_instruction_chars, setting="max_instruction_chars")

    def _check_count(self, user_id: str, total: int) -> None:
        if total > self.settings.max_instructions:
            raise LimitError(f"user {user_id!r} would have {total} standing instructions",
                             self.settings.max_instructions, "max_instructions")

    def _insert_instruction(self, values: dict[str, Any]) -> int:
        """Insert with a fresh random id (retried on the rare collision); returns the id."""
        columns = ", ".join(["id", *values])
        marks = ", ".join("?" * (len(values) + 1))
        for _ in range(16):
            instruction_id = secrets.randbelow(MAX_ID) + 1
            try:  # a failed INSERT rolls back only itself: the surrounding transaction goes on
                self.db.execute(f"insert into instructions ({columns}) values ({marks})",  # noqa: S608
                                [instruction_id, *values.values()])
                return instruction_id
            except sqlite3.IntegrityError:
                if self._request_key_taken(values):
                    raise
                continue
        raise ValidationError("could not pick a free instruction id; retry")

    def _request_key_taken(self, values: dict[str, Any]) -> bool:
        key = values.get("request_key")
        return key is not None and self._by_request_key(values["user_id"], key) is not None

    def _by_request_key(self, user_id: str, key: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from instructions where user_id = ? and request_key = ?", [user_id, key]))
        return rows[0] if rows else None

    def _user_row(self, user_id: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from users where id = ?", [user_id]))
        return rows[0] if rows else None

    def _require_user(self, user_id: str) -> dict[str, Any]:
        check_user_id(user_id)
        row = self._user_row(user_id)
        if row is None:
            raise NotFoundError(f"unknown user {user_id!r}; create it with `prefcall profile create {user_id}`")
        return row

    def _instruction_row(self, instruction_id: int, user_id: str | None = None) -> dict[str, Any]:
        rows = list(self.db.query("select * from instructions where id = ?", [int(instruction_id)]))
        if not rows or (user_id is not None and rows[0]["user_id"] != user_id):
            owner = f" of user {user_id!r}" if user_id else ""
            raise NotFoundError(f"no instruction with id {instruction_id}{owner}; list them with `prefcall profile list`")
        return rows[0]

    @staticmethod
    def _to_instruction(row: dict[str, Any]) -> Instruction:
        stale = row.get("tags") is not None and row.get("tags_text_hash") != text_hash(row["text"])
        return Instruction(
            id=row["id"], user_id=row["user_id"], position=row["position"], text=row["text"],
            tags=row.get("tags"), tags_model=row.get("tags_model"), tagged_at=row.get("tagged_at"),
            stale=stale, created_at=row.get("created_at") or "", updated_at=row.get("updated_at") or "",
        )

    def _count(self, user_id: str) -> int:
        return next(self.db.query("select count(*) as n from instructions where user_id = ?", [user_id]))["n"]

    def _renumber(self, user_id: str) -> None:
        """Make positions 1..n again, keeping order (after a removal or an insertion)."""
        rows = self.db.query("select id from instructions where user_id = ? order by position, id", [user_id])
        for position, row in enumerate(list(rows), start=1):
            self.db.execute("update instructions set position = ? where id = ?", [position, row["id"]])

    # -- users ------------------------------------------------------------------------
    def create_user(self, user_id: str, *, exist_ok: bool = False) -> UserProfile:
        check_user_id(user_id)
        with self._write():
            if self._user_row(user_id) is not None:
                if not exist_ok:
                    raise ValidationError(f"user_id: user {user_id!r} already exists; pick another id")
            else:
                self.db.execute("insert into users (id, created_at) values (?, ?)", [user_id, utc_now()])
        return self.get_profile(user_id)

    def has_user(self, user_id: str) -> bool:
        check_user_id(user_id)
        with self._lock:
            return self._user_row(user_id) is not None

    def list_users(self) -> list[str]:
        with self._lock:
            return [row["id"] for row in self.db.query("select id from users order by id")]

    def get_profile(self, user_id: str) -> UserProfile:
        with self._lock:
            row = self._require_user(user_id)
            return UserProfile(user_id=user_id, created_at=row["created_at"], instructions=self.list_instructions(user_id))

    def delete_user(self, user_id: str) -> int:
        """Removes the user and all their instructions; returns how many instructions went."""
        with self._write():
            self._require_user(user_id)
            removed = self._count(user_id)
            self.db.execute("delete from instructions where user_id = ?", [user_id])
            self.db.execute("delete from users where id = ?", [user_id])
        return removed

    # -- instructions -----------------------------------------------------------------
    def list_instructions(self, user_id: str) -> list[Instruction]:
        with self._lock:
            self._require_user(user_id)
            rows = self.db.query("select * from instructions where user_id = ? order by position, id", [user_id])
            return [self._to_instruction(r) for r in rows]

    def get_instruction(self, instruction_id: int) -> Instruction:
        with self._lock:
            return self._to_instruction(self._instruction_row(instruction_id))

    def add_instruction(self, user_id: str, text: str, *, position: int | None = None,
                        request_key: str | None = None) -> Instruction:
        """Append (or insert at 1-based `position`, shifting later ones down).

        `request_key` (an idempotency key): a retried add with the same key for the same user stores nothing
        new and returns the instruction the first add stored (same id); the same key with another text is an error."""
        if request_key is None:
            return self.add_instructions(user_id, [text], position=position)[0]
        return self.add_instruction_once(user_id, text, request_key, position=position)[0]

    def add_instruction_once(self, user_id: str, text: str, request_key: str, *,
                             position: int | None = None) -> tuple[Instruction, bool]:
        """`add_instruction` with an idempotency key; also says whether this call stored it (False: a retry)."""
        key = check_request_key(request_key)
        cleaned = self._clean_instruction(text)
        with self._write():
            self._require_user(user_id)
            earlier = self._by_request_key(user_id, key)
            if earlier is None:
                ids = self._insert_all(user_id, [cleaned], position, key)
        if earlier is not None:
            if earlier["text"] != cleaned:
                raise ValidationError(
                    "idempotency_key: already used for another instruction text; use a new key for a new instruction"
                )
            return self._to_instruction(earlier), False
        return self.get_instruction(ids[0]), True

    def add_instructions(self, user_id: str, texts: list[str], *, position: int | None = None) -> list[Instruction]:
        """Several instructions in one transaction: all are added or none."""
        cleaned = [self._clean_instruction(t, f"texts[{i}]" if len(texts) > 1 else "text") for i, t in enumerate(texts)]
        with self._write():
            self._require_user(user_id)
            ids = self._insert_all(user_id, cleaned, position, None)
        return [self.get_instruction(i) for i in ids]

    def _insert_all(self, user_id: str, cleaned: list[str], position: int | None, request_key: str | None) -> list[int]:
        """Inside a write transaction: check the count limit and the position, make room, insert."""
        count = self._count(user_id)
        self._check_count(user_id, count + len(cleaned))
        if position is not None and not 1 <= position <= count + 1:
            raise ValidationError(f"position: {position} is outside 1..{count + 1}")
        start = count + 1 if position is None else position
        if position is not None:
            self.db.execute(
                "update instructions set position = position + ? where user_id = ? and position >= ?",
                [len(cleaned), user_id, position],
            )
        now = utc_now()
        return [
            self._insert_instruction({"user_id": user_id, "position": start + offset, "text": text,
                                      "created_at": now, "updated_at": now, "request_key": request_key})
            for offset, text in enumerate(cleaned)
        ]

    def edit_instruction(self, instruction_id: int, text: str, *, user_id: str | None = None) -> Instruction:
        """New text; existing tags are kept but become stale until re-tagged."""
        cleaned = self._clean_instruction(text)
        with self._write():
            self._instruction_row(instruction_id, user_id)
            self.db.execute(
                "update instructions set text = ?, updated_at = ? where id = ?", [cleaned, utc_now(), int(instruction_id)]
            )
        return self.get_instruction(instruction_id)

    def remove_instruction(self, instruction_id: int, *, user_id: str | None = None) -> Instruction:
        """Removes it and closes the gap in positions; returns what was removed."""
        with self._write():
            row = self._instruction_row(instruction_id, user_id)
            self.db.execute("delete from instructions where id = ?", [int(instruction_id)])
            self._renumber(row["user_id"])
        return self._to_instruction(row)

    def instruction_at(self, user_id: str, position: int) -> Instruction:
        """The instruction at a 1-based position (what the CLI shows)."""
        instructions = self.list_instructions(user_id)
        if not 1 <= position <= len(instructions):
            raise NotFoundError(f"user {user_id!r} has no instruction #{position}; they have {len(instructions)}")
        return instructions[position - 1]

    def set_tags(self, instruction_id: int, tags: str, model: str) -> Instruction:
        """Store TAPS tags made by `model` from the instruction's current text."""
        tags = clean_text(tags, "tags", limit=MAX_TAGS_CHARS)
        model = clean_text(model, "model", limit=200)
        with self._write():
            row = self._instruction_row(instruction_id)
            self.db.execute(
                "update instructions set tags = ?, tags_model = ?, tagged_at = ?, tags_text_hash = ? where id = ?",
                [tags, model, utc_now(), text_hash(row["text"]), int(instruction_id)],
            )
        return self.get_instruction(instruction_id)

    def clear_tags(self, instruction_id: int) -> Instruction:
        with self._write():
            self._instruction_row(instruction_id)
            self.db.execute(
                "update instructions set tags = null, tags_model = null, tagged_at = null, tags_text_hash = null"
                " where id = ?",
                [int(instruction_id)],
            )
        return self.get_instruction(instruction_id)

    # -- import / export --------------------------------------------------------------
    def export_profile(self, user_id: str) -> dict[str, Any]:
        """JSON-ready profile; tags are exported only while they match the text."""
        profile = self.get_profile(user_id)
        items = []
        for ins in profile.instructions:
            item: dict[str, Any] = {"text": ins.text}
            if ins.tags is not None and not ins.stale:
                item.update(tags=ins.tags, tags_model=ins.tags_model, tagged_at=ins.tagged_at)
            items.append(item)
        return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "user_id": user_id, "instructions": items}

    def export_profile_json(self, user_id: str) -> str:
        return json.dumps(self.export_profile(user_id), indent=1, ensure_ascii=False)

    def import_profile(
        self, data: str | bytes | dict[str, Any], *, user_id: str | None = None, replace: bool = False
    ) -> UserProfile:
        """Create a user from an exported profile (or `{"user_id", "instructions": [text, ...]}`).

        Everything is checked before anything is written; an existing user is an error unless `replace`,
        which swaps their instructions for the imported ones in the same transaction.
        """
        parsed = parse_profile(data)
        target = check_user_id(user_id if user_id is not None else parsed.get("user_id"), "user_id")
        items = _profile_items(parsed, self.settings.max_instructions, self.settings.max_instruction_chars)
        with self._write():
            exists = self._user_row(target) is not None
            if exists and not replace:
                raise ValidationError(f"user_id: user {target!r} already exists; pass --replace to overwrite")
            if exists:
                self.db.execute("delete from instructions where user_id = ?", [target])
            else:
                self.db.execute("insert into users (id, created_at) values (?, ?)", [target, utc_now()])
            now = utc_now()
            for position, item in enumerate(items, start=1):
                tags = item.get("tags")
                self._insert_instruction({
                    "user_id": target, "position": position, "text": item["text"], "created_at": now,
                    "updated_at": now, "tags": tags, "tags_model": item.get("tags_model") if tags else None,
                    "tagged_at": (item.get("tagged_at") or now) if tags else None,
                    "tags_text_hash": text_hash(item["text"]) if tags else None,
                })
        return self.get_profile(target)


def parse_profile(data: str | bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"profile: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; fix the file"
            ) from exc
    if not isinstance(data, dict):
        raise ValidationError("profile: expected a JSON object with user_id and instructions")
    if data.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
        raise ValidationError(f"profile.format: {data.get('format')!r} is not {PROFILE_FORMAT!r}")
    return data


def _profile_items(data: dict[str, Any], max_items: int = MAX_INSTRUCTIONS_PER_USER,
                   max_chars: int = MAX_INSTRUCTION_CHARS) -> list[dict[str, Any]]:
    raw = data.get("instructions")
    if not isinstance(raw, list):
        raise ValidationError("profile.instructions: expected a list of instruction texts or objects")
    if len(raw) > max_items:
        raise LimitError(f"profile.instructions has {len(raw)} items", max_items, "max_instructions")
    items = []
    for i, item in enumerate(raw):
        field = f"instructions[{i}]"
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict):
            raise ValidationError(f"{field}: expected a string or an object with text")
        clean: dict[str, Any] = {"text": clean_text(item.get("text"), f"{field}.text", limit=max_chars,
                                                    setting="max_instruction_chars")}
        if item.get("tags") is not None:
            clean["tags"] = clean_text(item["tags"], f"{field}.tags", limit=MAX_TAGS_CHARS)
            clean["tags_model"] = clean_text(item.get("tags_model") or "unknown", f"{field}.tags_model", limit=200)
            clean["tagged_at"] = item.get("tagged_at") if isinstance(item.get("tagged_at"), str) else None
        items.append(clean)
    return items
