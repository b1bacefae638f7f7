#!/usr/bin/env python3
"""A real Redis Cluster on loopback for tests and benchmarks (standard library only).

Starts `masters * (1 + replicas)` redis-server processes with
`--cluster-enabled yes` on free 127.0.0.1 ports (each port and its cluster bus
port, port + 10000, checked free), joins them with
`redis-cli --cluster create … --cluster-replicas R --cluster-yes`, and waits
until every node reports `cluster_state:ok` and agrees on the slot map. Every
wait is bounded in time; `stop()` kills every process it started (use it as a
context manager, or in a fixture's `finally`).

    with RedisCluster(tmp_path, masters=3, replicas=1) as cluster:
        node = cluster.master_for_key("pt2:fx-graph-v1::f…:c1")
        cluster.kill(node)
        promoted = cluster.wait_for_failover(node)
        cluster.restart(node)               # comes back as a replica of `promoted`
        cluster.reshard(promoted, other, 10)

TLS: `tls=TlsFiles(ca, cert, key)` starts the nodes with TLS only (`--port 0
--tls-port P --tls-cluster yes --tls-replication yes`) and gives redis-cli and
`command()` the same files. The nodes require client certificates (Redis's
default), and each node is a TLS client of the others' cluster bus, so the
node certificate must allow both uses (tls_certs.TlsCerts.issue(both=True));
with a server-only certificate `redis-cli --cluster create` waits forever for
the nodes to join. Any other server option
goes in `extra_args`.

As a program (to try a daemon by hand; Ctrl-C stops the cluster):

    tests/support/redis_cluster.py --dir /tmp/cl --masters 3 --replicas 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
SLOTS = 16384
# Every wait gives up after this many seconds unless told otherwise.
DEFAULT_TIMEOUT = 30.0


class ClusterError(RuntimeError):
    pass


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


def key_slot(key: str | bytes) -> int:
    """The cluster slot of `key` (hash tag rules included), as CLUSTER KEYSLOT."""
    if isinstance(key, str):
        key = key.encode()
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16_xmodem(key) % SLOTS


@dataclass(frozen=True)
class TlsFiles:
    ca_file: str
    cert_file: str
    key_file: str


@dataclass(eq=False)
class ClusterNode:
    port: int
    dir: Path
    proc: subprocess.Popen | None = None
    node_id: str = ""
    extra: list[str] = field(default_factory=list)
    want_up: bool = True  # false once killed by the test

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __repr__(self) -> str:
        return f"ClusterNode({self.address}, {'up' if self.alive() else 'down'})"


# ---- a minimal RESP2 client (one command per connection) ----

def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class _Reader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ClusterError("connection closed mid-reply")
        self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ClusterError(f"unexpected reply line {line!r}")


class RedisReplyError(Exception):
    """An error reply (returned, not raised, by `command`)."""


def free_cluster_port(taken: set[int]) -> int:
    """A loopback port that is free, and whose bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port in taken or port + 10000 > 65535 or port + 10000 in taken:
            continue
        try:
            with socket.socket() as s:
                s.bind((HOST, port + 10000))
        except OSError:
            continue
        return port
    raise ClusterError("no free port pair for a cluster node")


class RedisCluster:
    def __init__(self, root, masters: int = 3, replicas: int = 1, *, extra_args=(),
                 tls: TlsFiles | None = None, node_timeout_ms: int = 1000,
                 require_full_coverage: bool = False, password: str | None = None):
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.root = Path(root)
        self.masters_count = masters
        self.replicas_count = replicas
        self.extra_args = list(extra_args)
        self.tls = tls
        self.node_timeout_ms = node_timeout_ms
        self.require_full_coverage = require_full_coverage
        self.password = password
        self._nodes: list[ClusterNode] = []
        self._ssl: ssl.SSLContext | None = None
        if tls:
            self._ssl = ssl.create_default_context(cafile=tls.ca_file)
            self._ssl.check_hostname = False
            self._ssl.load_cert_chain(tls.cert_file, tls.key_file)

    # ---- lifetime ----

    def __enter__(self) -> "RedisCluster":
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout: float = DEFAULT_TIMEOUT) -> "RedisCluster":
        deadline = time.monotonic() + timeout
        try:
            taken: set[int] = set()
            for i in range(self.masters_count * (1 + self.replicas_count)):
                port = free_cluster_port(taken)
                taken.update((port, port + 10000))
                node_dir = self.root / f"node-{port}"
                node_dir.mkdir(parents=True, exist_ok=True)
                node = ClusterNode(port, node_dir)
                self._nodes.append(node)
                self._spawn(node)
            for node in self._nodes:
                self._wait(lambda n=node: self._ping(n), deadline, f"{node.address} to start")
            self._run_cli(["--cluster", "create", *[n.address for n in self._nodes],
                           "--cluster-replicas", str(self.replicas_count), "--cluster-yes"],
                          timeout=max(1.0, deadline - time.monotonic()))
            self.wait_ok(max(1.0, deadline - time.monotonic()))
            self._wait(self._replicas_synced, deadline, "the replicas to sync")
            for node in self._nodes:
                node.node_id = self.command(node, "CLUSTER", "MYID").decode()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Kills every node (SIGKILL: a cache cluster keeps nothing)."""
        for node in self._nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
        for node in self._nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass

    def _server_args(self, node: ClusterNode) -> list[str]:
        args = ["redis-server", "--bind", HOST, "--dir", str(node.dir),
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-require-full-coverage",
                "yes" if self.require_full_coverage else "no",
                "--save", "", "--appendonly", "no", "--logfile", "redis.log",
                # Replicas sync at once (the default waits 5 s for more of them).
                "--repl-diskless-sync-delay", "0",
                # CLUSTER SLOTS lists a replica once its offset is not 0: ping soon.
                "--repl-ping-replica-period", "1"]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(node.port), "--tls-cluster", "yes",
                     "--tls-replication", "yes", "--tls-cert-file", self.tls.cert_file,
                     "--tls-key-file", self.tls.key_file, "--tls-ca-cert-file", self.tls.ca_file]
        else:
            args += ["--port", str(node.port)]
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        return args + self.extra_args + node.extra

    def _spawn(self, node: ClusterNode):
        node.proc = subprocess.Popen(self._server_args(node), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)

    # ---- talking to nodes ----

    def cli_args(self) -> list[str]:
        """redis-cli options that reach this cluster's nodes (TLS, password)."""
        args = []
        if self.tls:
            args += ["--tls", "--cacert", self.tls.ca_file, "--cert", self.tls.cert_file,
                     "--key", self.tls.key_file]
        if self.password:
            args += ["--no-auth-warning", "-a", self.password]
        return args

    def _run_cli(self, args: list[str], timeout: float = DEFAULT_TIMEOUT) -> str:
        out = subprocess.run(["redis-cli", *self.cli_args(), *args], capture_output=True,
                             timeout=timeout)
        text = out.stdout.decode(errors="replace")
        if out.returncode != 0 or "[ERR]" in text:
            raise ClusterError(f"redis-cli {' '.join(args)} failed ({out.returncode}):\n"
                               f"{text}\n{out.stderr.decode(errors='replace')}")
        return text

    def cli(self, node: ClusterNode, *args: str, cluster_mode: bool = False,
            timeout: float = 10.0) -> str:
        """redis-cli against `node` (with -c: follows MOVED/ASK as a client)."""
        base = ["-h", HOST, "-p", str(node.port)] + (["-c"] if cluster_mode else [])
        return self._run_cli(base + list(args), timeout=timeout)

    def command(self, node: ClusterNode, *args, timeout: float = 5.0):
        """One command on a fresh connection; an error reply is returned as a
        RedisReplyError, a connection failure raises OSError."""
        with socket.create_connection((HOST, node.port), timeout=timeout) as raw:
            sock = self._ssl.wrap_socket(raw, server_hostname=HOST) if self._ssl else raw
            prefix = _encode(["AUTH", self.password]) if self.password else b""
            sock.sendall(prefix + _encode(args))
            reader = _Reader(sock)
            if self.password:
                reader.reply()
            return reader.reply()

    def pipeline(self, node: ClusterNode, *commands, timeout: float = 5.0) -> list:
        """Several commands on one connection (e.g. ASKING then GET)."""
        with socket.create_connection((HOST, node.port), timeout=timeout) as raw:
            sock = self._ssl.wrap_socket(raw, server_hostname=HOST) if self._ssl else raw
            if self.password:
                commands = (("AUTH", self.password),) + commands
            sock.sendall(b"".join(_encode(c) for c in commands))
            reader = _Reader(sock)
            replies = [reader.reply() for _ in commands]
            return replies[1:] if self.password else replies

    def _ping(self, node: ClusterNode) -> bool:
        try:
            return self.command(node, "PING", timeout=1.0) == "PONG"
        except (OSError, ClusterError, ssl.SSLError):
            return False

    def _wait(self, predicate, deadline: float, what: str, interval: float = 0.05):
        while True:
            try:
                if predicate():
                    return
            except (OSError, ClusterError, ssl.SSLError):
                pass
            if time.monotonic() >= deadline:
                raise ClusterError(f"timed out waiting for {what}")
            if any(n.want_up and n.proc is not None and not n.alive() for n in self._nodes):
                raise ClusterError(f"a node exited by itself while waiting for {what}")
            time.sleep(interval)

    # ---- topology ----

    def nodes(self) -> list[ClusterNode]:
        return list(self._nodes)

    def live_nodes(self) -> list[ClusterNode]:
        return [n for n in self._nodes if n.alive()]

    def node_by_port(self, port: int) -> ClusterNode:
        for node in self._nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def slots(self, via: ClusterNode | None = None) -> list:
        """CLUSTER SLOTS as asked of `via` (default: the first live node)."""
        node = via or self.live_nodes()[0]
        reply = self.command(node, "CLUSTER", "SLOTS")
        if isinstance(reply, RedisReplyError):
            raise ClusterError(str(reply))
        return reply

    def master_for_slot(self, slot: int, via: ClusterNode | None = None) -> ClusterNode:
        for entry in self.slots(via):
            if entry[0] <= slot <= entry[1]:
                return self.node_by_port(entry[2][1])
        raise ClusterError(f"slot {slot} is not served")

    def slot_owners(self, via: ClusterNode | None = None) -> list[ClusterNode | None]:
        """The master of every slot (None where none serves it), from one CLUSTER SLOTS."""
        owners: list[ClusterNode | None] = [None] * SLOTS
        for entry in self.slots(via):
            node = self.node_by_port(entry[2][1])
            for slot in range(entry[0], entry[1] + 1):
                owners[slot] = node
        return owners

    def replicas_of(self, master: ClusterNode, via: ClusterNode | None = None) -> list[ClusterNode]:
        for entry in self.slots(via):
            if entry[2][1] == master.port:
                return [self.node_by_port(r[1]) for r in entry[3:]]
        return []

    def masters(self) -> list[ClusterNode]:
        ports = {entry[2][1] for entry in self.slots()}
        return [n for n in self._nodes if n.port in ports]

    def keyslot(self, key: str | bytes) -> int:
        return self.command(self.live_nodes()[0], "CLUSTER", "KEYSLOT", key)

    def master_for_key(self, key: str | bytes) -> ClusterNode:
        return self.master_for_slot(self.keyslot(key))

    def info(self, node: ClusterNode) -> dict[str, str]:
        text = self.command(node, "CLUSTER", "INFO").decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def _consistent(self) -> bool:
        """Every live node says cluster_state:ok and gives the same slot owners."""
        views = []
        for node in self.live_nodes():
            if self.info(node).get("cluster_state") != "ok":
                return False
            views.append(sorted((e[0], e[1], e[2][1]) for e in self.slots(node)))
        return all(v == views[0] for v in views) and \
            sum(hi - lo + 1 for lo, hi, _ in views[0]) == SLOTS

    def _replicas_synced(self) -> bool:
        """Every master lists its replicas, and each has its link to it up (a
        replica only takes over when it has synced)."""
        for entry in self.slots():
            if len(entry) - 3 < self.replicas_count:
                return False
            for replica in entry[3:]:
                info = self.command(self.node_by_port(replica[1]), "INFO", "replication")
                if b"master_link_status:up" not in info:
                    return False
        return True

    def wait_ok(self, timeout: float = DEFAULT_TIMEOUT):
        """Until every live node reports cluster_state:ok and agrees on the owners."""
        self._wait(self._consistent, time.monotonic() + timeout, "cluster_state:ok")

    # ---- failures ----

    def kill(self, node: ClusterNode, sig: int = signal.SIGKILL):
        """Kills (or with SIGSTOP, freezes) one node."""
        node.want_up = sig in (signal.SIGSTOP, signal.SIGCONT)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                node.proc.wait(10)

    def restart(self, node: ClusterNode, timeout: float = DEFAULT_TIMEOUT):
        """Starts a killed node again on its port and dir (it keeps its nodes.conf,
        so it rejoins: a failed-over master comes back as a replica)."""
        if node.alive():
            raise ClusterError(f"{node} is running")
        node.want_up = True
        self._spawn(node)
        self._wait(lambda: self._ping(node), time.monotonic() + timeout,
                   f"{node.address} to restart")

    def wait_for_failover(self, dead: ClusterNode, timeout: float = DEFAULT_TIMEOUT) -> ClusterNode:
        """Waits until a replica of `dead` (a killed master) has taken over its
        slots and the live nodes agree; returns the new master."""
        old_slots = [(e[0], e[1]) for e in self._slots_before_failover(dead)]
        promoted: list[ClusterNode] = []

        def taken_over() -> bool:
            if not self._consistent():
                return False
            owner = self.master_for_slot(old_slots[0][0])
            if owner is dead:
                return False
            promoted[:] = [owner]
            return True

        self._wait(taken_over, time.monotonic() + timeout, f"failover of {dead.address}",
                   interval=0.1)
        return promoted[0]

    def _slots_before_failover(self, dead: ClusterNode) -> list:
        ranges = [e for e in self.slots() if e[2][1] == dead.port]
        if not ranges:
            raise ClusterError(f"{dead.address} serves no slots")
        return ranges

    # ---- resharding ----

    def reshard(self, source: ClusterNode, target: ClusterNode, slots: int,
                timeout: float = DEFAULT_TIMEOUT):
        """Moves `slots` slots (with their keys) from `source` to `target` with
        redis-cli --cluster reshard, then waits for agreement."""
        deadline = time.monotonic() + timeout
        self._run_cli(["--cluster", "reshard", source.address, "--cluster-from", source.node_id,
                       "--cluster-to", target.node_id, "--cluster-slots", str(slots),
                       "--cluster-yes"], timeout=max(1.0, deadline - time.monotonic()))
        self.wait_ok(max(1.0, deadline - time.monotonic()))

    def start_migration(self, slot: int, source: ClusterNode, target: ClusterNode):
        """Puts `slot` in the migrating (source) / importing (target) state, as
        a resharding does before moving keys: keys already moved answer ASK."""
        for node, state, other in ((target, "IMPORTING", source), (source, "MIGRATING", target)):
            reply = self.command(node, "CLUSTER", "SETSLOT", slot, state, other.node_id)
            if reply != "OK":
                raise ClusterError(f"SETSLOT {state}: {reply}")

    def migrate_key(self, key: str | bytes, source: ClusterNode, target: ClusterNode):
        auth = ["AUTH", self.password] if self.password else []
        reply = self.command(source, "MIGRATE", HOST, target.port, key, 0, 5000, *auth)
        if reply not in ("OK", "NOKEY"):
            raise ClusterError(f"MIGRATE: {reply}")

    def finish_migration(self, slot: int, target: ClusterNode):
        """Gives `slot` to `target` on every live node (CLUSTER SETSLOT NODE)."""
        for node in [target] + [n for n in self.live_nodes() if n is not target]:
            self.command(node, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        self.wait_ok()


def main() -> int:
    parser = argparse.ArgumentParser(description="Run a loopback Redis Cluster until Ctrl-C.")
    parser.add_argument("--dir", required=True, help="where the nodes keep their files")
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1)
    options = parser.parse_args()
    root = Path(options.dir)
    cluster = RedisCluster(root, options.masters, options.replicas)
    with cluster:
        print(" ".join(n.address for n in cluster.nodes()), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    if os.environ.get("KEEP") is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
