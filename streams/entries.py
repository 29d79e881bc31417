"""What a consumer-group runtime hands its handler: entries as read, the slots that hold them, and the
handler's side of the bargain."""

from __future__ import annotations

from typing import Protocol

Entry = tuple[str, dict[str, str] | None]
ReadReply = list[tuple[str, list[Entry]]] | None
Slot = tuple[str, str]


class EntryHandler(Protocol):
    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        """Start work for freshly held entries; release each slot once it is settled."""

    async def hand_back(self, slots: list[Slot]) -> int:
        """Give unfinished entries back to the group at once (drain); returns how many went back (what another
        consumer took over meanwhile, or what had ended, is not)."""

    async def tick(self) -> None:
        """Periodic upkeep (e.g. promoting due retries)."""

    async def taken_over(self, slots: list[Slot]) -> None:
        """Entries still at work here that another consumer took over (their lease ran out unrenewed), told after
        every renewal that finds them: the handler may stop work whose outcome can no longer count
        (``GroupRuntime.abandon``)."""


class Release(Protocol):
    """Frees an entry's slot (``GroupRuntime.release``); ``settled=False`` when it stays pending on purpose."""

    def __call__(self, stream: str, entry_id: str, *, settled: bool = True) -> None: ...
