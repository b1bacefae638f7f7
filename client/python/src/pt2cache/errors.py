"""Exceptions of the pt2cache client.

They are raised only by a ``Client(strict=True)``. A default client turns every
failure into a miss and logs it (see ``pt2cache.client``).
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "Pt2CacheError",
    "UnreachableError",
    "CacheTimeoutError",
    "ProtocolError",
    "ServerError",
    "UnknownTokenError",
    "UnsupportedError",
]


class Pt2CacheError(Exception):
    """Base class of every error the client raises in strict mode."""

    kind = "error"


class UnreachableError(Pt2CacheError, ConnectionError):
    """No daemon at the socket, the connection was lost, or the client is
    inside its retry-after back-off after such a failure."""

    kind = "unreachable"
    # True when raised without trying, inside the retry-after back-off that an
    # earlier failure started.
    fail_fast = False


class CacheTimeoutError(Pt2CacheError, TimeoutError):
    """Connecting, the handshake or a request took longer than allowed."""

    kind = "timeout"


class ProtocolError(Pt2CacheError):
    """The daemon sent something this client cannot accept (bad magic, crossed
    reply ids, another protocol version, an oversized or malformed body)."""

    kind = "protocol"


class ServerError(Pt2CacheError):
    """The daemon answered an error status (docs/protocol.md, Status codes).

    Arguments the daemon would refuse (a bad namespace, an empty or too long
    key, a value over ``max_value``) are checked before anything is sent and
    reported as the ServerError the daemon would answer.
    """

    kind = "server"

    def __init__(self, status: int, message: str, status_name: Optional[str] = None):
        self.status = status
        self.status_name = status_name or _status_name(status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class UnknownTokenError(ServerError):
    """A bundle token is unknown, expired or already ended (UNKNOWN_TOKEN)."""


class UnsupportedError(Pt2CacheError):
    """The daemon did not offer a capability the call needs (e.g. BUNDLE)."""

    kind = "unsupported"


def _status_name(status: int) -> str:
    from ._wire import Status

    try:
        return Status(status).name
    except ValueError:
        return f"status 0x{status:02x}"
