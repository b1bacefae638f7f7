"""The native-protocol client of pt2cached (docs/protocol.md).

A cache must never make a compiler fail. A default ``Client`` never raises:
every failure (no daemon, a lost connection, a timeout, a protocol or server
error, even a bad argument) becomes a miss (``None``, ``False``, ``0``, an
empty page) and is logged through :mod:`logging` under the ``pt2cache``
logger: a warning the first time a kind of failure happens in a process,
debug messages after that. After a failure that drops the connection the
client fails fast, without touching the socket, for ``retry_after`` seconds,
so a dead daemon costs nothing per call; the next call after that reconnects.

``Client(strict=True)`` raises :class:`pt2cache.errors.Pt2CacheError`
subclasses instead, for tools and tests.

One connection per process: it is opened on the first call, reused by every
call and thread (calls are serialised by a lock), and dropped in a child after
``fork()`` (the child opens its own on its first call).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Set,
                    Tuple, TypeVar, Union)

from . import _wire
from ._wire import CAP_BUNDLE, FLAG_BUNDLE, FLAG_ONLY_IF_ABSENT, FLAG_STATS_ZERO, Op, Status
from .results import _NO_BUNDLE, BundleBegin, ListEntry, ListPage
from ._connection import ServerInfo, default_socket_path, _Connection, _status_name
from .errors import (ProtocolError, Pt2CacheError, ServerError, UnknownTokenError,
                     UnsupportedError)

__all__ = [
    "Client",
    "BundleBegin",
    "ListEntry",
    "ListPage",
    "ServerInfo",
    "default_socket_path",
    "default_client",
]

log = logging.getLogger("pt2cache")

Key = Union[str, bytes]
Value = Union[bytes, bytearray, memoryview]
_T = TypeVar("_T")

# How many pipelined requests get_many() keeps in flight: small enough that
# the requests always fit the socket buffers, so sending never waits on the
# daemon draining replies we have not read yet.
_PIPELINE_WINDOW = 64


_EMPTY_PAGE = ListPage(entries=[], next_cursor=b"")


_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()
    for client in list(_clients):
        client._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client(_Connection):
    """A connection to pt2cached, opened lazily and shared by all threads.

    ``socket_path``: default :func:`default_socket_path`. ``timeout``: seconds
    a call may take once connected (from its first byte sent to its last byte
    received). ``connect_timeout``: seconds for connect() plus HELLO.
    ``retry_after``: seconds of fail-fast after a failure that drops the
    connection. ``strict``: raise errors instead of turning them into misses.
    """

    def __init__(
        self,
        socket_path: Optional[Union[str, "os.PathLike[str]"]] = None,
        timeout: float = 10.0,
        *,
        connect_timeout: float = 1.0,
        retry_after: float = 2.0,
        strict: bool = False,
        client_name: str = "pt2cache-python",
    ):
        self._path = os.fspath(socket_path) if socket_path is not None else default_socket_path()
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._retry_after = float(retry_after)
        self._strict = bool(strict)
        self._name = client_name.encode("utf-8", "replace")[:255]
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._pid = os.getpid()
        self._info: Optional[ServerInfo] = None
        self._next_id = 0
        self._down_until = 0.0
        self._down_reason = ""
        self._warned: Set[Tuple[str, Any]] = set()
        _clients.add(self)

    # ------------------------------------------------------------ properties

    @property
    def socket_path(self) -> str:
        return self._path

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def connected(self) -> bool:
        return self._sock is not None and self._pid == os.getpid()

    @property
    def server_info(self) -> Optional[ServerInfo]:
        """What the daemon announced in HELLO, once connected."""
        return self._info if self.connected else None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "not connected"
        return f"<pt2cache.Client {self._path!r} {state}{' strict' if self._strict else ''}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        sock = self.__dict__.get("_sock")
        if sock is not None:
            try:
                sock.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def close(self) -> None:
        """Closes the connection; the next call opens a new one."""
        with self._lock:
            self._drop()
            self._down_until = 0.0

    def connect(self) -> bool:
        """Connects and performs HELLO unless already connected. True when
        connected (strict: raises instead of returning False)."""
        return self._run("connect", False, lambda: self._with_connection(lambda: True))

    # ------------------------------------------------------------ key-value

    def get(self, ns: str, key: Key, *, bundle_token: Optional[int] = None) -> Optional[bytes]:
        """The value, or None on a miss (an expired entry is a miss).

        With ``bundle_token`` a hit joins that bundle (docs/protocol.md,
        Bundles). An unknown or expired token is, unless strict, logged and
        the GET repeated without it.
        """

        def op(token: Optional[int]) -> Optional[bytes]:
            body = _wire.key_body(_ns(ns), _key(key), token)
            status, reply = self._call(Op.GET, FLAG_BUNDLE if token is not None else 0, body,
                                       value_reply=True, needs=CAP_BUNDLE if token is not None else 0)
            if status == Status.OK:
                return reply
            if status == Status.MISS:
                return None
            raise ProtocolError(f"GET answered {_status_name(status)}")

        return self._run("get", None, lambda: self._with_token(op, bundle_token))

    def get_many(self, ns: str, keys: Sequence[Key]) -> List[Optional[bytes]]:
        """GETs of every key, pipelined on the one connection; result i
        answers keys[i]. Any failure fails the whole call (all None)."""

        def op() -> List[Optional[bytes]]:
            nsb = _ns(ns)
            bodies = [_wire.key_body(nsb, _key(k)) for k in keys]
            out: List[Optional[bytes]] = []
            for status, reply in self._call_many(Op.GET, bodies):
                if status == Status.OK:
                    out.append(reply)
                elif status == Status.MISS:
                    out.append(None)
                else:
                    raise ProtocolError(f"GET answered {_status_name(status)}")
            return out

        return self._run("get_many", [None] * len(keys), op)

    def put(
        self,
        ns: str,
        key: Key,
        value: Value,
        *,
        ttl: Optional[float] = None,
        only_if_absent: bool = False,
        bundle_token: Optional[int] = None,
    ) -> bool:
        """Stores ``value``; True when stored. ``ttl``: seconds until the
        entry expires (None or 0: never). ``only_if_absent``: store only if no
        live entry exists (False when one does). With ``bundle_token`` the
        entry joins that bundle."""

        def op(token: Optional[int]) -> bool:
            ttl_ms = _ttl_ms(ttl)
            data = memoryview(value).cast("B")
            head = _wire.put_head(_ns(ns), _key(key), ttl_ms, token)
            flags = (FLAG_ONLY_IF_ABSENT if only_if_absent else 0) | (
                FLAG_BUNDLE if token is not None else 0)
            status, _ = self._call(Op.PUT, flags, head, data,
                                   needs=CAP_BUNDLE if token is not None else 0)
            if status == Status.OK:
                return True
            if status == Status.NOT_STORED:
                return False
            raise ProtocolError(f"PUT answered {_status_name(status)}")

        return self._run("put", False, lambda: self._with_token(op, bundle_token))

    def exists(self, ns: str, key: Key) -> bool:
        """True when a live entry exists."""
        return self._run("exists", False, lambda: self._key_op(Op.EXISTS, ns, key))

    def delete(self, ns: str, key: Key) -> bool:
        """True when an entry existed and was removed."""
        return self._run("delete", False, lambda: self._key_op(Op.DEL, ns, key))

    def stats(self, zero: bool = False) -> Optional[Dict[str, Any]]:
        """The STATS object (schema: docs/operations.md), or None on failure.
        With ``zero``, the daemon then resets its counters and latency
        histograms (``pt2cache stats --zero``); the object returned holds the
        counts from just before the reset."""

        def op() -> Dict[str, Any]:
            _, body = self._call_ok(Op.STATS, b"", flags=FLAG_STATS_ZERO if zero else 0)
            try:
                parsed = json.loads(body)
            except ValueError as e:
                raise ProtocolError(f"STATS reply is not JSON: {e}") from None
            if not isinstance(parsed, dict):
                raise ProtocolError("STATS reply is not a JSON object")
            return parsed

        return self._run("stats", None, op)

    def list(self, ns: str, cursor: bytes = b"", limit: int = 1000) -> ListPage:
        """One page of the entries of ``ns`` on disk. Start with an empty
        cursor, then pass ``next_cursor`` until it comes back empty."""

        def op() -> ListPage:
            if isinstance(cursor, str):
                raw_cursor = cursor.encode("utf-8", "surrogateescape")
            else:
                raw_cursor = bytes(cursor)
            if len(raw_cursor) > 0xFFFF:
                raise ServerError(Status.MALFORMED, "LIST cursor longer than 65535 bytes")
            lim = max(0, min(int(limit), 0xFFFFFFFF))
            _, body = self._call_ok(Op.LIST, _wire.list_body(_ns(ns), raw_cursor, lim))
            try:
                next_cursor, entries = _wire.parse_list_response(body)
            except _wire.WireError as e:
                raise ProtocolError(f"LIST reply: {e}") from None
            return ListPage(
                entries=[ListEntry(k.decode("utf-8", "surrogateescape"), size, mtime)
                         for k, size, mtime in entries],
                next_cursor=next_cursor,
            )

        return self._run("list", _EMPTY_PAGE, op)

    def iter_list(self, ns: str, page_size: int = 1000) -> Iterator[ListEntry]:
        """Every entry of ``ns`` on disk, page after page. Stops early (after
        logging) when a page fails, unless strict."""
        cursor = b""
        while True:
            page = self.list(ns, cursor, page_size)
            yield from page.entries
            if page.complete:
                return
            cursor = page.next_cursor

    def clear(self, ns: str) -> int:
        """Removes every entry of ``ns`` from the local tiers; how many."""

        def op() -> int:
            _, body = self._call_ok(Op.CLEAR, _wire.str8(_ns(ns)))
            try:
                return _wire.parse_u64(body, "CLEAR reply")
            except _wire.WireError as e:
                raise ProtocolError(str(e)) from None

        return self._run("clear", 0, op)

    def ping(self, payload: bytes = b"") -> Optional[float]:
        """Round-trip time of one PING in seconds (connecting first, which is
        not counted), or None on failure."""

        def op() -> float:
            data = bytes(payload)
            if len(data) > _wire.MAX_PING:
                raise ServerError(Status.MALFORMED, f"PING payload over {_wire.MAX_PING} bytes")
            return self._with_connection(lambda: self._timed_ping(data))

        return self._run("ping", None, op)

    # ------------------------------------------------------------ bundles

    def bundle_begin(self, code_hash: str, backend_hash: str) -> BundleBegin:
        """Starts (or restores) the bundle of one compiled module.

        ``code_hash``: Inductor's hash of the comment-stripped module code
        (:func:`pt2cache.autotune.comment_stripped_hash`); ``backend_hash``:
        Triton's hash with backend. On a hit the daemon has already written the
        bundle's best-configs into its local tiers. On failure the result has
        ``token=None`` (see :class:`BundleBegin`).
        """

        def op() -> BundleBegin:
            code = _text(code_hash)
            backend = _text(backend_hash)
            if not code:
                raise ServerError(Status.MALFORMED, "BUNDLE_BEGIN needs a code hash")
            body = _wire.bundle_begin_body(code, backend)
            if len(body) > _wire.MAX_SMALL_BODY:
                raise ServerError(Status.MALFORMED, "BUNDLE_BEGIN hashes too long")
            _, reply = self._call_ok(Op.BUNDLE_BEGIN, body, needs=CAP_BUNDLE)
            try:
                token, hit, entries, saved = _wire.parse_bundle_begin_response(reply)
            except _wire.WireError as e:
                raise ProtocolError(f"BUNDLE_BEGIN reply: {e}") from None
            return BundleBegin(token=token, hit=hit, entries=entries, time_saved_ms=saved)

        return self._run("bundle_begin", _NO_BUNDLE, op)

    def bundle_end(self, token: Optional[int]) -> int:
        """Closes a bundle token; how many entries the daemon stored (0 when
        nothing was, or on failure). ``None`` does nothing."""
        if token is None:
            return 0

        def op() -> int:
            _, reply = self._call_ok(Op.BUNDLE_END, _wire.u64(int(token)), needs=CAP_BUNDLE)
            try:
                return _wire.parse_u32(reply, "BUNDLE_END reply")
            except _wire.WireError as e:
                raise ProtocolError(str(e)) from None

        return self._run("bundle_end", 0, op)

    # ------------------------------------------------------------ autotune (typed)

    def read_best_config_dict(self, keys: "AutotuneKeys", *,
                              bundle_token: Optional[int] = None) -> Optional[Dict[str, Any]]:
        """Inductor's ``AutotuneCache._read``: the stored best-config dict of
        the most local entry (``<hex>.best_config``, then the remote form
        ``<remote_key>::<inner_key>``), or None."""
        from .autotune import NAMESPACE, decode_best_config

        if keys.local is not None:
            found = decode_best_config(self.get(NAMESPACE, keys.local, bundle_token=bundle_token))
            if found:
                return found
        if keys.remote is not None:
            found = decode_best_config(self.get(NAMESPACE, keys.remote))
            if found:
                return found
        return None

    def read_best_config(
        self,
        keys: "AutotuneKeys",
        configs: Sequence[Any],
        *,
        coordinate_descent_tuning: bool = False,
        has_warp_spec: bool = False,
        bundle_token: Optional[int] = None,
    ) -> Optional[Any]:
        """Inductor's ``AutotuneCache.read_best``: the candidate of ``configs``
        that the stored best-config selects, else a new config built from it
        (found by coordinate descent with that tuning on, or matching no
        single candidate), or None."""
        from .autotune import load_cached_autotuning

        best = self.read_best_config_dict(keys, bundle_token=bundle_token)
        if best is None:
            return None
        return load_cached_autotuning(best, keys.configs_hash, configs,
                                      coordinate_descent_tuning, has_warp_spec=has_warp_spec)

    def save_best_config(
        self,
        keys: "AutotuneKeys",
        config: Any,
        time_taken_ns: int,
        *,
        found_by_coordesc: bool = False,
        triton_cache_hash: Optional[str] = None,
        has_warp_spec: bool = False,
        bundle_token: Optional[int] = None,
    ) -> bool:
        """Inductor's ``AutotuneCache.save``: writes the best-config JSON under
        the local key (joining ``bundle_token``'s bundle) and the remote-form
        key. True when every write was stored."""
        from .autotune import NAMESPACE, best_config, encode_best_config

        data = encode_best_config(best_config(
            config, keys.configs_hash, time_taken_ns, found_by_coordesc=found_by_coordesc,
            triton_cache_hash=triton_cache_hash, has_warp_spec=has_warp_spec))
        ok = True
        if keys.local is not None:
            ok = self.put(NAMESPACE, keys.local, data, bundle_token=bundle_token) and ok
        if keys.remote is not None:
            ok = self.put(NAMESPACE, keys.remote, data) and ok
        return ok

    # ------------------------------------------------------------ internals

    def _run(self, what: str, default: _T, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a cache never breaks the compiler
            if self._strict:
                raise
            self._report(what, e)
            return default

    def _report(self, what: str, error: BaseException) -> None:
        if isinstance(error, Pt2CacheError):
            kind = (error.kind, getattr(error, "status", None))
        else:
            kind = ("bug", type(error).__name__)
        if getattr(error, "fail_fast", False):
            # The failure that started the back-off was reported already.
            log.debug("pt2cache: %s skipped: %s", what, error)
            return
        first = kind not in self._warned
        self._warned.add(kind)
        if first:
            log.warning(
                "pt2cache: %s via %s failed (%s); treated as a miss, later failures of this "
                "kind are logged at debug level", what, self._path, error,
                exc_info=not isinstance(error, Pt2CacheError))
        else:
            log.debug("pt2cache: %s failed: %s", what, error)

    def _with_token(self, op: Callable[[Optional[int]], _T], token: Optional[int]) -> _T:
        if token is None:
            return op(None)
        try:
            return op(int(token))
        except (UnknownTokenError, UnsupportedError) as e:
            if self._strict:
                raise
            self._report("bundle token", e)
            return op(None)

    def _key_op(self, op: Op, ns: str, key: Key) -> bool:
        status, _ = self._call(op, 0, _wire.key_body(_ns(ns), _key(key)))
        if status == Status.OK:
            return True
        if status == Status.MISS:
            return False
        raise ProtocolError(f"{op.name} answered {_status_name(status)}")

    def _call_ok(self, op: Op, body: bytes, needs: int = 0, flags: int = 0) -> Tuple[int, bytes]:
        status, reply = self._call(op, flags, body, needs=needs)
        if status != Status.OK:
            raise ProtocolError(f"{op.name} answered {_status_name(status)}")
        return status, reply

    def _timed_ping(self, data: bytes) -> float:
        start = time.perf_counter()
        status, reply = self._exchange(Op.PING, 0, data, b"", time.monotonic() + self._timeout,
                                       False)
        elapsed = time.perf_counter() - start
        if status != Status.OK or reply != data:
            raise ProtocolError("PING reply does not echo the payload")
        return elapsed

    def _call(self, op: Op, flags: int, head: bytes, tail: Value = b"", *,
              value_reply: bool = False, needs: int = 0) -> Tuple[int, bytes]:
        """Sends one request and returns (status, body) of its reply: OK, MISS
        or NOT_STORED. Error statuses raise ServerError."""

        def exchange() -> Tuple[int, bytes]:
            info = self._info
            assert info is not None
            if needs and not info.capabilities & needs:
                raise UnsupportedError(
                    f"{info.server_name} at {self._path} does not offer "
                    f"{'BUNDLE' if needs & CAP_BUNDLE else 'TTL'} (capabilities "
                    f"0x{info.capabilities:x}); {op.name} needs it")
            # (A daemon announcing 0 is left to judge for itself.)
            if op == Op.PUT and 0 < info.max_value < len(tail):
                raise ServerError(Status.VALUE_TOO_LARGE,
                                  f"value of {len(tail)} bytes exceeds max_value {info.max_value}")
            return self._exchange(op, flags, head, tail, time.monotonic() + self._timeout,
                                  value_reply)

        return self._with_connection(exchange)

    def _call_many(self, op: Op, bodies: List[bytes]) -> List[Tuple[int, bytes]]:
        def exchange() -> List[Tuple[int, bytes]]:
            deadline = time.monotonic() + self._timeout
            out: List[Tuple[int, bytes]] = []
            for start in range(0, len(bodies), _PIPELINE_WINDOW):
                window = bodies[start:start + _PIPELINE_WINDOW]
                ids = []
                frames = []
                first = not out
                for body in window:
                    rid = self._new_id()
                    ids.append(rid)
                    frames.append(_wire.header(op, 0, rid, len(body)) + body)
                # Only GETs are pipelined: replaying them when the connection
                # turns out dead before any reply arrived is harmless.
                self._send(b"".join(frames), b"", deadline, replayable=first)
                # An error reply ends the call, but only once the window's
                # other replies are read: left unread, they would answer the
                # connection's next requests.
                error: Optional[ServerError] = None
                for rid in ids:
                    try:
                        out.append(self._receive(op, rid, deadline, value_reply=True,
                                                 replayable=not out))
                    except ServerError as e:
                        if self._sock is None:  # a closing error: nothing more comes
                            raise
                        error = error or e
                        out.append((e.status, b""))
                if error is not None:
                    raise error
            return out

        if not bodies:
            return []
        return self._with_connection(exchange)

def _ns(ns: str) -> bytes:
    raw = ns.encode("ascii", "replace") if isinstance(ns, str) else bytes(ns)
    if not _wire.NAMESPACE_RE.match(raw):
        raise ServerError(Status.BAD_NAMESPACE,
                          f"namespace {ns!r} does not match [a-z0-9-]{{1,32}}")
    return raw


def _key(key: Key) -> bytes:
    raw = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
    if not 0 < len(raw) <= _wire.MAX_KEY:
        raise ServerError(Status.KEY_TOO_LONG,
                          f"key of {len(raw)} bytes: keys are 1 to {_wire.MAX_KEY} bytes")
    return raw


def _text(value: Union[str, bytes]) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _ttl_ms(ttl: Optional[float]) -> int:
    if ttl is None or ttl == 0:
        return 0
    if ttl < 0 or math.isnan(ttl):
        raise ValueError(f"ttl must be positive seconds, not {ttl!r}")
    if math.isinf(ttl):
        return 0
    return min(max(1, math.ceil(ttl * 1000)), 0xFFFFFFFFFFFFFFFF)


_default_lock = threading.Lock()
_default: Optional[Client] = None


def default_client() -> Client:
    """The process-wide non-strict client on :func:`default_socket_path`,
    created on first use; ``pt2cache.torch.install()`` uses it."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


if TYPE_CHECKING:  # pragma: no cover
    from .autotune import AutotuneKeys  # noqa: F401
