"""The connection under :class:`pt2cache.Client`: opening it (connect +
HELLO), framed exchanges under one deadline, reconnecting once when the daemon
dropped an idle connection, fail-fast after a failure, and fork safety. The
operations themselves live in client.py."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional, Callable, Tuple, TypeVar, Union

from . import _wire
from ._wire import CAP_BUNDLE, CAP_TTL, Op, Status
from .errors import (CacheTimeoutError, ProtocolError, Pt2CacheError, ServerError,
                     UnknownTokenError, UnreachableError)

log = logging.getLogger("pt2cache")

Value = Union[bytes, bytearray, memoryview]
_T = TypeVar("_T")

# Values at least this large are sent with their own sendall() instead of being
# copied behind the frame header.
_SEPARATE_SEND = 64 * 1024
# A reply's buffer starts at most this large and doubles as its bytes arrive.
_FIRST_RECV_BUFFER = 64 << 20


def _socket_above_standard_streams() -> socket.socket:
    """A Unix stream socket whose descriptor is not 0, 1 or 2: in a process
    that closed its stdout, print() would otherwise write into the
    connection, and the daemon would run the text as requests."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if sock.fileno() > 2:
        return sock
    try:
        moved = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        sock.close()
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=moved)


@dataclass(frozen=True)
class ServerInfo:
    """What the daemon announced in HELLO."""

    version: int
    capabilities: int
    max_value: int
    max_key: int
    server_name: str

    @property
    def supports_bundles(self) -> bool:
        return bool(self.capabilities & CAP_BUNDLE)

    @property
    def supports_ttl(self) -> bool:
        return bool(self.capabilities & CAP_TTL)


class _Lost(Exception):
    """The connection broke. ``replayable`` when no byte of the reply had
    arrived, so that the request may be sent again on a new connection."""

    def __init__(self, message: str, replayable: bool):
        super().__init__(message)
        self.replayable = replayable


def default_socket_path(environ: Optional[Dict[str, str]] = None) -> str:
    """The socket pt2cached listens on by default (config/config.hpp):
    ``$PT2CACHE_SOCKET``, else ``$XDG_RUNTIME_DIR/pt2cache/pt2cached.sock``,
    else ``/tmp/pt2cache-$UID/pt2cached.sock``. Empty variables count as unset.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PT2CACHE_SOCKET")
    if explicit:
        return explicit
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return _join_path(_join_path(runtime, "pt2cache"), "pt2cached.sock")
    return f"/tmp/pt2cache-{os.getuid()}/pt2cached.sock"


def _join_path(directory: str, name: str) -> str:
    # config/defaults.cpp join_path: trailing slashes of `directory` dropped.
    while len(directory) > 1 and directory.endswith("/"):
        directory = directory[:-1]
    if directory == "/":
        return "/" + name
    return f"{directory}/{name}"


class _Connection:
    """State and I/O of the one connection; see the module docstring."""

    # Set by Client.__init__.
    _path: str
    _timeout: float
    _connect_timeout: float
    _retry_after: float
    _name: bytes
    _lock: threading.Lock
    _sock: Optional[socket.socket]
    _pid: int
    _info: Optional[ServerInfo]
    _next_id: int
    _down_until: float
    _down_reason: str

    def _with_connection(self, fn: Callable[[], _T]) -> _T:
        """Runs ``fn`` holding the lock with a connection open; a request that
        broke a reused connection before any reply byte arrived is sent once
        more on a new connection."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset_after_fork()
            fresh = False
            if self._sock is None:
                self._open()
                fresh = True
            try:
                return fn()
            except _Lost as lost:
                self._drop()
                if fresh or not lost.replayable:
                    self._mark_down(str(lost))
                    raise UnreachableError(str(lost)) from None
                log.debug("pt2cache: %s; reconnecting once", lost)
            except (UnreachableError, CacheTimeoutError, ProtocolError) as e:
                self._drop()
                self._mark_down(str(e))
                raise
            except ServerError:
                raise  # its whole reply was read: the connection is in step
            except BaseException:
                # Interrupted mid-request (KeyboardInterrupt, a signal
                # handler's exception): part of a frame may be sent or unread,
                # and the next request on this connection would be read as
                # the rest of it (a value stored or returned with another
                # request's bytes).
                self._drop()
                raise
            # The daemon dropped an idle connection (restart, idle exit):
            # one more try on a new one.
            self._open()
            try:
                return fn()
            except _Lost as lost:
                self._drop()
                self._mark_down(str(lost))
                raise UnreachableError(str(lost)) from None
            except (UnreachableError, CacheTimeoutError, ProtocolError) as e:
                self._drop()
                self._mark_down(str(e))
                raise
            except ServerError:
                raise
            except BaseException:
                self._drop()
                raise

    def _open(self) -> None:
        now = time.monotonic()
        if now < self._down_until:
            error = UnreachableError(
                f"pt2cached at {self._path} is unavailable ({self._down_reason}); not retrying "
                f"for {self._down_until - now:.2f} s")
            error.fail_fast = True
            raise error
        deadline = now + self._connect_timeout
        sock = _socket_above_standard_streams()
        try:
            sock.settimeout(self._connect_timeout)
            try:
                sock.connect(self._path)
            except socket.timeout:
                raise CacheTimeoutError(
                    f"connecting to pt2cached at {self._path} took over "
                    f"{self._connect_timeout} s") from None
            except OSError as e:
                raise UnreachableError(
                    f"cannot connect to pt2cached at {self._path}: "
                    f"{e.strerror or e}") from None
            self._sock = sock
            self._hello(deadline)
        except BaseException as e:
            self._drop()
            sock.close()
            if isinstance(e, _Lost):
                self._mark_down(str(e))
                raise UnreachableError(f"pt2cached at {self._path}: {e}") from None
            if isinstance(e, (Pt2CacheError, OSError)):
                self._mark_down(str(e))
            raise

    def _hello(self, deadline: float) -> None:
        caps = CAP_TTL | CAP_BUNDLE
        try:
            status, body = self._exchange(Op.HELLO, 0, _wire.hello_body(caps, self._name), b"",
                                          deadline, False)
        except _Lost:
            # A refusing daemon may have closed before the HELLO went out:
            # its reason is still there to read.
            sock = self._sock
            try:
                head = sock.recv(256, socket.MSG_DONTWAIT) if sock is not None else b""
            except OSError:
                head = b""
            if head[:1] == b"-":
                raise self._refusal(head) from None
            raise
        if status != Status.OK:
            raise ProtocolError(f"HELLO answered {_status_name(status)}")
        try:
            version, caps, max_value, max_key, name = _wire.parse_hello_response(body)
        except _wire.WireError as e:
            raise ProtocolError(f"HELLO reply: {e}") from None
        if version != _wire.PROTOCOL_VERSION:
            raise ProtocolError(
                f"pt2cached at {self._path} speaks protocol version {version}, this client "
                f"speaks version {_wire.PROTOCOL_VERSION}")
        self._info = ServerInfo(version, caps, max_value, max_key, name)

    def _new_id(self) -> int:
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        return self._next_id

    def _exchange(self, op: Op, flags: int, head: bytes, tail: Value, deadline: float,
                  value_reply: bool) -> Tuple[int, bytes]:
        rid = self._new_id()
        frame = _wire.header(op, flags, rid, len(head) + len(tail)) + head
        if 0 < len(tail) < _SEPARATE_SEND:
            frame += tail
            tail = b""
        self._send(frame, tail, deadline, replayable=True)
        return self._receive(op, rid, deadline, value_reply, replayable=True)

    def _send(self, frame: bytes, tail: Value, deadline: float, replayable: bool) -> None:
        sock = self._sock
        assert sock is not None
        try:
            sock.settimeout(_remaining(deadline, self._path))
            sock.sendall(frame)
            if len(tail):
                sock.settimeout(_remaining(deadline, self._path))
                sock.sendall(tail)
        except socket.timeout:
            raise CacheTimeoutError(f"sending to pt2cached at {self._path} timed out") from None
        except OSError as e:
            raise _Lost(f"connection to pt2cached at {self._path} lost while sending: "
                        f"{e.strerror or e}", replayable) from None

    def _receive(self, op: Op, rid: int, deadline: float, value_reply: bool,
                 replayable: bool) -> Tuple[int, bytes]:
        head = self._recv_exact(_wire.HEADER_SIZE, deadline, replayable)
        if head[:1] == b"-":
            raise self._refusal(head)
        magic, rop, status, reply_id, length = _wire.HEADER.unpack(head)
        if magic != _wire.MAGIC:
            raise ProtocolError(f"reply with bad magic {magic!r}")
        if status >= 0x10:
            if length > 2 + 0xFFFF:
                raise ProtocolError(f"error reply of {length} bytes")
            message = _wire.parse_error(self._recv_exact(length, deadline, False))
            if status in _wire.CLOSING_STATUSES or rop != op or reply_id != rid:
                # The daemon closes the connection after these.
                self._drop()
            cls = UnknownTokenError if status == Status.UNKNOWN_TOKEN else ServerError
            raise cls(status, message)
        if rop != op or reply_id != rid:
            raise ProtocolError(f"reply {Op(rop).name if rop in Op._value2member_map_ else rop}"
                                f"#{reply_id} to request {op.name}#{rid}: replies crossed")
        if status not in (Status.OK, Status.MISS, Status.NOT_STORED):
            raise ProtocolError(f"unknown status 0x{status:02x}")
        limit = _wire.MAX_REPLY_BODY
        if value_reply and self._info is not None:
            limit = max(limit, self._info.max_value)
        if length > limit:
            raise ProtocolError(f"{op.name} reply of {length} bytes exceeds {limit}")
        return status, self._recv_exact(length, deadline, False)

    def _refusal(self, head: bytes) -> UnreachableError:
        """A daemon over its connection limits answers with one RESP error line
        and closes (docs/protocol.md, "Refusal")."""
        line = head
        sock = self._sock
        try:
            if sock is not None:
                sock.settimeout(0.1)
                while b"\r" not in line and len(line) < 256:
                    chunk = sock.recv(256)
                    if not chunk:
                        break
                    line += chunk
        except OSError:
            pass
        self._drop()
        reason = line[1:].split(b"\r", 1)[0].decode("utf-8", "replace")
        self._mark_down(reason)
        return UnreachableError(f"pt2cached at {self._path} refused the connection: {reason}")

    def _recv_exact(self, n: int, deadline: float, replayable: bool) -> bytes:
        if n == 0:
            return b""
        sock = self._sock
        assert sock is not None
        # Grown as bytes arrive, not sized by the header: a reply that claims
        # gigabytes and stalls costs no more than what came.
        buf = bytearray(min(n, _FIRST_RECV_BUFFER))
        view = memoryview(buf)
        got = 0
        try:
            while got < n:
                if got == len(buf):
                    view.release()
                    buf.extend(bytes(min(len(buf), n - len(buf))))
                    view = memoryview(buf)
                sock.settimeout(_remaining(deadline, self._path))
                count = sock.recv_into(view[got:])
                if count == 0:
                    raise _Lost(f"pt2cached at {self._path} closed the connection",
                                replayable and got == 0)
                got += count
        except socket.timeout:
            raise CacheTimeoutError(
                f"pt2cached at {self._path} did not answer within the timeout") from None
        except OSError as e:
            raise _Lost(f"connection to pt2cached at {self._path} lost: {e.strerror or e}",
                        replayable and got == 0) from None
        return bytes(buf)

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        self._info = None
        if sock is not None:
            try:
                sock.close()  # close(2) only: never shutdown(), a parent may share it
            except OSError:
                pass

    def _mark_down(self, reason: str) -> None:
        self._down_until = time.monotonic() + self._retry_after
        self._down_reason = reason

    def _reset_after_fork(self) -> None:
        # The inherited connection belongs to the parent; forget it (closing
        # our copy of the descriptor does not affect the parent's). The lock
        # may have been held by a thread that does not exist here.
        self._lock = threading.Lock()
        self._pid = os.getpid()
        sock, self._sock = self._sock, None
        self._info = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        self._down_until = 0.0


def _remaining(deadline: float, path: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise CacheTimeoutError(f"pt2cached at {path} did not answer within the timeout")
    return left


def _status_name(status: int) -> str:
    try:
        return Status(status).name
    except ValueError:
        return f"status 0x{status:02x}"
