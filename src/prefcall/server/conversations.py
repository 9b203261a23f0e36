"""Dialogue states prefcall keeps for hosts that name a conversation (`parse_request(conversation_id=...)`).

Per owner, user, catalogue and conversation id: the state the conversation's last turn returned. Kept in memory
only (a restart forgets every conversation; a host that needs more sends `state` back instead), at most
`conversation_limit` of them (the least recently used goes first), each for `conversation_ttl_s` seconds after
its last turn. Two requests on one conversation run one after the other (`turn`), so the second reads the state
the first wrote.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from prefcall.schemas.state import DialogueState

Key = tuple[str, str, str, str]  # owner, user, catalogue, conversation id


@dataclass
class Conversations:
    limit: int
    ttl_s: float
    clock: Callable[[], float] = time.monotonic
    _states: OrderedDict[Key, tuple[float, DialogueState]] = field(default_factory=OrderedDict)
    _locks: dict[Key, asyncio.Lock] = field(default_factory=dict)

    def get(self, key: Key) -> DialogueState | None:
        """The conversation's state, or None when it is unknown or expired (then it starts afresh)."""
        self._expire()
        found = self._states.get(key)
        if found is None:
            return None
        self._states.move_to_end(key)
        return found[1].model_copy(deep=True)

    def put(self, key: Key, state: DialogueState) -> None:
        self._states[key] = (self.clock(), state.model_copy(deep=True))
        self._states.move_to_end(key)
        while len(self._states) > self.limit:
            old, _ = self._states.popitem(last=False)
            self._locks.pop(old, None)

    def __len__(self) -> int:
        self._expire()
        return len(self._states)

    @asynccontextmanager
    async def turn(self, key: Key) -> AsyncIterator[None]:
        """Hold the conversation for one turn: another turn of it waits until this one has stored its state."""
        if len(self._locks) > 2 * self.limit:  # turns that stored nothing (errors) leave idle locks behind
            for idle in [k for k, lock in self._locks.items() if k not in self._states and not lock.locked()]:
                del self._locks[idle]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            yield

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, (at, _) in self._states.items() if now - at > self.ttl_s]:
            del self._states[key]
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]
