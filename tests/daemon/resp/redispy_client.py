"""Runs one scenario with whichever redis-py the interpreter has (4.x, 5.x or 8.x)
against a Unix socket and prints the observations as JSON. The tests run it
with each of the test virtual environments' pythons; it asserts nothing itself.

    python redispy_client.py SCENARIO SOCKET [ARGS...]
"""

import json
import os
import sys
import time

import redis


def failure(e: BaseException) -> dict:
    return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
            "msg": str(e)}


def attempt(fn):
    try:
        return {"ok": fn()}
    except Exception as e:  # noqa: BLE001 - reported to the test
        return {"error": failure(e)}


def b(value):
    """JSON-friendly bytes: latin-1 text, or None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [b(v) for v in value]
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, str):
        return value
    return value.decode("latin-1")


def client(sock: str, mode: str) -> redis.Redis:
    if mode == "path":
        return redis.Redis(unix_socket_path=sock)
    if mode == "url":
        return redis.Redis.from_url(f"unix://{sock}")
    if mode == "url-proto2":
        return redis.Redis.from_url(f"unix://{sock}?protocol=2")
    if mode == "url-proto3":
        return redis.Redis.from_url(f"unix://{sock}?protocol=3")
    raise SystemExit(f"unknown mode {mode}")


def resp_of(r: redis.Redis):
    info = r.execute_command("CLIENT", "INFO")
    if isinstance(info, dict):
        return str(info.get("resp"))
    if isinstance(info, bytes):
        info = info.decode()
    fields = dict(f.split("=", 1) for f in info.split() if "=" in f)
    return fields.get("resp")


def basic(sock: str, mode: str) -> dict:
    r = client(sock, mode)
    tag = f"{mode}:{os.getpid()}:"
    value = b"\x00\r\nbinary\xff" * 100
    out = {"redis_py": redis.__version__}
    out["ping"] = r.ping()
    out["missing"] = b(r.get(tag + "missing"))
    out["set"] = r.set(tag + "k", value)
    out["get_equal"] = r.get(tag + "k") == value
    out["set_ex"] = r.set(tag + "ex", b"v", ex=100)
    out["get_ex"] = b(r.get(tag + "ex"))
    out["set_px"] = r.set(tag + "px", b"v", px=100000)
    out["set_nx_existing"] = b(r.set(tag + "k", b"other", nx=True))
    out["set_xx_missing"] = b(r.set(tag + "nothing", b"other", xx=True))
    out["exists"] = r.exists(tag + "k", tag + "ex", tag + "missing")
    out["mget"] = b(r.mget([tag + "ex", tag + "missing", tag + "px"]))
    out["delete"] = r.delete(tag + "ex", tag + "missing")
    out["get_deleted"] = b(r.get(tag + "ex"))
    out["dbsize"] = r.dbsize()
    pipe = r.pipeline(transaction=False)
    for i in range(50):
        pipe.set(f"{tag}p{i}", f"v{i}")
    for i in range(50):
        pipe.get(f"{tag}p{i}")
    pipe.get(tag + "missing")
    replies = pipe.execute()
    out["pipeline"] = replies[:50] == [True] * 50 and \
        replies[50:100] == [f"v{i}".encode() for i in range(50)] and replies[100] is None
    tx = r.pipeline()  # MULTI/EXEC
    tx.set(tag + "t", b"1").get(tag + "t").get(tag + "missing")
    out["transaction"] = b(tx.execute())
    info = r.info()
    out["info_redis_version"] = info.get("redis_version")
    out["info_has_keyspace"] = "db0" in info
    out["resp"] = resp_of(r)
    conn = r.connection_pool.get_connection("GET") if redis.__version__.startswith("4") \
        else r.connection_pool.get_connection()
    out["conn_protocol"] = str(getattr(conn, "protocol", None))
    r.connection_pool.release(conn)
    out["missing_again"] = b(r.get(tag + "missing"))
    r.close()
    return out


def put(sock: str, key: str, value_file: str, ex: str) -> dict:
    r = redis.Redis.from_url(f"unix://{sock}")
    with open(value_file, "rb") as f:
        value = f.read()
    ok = r.set(key, value, ex=int(ex)) if int(ex) else r.set(key, value)
    return {"set": ok, "read_back_equal": r.get(key) == value}


def get(sock: str, key: str, out_file: str) -> dict:
    r = redis.Redis.from_url(f"unix://{sock}")
    value = r.get(key)
    if value is not None:
        with open(out_file, "wb") as f:
            f.write(value)
    return {"found": value is not None}


def ttl(sock: str, key: str) -> dict:
    r = redis.Redis(unix_socket_path=sock)
    start = time.monotonic()
    out = {"set": r.set(key, b"short-lived", px=300), "right_after": b(r.get(key))}
    time.sleep(0.5)
    out["after_500ms"] = b(r.get(key))
    out["elapsed"] = time.monotonic() - start
    return out


def down(sock: str) -> dict:
    """Calls against a socket with no daemon: what Inductor's client sees."""
    out = {}
    for mode in ("path", "url"):
        r = client(sock, mode)
        out[f"{mode}_get"] = attempt(lambda: r.get("pt2:fx-graph-v1::fabc:c1"))
        out[f"{mode}_set"] = attempt(lambda: r.set("pt2:fx-graph-v1::fabc:c1", b"v", ex=3600))
    return out


def stale(sock: str) -> dict:
    """Connects, waits for a line on stdin (the test stops the daemon), calls again."""
    r = redis.Redis.from_url(f"unix://{sock}")
    first = r.set("k", b"v")
    print("ready", flush=True)
    sys.stdin.readline()
    return {"first": first, "get": attempt(lambda: r.get("k")),
            "set": attempt(lambda: r.set("k", b"w", ex=10))}


def auth(sock: str, password: str) -> dict:
    out = {}
    url = redis.Redis.from_url(f"unix://:{password}@{sock}")
    out["url_set"] = attempt(lambda: url.set("auth-k", b"v"))
    out["url_get"] = attempt(lambda: b(url.get("auth-k")))
    out["url_missing"] = attempt(lambda: b(url.get("auth-missing")))
    out["url_resp"] = attempt(lambda: resp_of(url))
    query = redis.Redis.from_url(f"unix://{sock}?password={password}")
    out["query_get"] = attempt(lambda: b(query.get("auth-k")))
    kw = redis.Redis(unix_socket_path=sock, password=password)
    out["kwargs_get"] = attempt(lambda: b(kw.get("auth-k")))
    user = redis.Redis.from_url(f"unix://default:{password}@{sock}")
    out["user_get"] = attempt(lambda: b(user.get("auth-k")))
    none = redis.Redis(unix_socket_path=sock)
    out["no_password_get"] = attempt(lambda: b(none.get("auth-k")))
    wrong = redis.Redis.from_url(f"unix://:wrong@{sock}")
    out["wrong_password_get"] = attempt(lambda: b(wrong.get("auth-k")))
    return out


def oversize(sock: str, what: str, size: str) -> dict:
    r = redis.Redis.from_url(f"unix://{sock}")
    n = int(size)
    start = time.monotonic()
    if what == "key":
        out = {"set": attempt(lambda: r.set("k" * n, b"v", ex=3600))}
    else:
        out = {"set": attempt(lambda: r.set("pt2:fx-graph-v1::fbig:c1", b"x" * n, ex=3600))}
    out["elapsed"] = time.monotonic() - start
    fresh = redis.Redis.from_url(f"unix://{sock}")
    out["after"] = attempt(lambda: fresh.set("after", b"ok") and b(fresh.get("after")))
    return out


SCENARIOS = dict(basic=basic, put=put, get=get, ttl=ttl, down=down, stale=stale, auth=auth,
                 oversize=oversize)

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](*sys.argv[2:])
    print(json.dumps(result))
