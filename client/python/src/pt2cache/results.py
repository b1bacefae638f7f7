"""What :class:`pt2cache.Client` calls return besides bytes and booleans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

@dataclass(frozen=True)
class BundleBegin:
    """The answer to BUNDLE_BEGIN.

    ``token`` is None when the call failed (no daemon, no bundle support...):
    gets and puts with ``bundle_token=None`` are plain gets and puts, and
    ``bundle_end(None)`` does nothing, so callers need no special case.
    """

    token: Optional[int]
    hit: bool
    entries: int
    time_saved_ms: int

    @property
    def ok(self) -> bool:
        return self.token is not None


_NO_BUNDLE = BundleBegin(token=None, hit=False, entries=0, time_saved_ms=0)


@dataclass(frozen=True)
class ListEntry:
    key: str  # decoded as UTF-8 with surrogateescape: key.encode("utf-8", "surrogateescape")
    size: int
    mtime_ms: int  # milliseconds since the Unix epoch


@dataclass(frozen=True)
class ListPage:
    entries: List[ListEntry]
    next_cursor: bytes  # empty: the listing is complete

    @property
    def complete(self) -> bool:
        return not self.next_cursor
