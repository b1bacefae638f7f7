#!/usr/bin/env python3
"""A hostile Redis for tests (Python standard library only).

It answers the commands pt2cached sends to set a connection up and to probe
(AUTH, SELECT, CLIENT SETNAME, PING) as Redis does, keeps SET values (PTTL
answers -1 for them, -2 for other keys), and
answers GET with a scripted behaviour (`HostileRedis.behaviour`, one of
BEHAVIOURS or STREAMS): lying lengths, truncation, a byte-by-byte drip,
silence, a close mid-reply, RESP3 types, an error reply, a huge array header,
garbage, an array whose parts are each within the limits but not the whole.

Listens on a Unix socket (`unix=PATH`) or on 127.0.0.1 with an ephemeral port
(`port=0`); never on any other address.

    server = HostileRedis(unix="/tmp/x/redis.sock").start()
    server.behaviour = "lying_length"
    ...
    server.stop()

As a program (for trying a daemon by hand):

    tests/support/hostile_redis.py --unix /tmp/h.sock --behaviour drip
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time

# Drip: one byte every DRIP_INTERVAL seconds.
DRIP_INTERVAL = 0.005
# The longest a drip goes on.
HOLD_LIMIT = 30.0

# GET behaviour -> (what it sends, then "hold" | "answered" | "close" |
# "drip" | "late"). "hold" keeps the connection open (reading on) after
# sending, and answers nothing more on it (Redis answers in order);
# "answered" goes on answering the commands after it.
BEHAVIOURS: dict[str, tuple[bytes, str]] = {
    # Well-behaved: nil (or the value of an earlier SET).
    "normal": (b"", "normal"),
    # A bulk header over any limit, a few bytes, then nothing.
    "lying_length": (b"$99999999999\r\nabc", "hold"),
    # 2^63-1 announced.
    "int64_max_length": (b"$9223372036854775807\r\nabc", "hold"),
    # 500 MiB announced (under the 512 MiB limit), 10 bytes sent, then nothing:
    # only the op timeout may end it.
    "announce_much_send_little": (b"$524288000\r\n0123456789", "hold"),
    # A bulk of 100 bytes, 10 sent, then the connection closes.
    "truncated": (b"$100\r\n0123456789", "close"),
    # A valid 2000-byte value sent one byte at a time (10 s in all).
    "drip": (b"$2000\r\n" + b"d" * 2000 + b"\r\n", "drip"),
    # No answer at all.
    "silence": (b"", "hold"),
    # Closes as soon as the GET arrives.
    "close_before_reply": (b"", "close"),
    # Half an array, then a close.
    "close_mid_reply": (b"*3\r\n$1\r\na\r\n$5\r\nbc", "close"),
    # RESP3 types, which a RESP2 client never asked for.
    "resp3_map": (b"%1\r\n+key\r\n+value\r\n", "hold"),
    "resp3_push": (b">2\r\n+message\r\n+hello\r\n", "hold"),
    "resp3_attribute": (b"|1\r\n+ttl\r\n:5\r\n$-1\r\n", "hold"),
    "resp3_double": (b",3.14\r\n", "hold"),
    "resp3_null": (b"_\r\n", "hold"),
    # An error reply: a reply, not a protocol error.
    "error_reply": (b"-ERR hostile says no\r\n", "answered"),
    # 2^31-1 elements announced.
    "huge_array": (b"*2147483647\r\n", "hold"),
    # Not RESP at all.
    "garbage": (b"\x00\xffHTTP/1.1 400 Bad Request\r\n\r\n", "hold"),
    # A negative length other than -1.
    "negative_length": (b"$-5\r\n", "hold"),
    # A header line that never ends.
    "endless_line": (b"+" + b"x" * (128 << 10), "hold"),
    # A reply of a type GET never gets.
    "integer_reply": (b":42\r\n", "hold"),
    # A nil, then a reply nobody asked for.
    "extra_reply": (b"$-1\r\n+OK\r\n", "hold"),
    # The right answer; LATE_DELAY later, an answer to nothing (a broken
    # proxy): left unread, it would answer the connection's next request.
    "late_extra_reply": (b"$5\r\nSTALE\r\n:-1\r\n", "late"),
}
LATE_DELAY = 0.1

# GET behaviour -> (header, item, count): the header, then `item` `count`
# times, as fast as the client reads. Each part is within the per-part limits;
# the reply as a whole is not.
STREAMS: dict[str, tuple[bytes, bytes, int]] = {
    # 200 bulks of 1 MiB in one array (200 MiB).
    "array_of_large_bulks": (b"*200\r\n", b"$1048576\r\n" + b"b" * (1 << 20) + b"\r\n", 200),
    # 2000 statuses of 64 KiB in one array (125 MiB), whatever max_value_size.
    "array_of_long_statuses": (b"*2000\r\n", b"+" + b"s" * ((64 << 10) - 1) + b"\r\n", 2000),
}

# GET behaviour -> (size, bytes per second): one valid bulk of `size` bytes,
# paced, so that the transfer keeps earning time (1 s per 32 MiB received)
# faster than it runs out, and outlasts whatever deadline a test sets for
# something else.
PACED: dict[str, tuple[int, int]] = {
    "paced_500MiB_at_36MiB_s": (500 << 20, 36 << 20),
}


def parse_command(buffer: bytearray) -> list[bytes] | None:
    """One multibulk command from the front of `buffer` (removed), or None."""
    if not buffer.startswith(b"*"):
        if buffer:
            raise ValueError(f"not a multibulk command: {bytes(buffer[:20])!r}")
        return None
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    count = int(buffer[1:end])
    pos = end + 2
    args = []
    for _ in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None
        length = int(buffer[pos + 1:end])
        start = end + 2
        if len(buffer) < start + length + 2:
            return None
        args.append(bytes(buffer[start:start + length]))
        pos = start + length + 2
    del buffer[:pos]
    return args


def bulk(value: bytes | None) -> bytes:
    if value is None:
        return b"$-1\r\n"
    return b"$%d\r\n%s\r\n" % (len(value), value)


class HostileRedis:
    def __init__(self, unix: str | os.PathLike | None = None, port: int = 0):
        self.unix = str(unix) if unix else None
        self.port = port
        self.behaviour = "normal"
        # What AUTH and SELECT are answered with.
        self.setup_reply = b"+OK\r\n"
        # Seconds a normal GET waits before it is answered.
        self.reply_delay = 0.0
        # When set: what PTTL answers, whatever the key.
        self.pttl_reply: bytes | None = None
        # Answers for the first INFO commands, one each, before the usual.
        self.info_replies: list[bytes] = []
        # When set: INFO says cluster_enabled:1 and CLUSTER SLOTS answers these bytes.
        self.cluster_slots: bytes | None = None
        self.values: dict[bytes, bytes] = {}
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.listener: socket.socket | None = None
        self.clients: list[socket.socket] = []
        # Connections whose GET is held: later commands get no answer.
        self.held: set[socket.socket] = set()
        self.threads: list[threading.Thread] = []

    def url(self) -> str:
        return f"unix://{self.unix}" if self.unix else f"redis://127.0.0.1:{self.port}"

    def start(self) -> "HostileRedis":
        if self.unix:
            if os.path.exists(self.unix):
                os.unlink(self.unix)
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(self.unix)
        else:
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(("127.0.0.1", self.port))
            self.port = self.listener.getsockname()[1]
        self.listener.listen(64)
        self.listener.settimeout(0.1)
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.threads.append(thread)
        return self

    def stop(self):
        self.stopping.set()
        with self.lock:
            clients = list(self.clients)
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()
        for thread in self.threads:
            thread.join(timeout=5)
        if self.listener:
            self.listener.close()
        if self.unix and os.path.exists(self.unix):
            os.unlink(self.unix)

    def count(self, command: str) -> int:
        with self.lock:
            return self.calls.get(command.upper(), 0)

    def _accept(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.clients.append(client)
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, client: socket.socket):
        client.settimeout(0.1)
        buffer = bytearray()
        try:
            while not self.stopping.is_set():
                try:
                    data = client.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                buffer += data
                while (args := parse_command(buffer)) is not None:
                    if not self._answer(client, args):
                        return
        except (OSError, ValueError):
            return
        finally:
            with self.lock:
                if client in self.clients:
                    self.clients.remove(client)
                self.held.discard(client)
            client.close()

    def _answer(self, client: socket.socket, args: list[bytes]) -> bool:
        """Answers one command; False once the connection is to be closed."""
        name = args[0].upper().decode(errors="replace") if args else ""
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            if client in self.held:
                return True  # a held reply: Redis answers in order, so nothing after it
        if name in ("AUTH", "SELECT"):
            client.sendall(self.setup_reply)
        elif name == "CLIENT":
            client.sendall(b"+OK\r\n")
        elif name == "PING":
            client.sendall(b"+PONG\r\n")
        elif name == "SET" and len(args) >= 3:
            self.values[args[1]] = args[2]
            client.sendall(b"+OK\r\n")
        elif name == "DEL":
            removed = sum(1 for key in args[1:] if self.values.pop(key, None) is not None)
            client.sendall(b":%d\r\n" % removed)
        elif name == "GET" and len(args) == 2:
            return self._scripted(client, args[1])
        elif name == "PTTL" and len(args) == 2:
            if self.pttl_reply is not None:
                client.sendall(self.pttl_reply)
            else:
                client.sendall(b":-1\r\n" if args[1] in self.values else b":-2\r\n")
        elif name == "INFO" and self.info_replies:
            client.sendall(self.info_replies.pop(0))
        elif name == "INFO" and self.cluster_slots is not None:
            client.sendall(bulk(b"# Cluster\r\ncluster_enabled:1\r\n"))
        elif name == "CLUSTER" and self.cluster_slots is not None:
            client.sendall(self.cluster_slots)
        else:
            client.sendall(b"-ERR unknown command '%s'\r\n" % name.encode())
        return True

    @staticmethod
    def _send_quietly(client: socket.socket, data: bytes):
        try:
            client.sendall(data)
        except OSError:
            pass

    def _scripted(self, client: socket.socket, key: bytes) -> bool:
        if self.behaviour in STREAMS:
            head, item, count = STREAMS[self.behaviour]
            deadline = time.monotonic() + HOLD_LIMIT
            client.settimeout(5)
            client.sendall(head)
            for _ in range(count):
                if self.stopping.is_set() or time.monotonic() > deadline:
                    return False
                client.sendall(item)  # OSError once the client has had enough
            client.settimeout(0.1)
            return True
        if self.behaviour in PACED:
            size, rate = PACED[self.behaviour]
            client.settimeout(5)
            client.sendall(b"$%d\r\n" % size)
            chunk = b"p" * (1 << 20)
            sent, started = 0, time.monotonic()
            while sent < size:
                if self.stopping.is_set() or time.monotonic() > started + HOLD_LIMIT:
                    return False
                part = chunk[:min(len(chunk), size - sent)]
                client.sendall(part)  # OSError once the client has had enough
                sent += len(part)
                time.sleep(max(0.0, sent / rate - (time.monotonic() - started)))
            client.sendall(b"\r\n")
            client.settimeout(0.1)
            return True
        payload, then = BEHAVIOURS[self.behaviour]
        if then in ("normal", "late"):
            time.sleep(self.reply_delay)
            client.sendall(bulk(self.values.get(key)))
            if then == "late":  # after the PTTL the daemon sends with the GET
                threading.Timer(LATE_DELAY, self._send_quietly, (client, payload)).start()
            return True
        if then == "drip":
            deadline = time.monotonic() + HOLD_LIMIT
            for i in range(len(payload)):
                if self.stopping.is_set() or time.monotonic() > deadline:
                    return False
                client.sendall(payload[i:i + 1])
                time.sleep(DRIP_INTERVAL)
            return True
        if payload:
            client.sendall(payload)
        if then == "close":
            return False
        if then == "answered":
            return True
        with self.lock:
            self.held.add(client)
        return True  # "hold": the next read waits until the client gives up


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix", help="Unix socket path")
    where.add_argument("--port", type=int, help="TCP port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--behaviour", choices=sorted([*BEHAVIOURS, *STREAMS]), default="normal")
    options = parser.parse_args()
    server = HostileRedis(unix=options.unix, port=options.port or 0).start()
    server.behaviour = options.behaviour
    print(f"hostile Redis at {server.url()}, GET behaviour {server.behaviour}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
