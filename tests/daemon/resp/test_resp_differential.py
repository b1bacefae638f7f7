"""Random command sequences, sent byte for byte to pt2cached and to a real
redis-server: every reply must be the same (values, nulls, counts, error
texts), for the commands docs/torch.md says behave as in Redis. Seeded, so a
failure reproduces; the failing sequence is printed with it."""

from __future__ import annotations

import random

import pytest
from pt2harness import Daemon, RedisServer, TempDir
from resp_helpers import RespConnection, encode

SEQUENCES = 200
COMMANDS = 50

# Keys of every mapping in docs/torch.md ("Key mapping"), and plain ones. Not
# the empty key: a SET of it closes the connection (docs/torch.md, "Failure
# behaviour"); nor SELECT of a database other than 0, the only one.
KEYS = [
    "pt2:fx-graph-v1::f" + "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs" + ":c1",
    "pt2:fx-graph-v1::f" + "bcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst" + ":c1",
    "pt2:autograd-experimental::a1:c1",
    "pt2:dynamo-pgo::p1:c1",
    "pt2:bundled-autotune-v1::b1:c1",
    "pt2:" + "ab" * 32 + "::k1:c1",
    "pt2:fx-graph-v1::short:c2",
    "plain",
    "k:1",
]

# Spellings that Redis's string2ll accepts or refuses.
INTEGERS = ["010", "-0", "+5", "1e3", " 5", "5 ", "0x10", "-1", "00", "2147483648", "-2147483649",
            "9223372036854775807", "9223372036854775808", ""]


def value(rng: random.Random) -> bytes:
    size = rng.choice([0, 1, 5, 100, 1024, 3000])
    return bytes(rng.getrandbits(8) for _ in range(size))


def set_command(rng: random.Random) -> list:
    args = ["SET", rng.choice(KEYS), value(rng)]
    options = []
    if rng.random() < 0.4:
        options += rng.choice([["EX", "1000"], ["PX", "900000"], ["KEEPTTL"], ["EX", "0"],
                               ["EX", "-5"], ["PX", "abc"], ["ex", "500"], ["EX"],
                               ["EX", rng.choice(INTEGERS)]])
    if rng.random() < 0.4:
        options += [rng.choice(["NX", "XX", "nx", "xx"])]
    if rng.random() < 0.05:
        options += rng.choice([["NX", "XX"], ["EX", "10", "PX", "10"], ["KEEPTTL", "EX", "5"],
                               ["BOGUS"]])
    rng.shuffle(options) if rng.random() < 0.1 else None
    return args + options


def plain_command(rng: random.Random) -> list:
    kind = rng.choices(["SET", "GET", "MGET", "EXISTS", "DEL", "UNLINK", "PING", "ECHO",
                        "SELECT", "UNKNOWN", "ARITY", "CLIENT", "HELLO", "RESET"],
                       weights=[30, 30, 8, 8, 8, 3, 3, 3, 2, 2, 3, 3, 1, 1])[0]
    if kind == "SET":
        return set_command(rng)
    if kind == "GET":
        return ["GET", rng.choice(KEYS)]
    if kind in ("MGET", "EXISTS", "DEL", "UNLINK"):
        return [kind.lower() if rng.random() < 0.2 else kind,
                *rng.choices(KEYS, k=rng.randint(1, 4))]
    if kind == "PING":
        return ["PING", *(["hello"] if rng.random() < 0.5 else [])]
    if kind == "ECHO":
        return ["ECHO", value(rng)]
    if kind == "SELECT":
        return ["SELECT", rng.choice(["0", "x", *INTEGERS])]
    if kind == "CLIENT":
        return rng.choice([["CLIENT", "GETNAME"], ["CLIENT", "SETNAME", "job-1"],
                           ["CLIENT", "SETNAME", "a b"], ["CLIENT", "SETNAME", ""],
                           ["CLIENT", "SETNAME"], ["CLIENT", "NOSUCH"], ["client", "getname"]])
    if kind == "HELLO":  # those whose reply does not name the server
        return rng.choice([["HELLO", "4"], ["HELLO", "x"], ["HELLO", "1"], ["HELLO", "-1"]])
    if kind == "RESET":  # back to RESP2, no name, out of any MULTI
        return ["RESET"]
    if kind == "UNKNOWN":
        return [rng.choice(["FOO", "NOSUCH"]), *rng.choices(["x", "y z", ""], k=rng.randint(0, 3))]
    return rng.choice([["GET"], ["GET", "a", "b"], ["SET", "k"], ["MGET"], ["ECHO"]])


def sequence(seed: int) -> list:
    rng = random.Random(seed)
    commands = []
    while len(commands) < COMMANDS:
        if rng.random() < 0.1:  # a transaction, sometimes aborted or discarded
            commands.append(["MULTI"])
            commands += [plain_command(rng) for _ in range(rng.randint(0, 4))]
            commands.append([rng.choice(["EXEC", "EXEC", "DISCARD"])])
        else:
            commands.append(plain_command(rng))
    return commands


@pytest.fixture(scope="module")
def servers():
    root = TempDir()
    d = Daemon(root.path).start()
    (root.path / "redis").mkdir()
    real = RedisServer(root.path / "redis").start()
    yield d, real
    real.stop()
    d.kill()
    root.cleanup()


def run(sock, commands: list, protocol: int, pipelined: bool) -> list:
    c = RespConnection(sock)
    try:
        if protocol == 3:
            c.command("HELLO", "3")
        c.command("DEL", *KEYS)
        if pipelined:
            c.send(b"".join(encode(*command) for command in commands))
            return [c.reply() for _ in commands]
        return [c.command(*command) for command in commands]
    finally:
        c.close()


@pytest.mark.parametrize("seed", range(SEQUENCES))
def test_same_replies_as_redis_server(servers, seed):
    d, real = servers
    commands = sequence(seed)
    protocol = 3 if seed % 3 == 2 else 2
    pipelined = seed % 2 == 1
    expected = run(real.socket, commands, protocol, pipelined)
    got = run(d.socket, commands, protocol, pipelined)
    for i, (command, want, have) in enumerate(zip(commands, expected, got)):
        shown = [a if isinstance(a, str) else a[:16] for a in command]
        assert have == want, (f"seed {seed}, RESP{protocol}, pipelined={pipelined}, command {i}: "
                              f"{shown}\n  redis-server: {want!r:.300}\n  pt2cached:    {have!r:.300}")
    assert d.proc.poll() is None, d.log()
