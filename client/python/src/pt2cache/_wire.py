"""The native protocol of pt2cached, version 1 (docs/protocol.md): constants
and pure encoders/decoders. No I/O here."""

from __future__ import annotations

import enum
import re
import struct
from typing import Any, List, Optional, Tuple, Union

PROTOCOL_VERSION = 1
MAGIC = b"\xf2P"
HEADER = struct.Struct("<2sBBII")  # magic, op, flags/status, id, length
HEADER_SIZE = HEADER.size  # 12

CAP_TTL = 1 << 0
CAP_BUNDLE = 1 << 1

FLAG_ONLY_IF_ABSENT = 1 << 0
FLAG_BUNDLE = 1 << 7
FLAG_STATS_ZERO = 1 << 0  # STATS: reset the counters after the snapshot (docs/protocol.md)

MAX_NAMESPACE = 32
MAX_KEY = 1024
MAX_PING = 64 * 1024
MAX_SMALL_BODY = 4096  # any request body but PUT and PING
MAX_LIST_LIMIT = 10_000
# Replies other than GET values: STATS JSON and LIST pages can be large, but
# not unbounded. A reply announcing more than this is a protocol error.
MAX_REPLY_BODY = 256 << 20

NAMESPACE_RE = re.compile(rb"[a-z0-9-]{1,32}\Z")

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HELLO_REQ = struct.Struct("<HI")
_HELLO_RESP = struct.Struct("<HIQH")
_BUNDLE_BEGIN_RESP = struct.Struct("<QBIQ")
_LIST_ENTRY = struct.Struct("<QQ")


class Op(enum.IntEnum):
    HELLO = 0x01
    PING = 0x02
    GET = 0x03
    PUT = 0x04
    EXISTS = 0x05
    DEL = 0x06
    STATS = 0x07
    LIST = 0x08
    CLEAR = 0x09
    BUNDLE_BEGIN = 0x20
    BUNDLE_END = 0x21


class Status(enum.IntEnum):
    OK = 0x00
    MISS = 0x01
    NOT_STORED = 0x02
    MALFORMED = 0x10
    VERSION_MISMATCH = 0x11
    UNKNOWN_OP = 0x12
    KEY_TOO_LONG = 0x13
    VALUE_TOO_LARGE = 0x14
    BAD_NAMESPACE = 0x15
    HANDSHAKE_REQUIRED = 0x16
    STORAGE_ERROR = 0x17
    UNKNOWN_TOKEN = 0x18
    INTERNAL = 0x19
    BUSY = 0x1A


# Error statuses after which the daemon closes the connection.
CLOSING_STATUSES = frozenset(
    {
        Status.MALFORMED,
        Status.VERSION_MISMATCH,
        Status.UNKNOWN_OP,
        Status.KEY_TOO_LONG,
        Status.VALUE_TOO_LARGE,
        Status.BAD_NAMESPACE,
        Status.HANDSHAKE_REQUIRED,
        Status.INTERNAL,
        Status.BUSY,
    }
)

Bytesish = Union[bytes, bytearray, memoryview]


class WireError(Exception):
    """A body that does not match the grammar (raised by the decoders)."""


def header(op: int, flags: int, rid: int, length: int) -> bytes:
    return HEADER.pack(MAGIC, op, flags, rid, length)


def str8(data: bytes) -> bytes:
    return _U8.pack(len(data)) + data


def str16(data: bytes) -> bytes:
    return _U16.pack(len(data)) + data


def u32(value: int) -> bytes:
    return _U32.pack(value)


def u64(value: int) -> bytes:
    return _U64.pack(value)


def hello_body(capabilities: int, client_name: bytes) -> bytes:
    return _HELLO_REQ.pack(PROTOCOL_VERSION, capabilities) + str8(client_name[:255])


def key_body(ns: bytes, key: bytes, token: Optional[int] = None) -> bytes:
    prefix = u64(token) if token is not None else b""
    return prefix + str8(ns) + str16(key)


def put_head(ns: bytes, key: bytes, ttl_ms: int, token: Optional[int] = None) -> bytes:
    return key_body(ns, key, token) + u64(ttl_ms)


def list_body(ns: bytes, cursor: bytes, limit: int) -> bytes:
    return str8(ns) + str16(cursor) + u32(limit)


def bundle_begin_body(code_hash: bytes, backend_hash: bytes) -> bytes:
    return str16(code_hash) + str16(backend_hash)


class _Reader:
    def __init__(self, data: Bytesish):
        self.data = memoryview(data)
        self.at = 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.data):
            raise WireError(f"body ends after {len(self.data)} bytes, {self.at + n} needed")
        view = self.data[self.at:self.at + n]
        self.at += n
        return view

    def unpack(self, fmt: struct.Struct) -> Tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size))

    def str8(self) -> bytes:
        (n,) = self.unpack(_U8)
        return bytes(self.take(n))

    def str16(self) -> bytes:
        (n,) = self.unpack(_U16)
        return bytes(self.take(n))

    def end(self, what: str) -> None:
        if self.at != len(self.data):
            raise WireError(f"{len(self.data) - self.at} unexpected bytes after the {what}")


def parse_hello_response(body: Bytesish) -> Tuple[int, int, int, int, str]:
    """(version, capabilities, max_value, max_key, server_name)."""
    r = _Reader(body)
    version, caps, max_value, max_key = r.unpack(_HELLO_RESP)
    name = r.str8().decode("utf-8", "replace")
    r.end("HELLO response")
    return version, caps, max_value, max_key, name


def parse_error(body: Bytesish) -> str:
    """The message of an error body; tolerant of a body that is not one."""
    try:
        r = _Reader(body)
        return r.str16().decode("utf-8", "replace")
    except WireError:
        return bytes(body).decode("utf-8", "replace")


def parse_u32(body: Bytesish, what: str) -> int:
    r = _Reader(body)
    (value,) = r.unpack(_U32)
    r.end(what)
    return int(value)


def parse_u64(body: Bytesish, what: str) -> int:
    r = _Reader(body)
    (value,) = r.unpack(_U64)
    r.end(what)
    return int(value)


def parse_bundle_begin_response(body: Bytesish) -> Tuple[int, bool, int, int]:
    r = _Reader(body)
    token, hit, entries, saved = r.unpack(_BUNDLE_BEGIN_RESP)
    r.end("BUNDLE_BEGIN response")
    if hit not in (0, 1):
        raise WireError(f"BUNDLE_BEGIN hit byte is {hit}, not 0 or 1")
    return token, bool(hit), entries, saved


def parse_list_response(body: Bytesish) -> Tuple[bytes, List[Tuple[bytes, int, int]]]:
    r = _Reader(body)
    cursor = r.str16()
    (count,) = r.unpack(_U32)
    entries = []
    for _ in range(count):
        key = r.str16()
        size, mtime = r.unpack(_LIST_ENTRY)
        entries.append((key, size, mtime))
    r.end("LIST response")
    return cursor, entries
