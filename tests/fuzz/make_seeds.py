#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of the fuzz targets into corpus/<name>/.

Run it again after a format changes; it replaces only the files it writes
(seed-*), so inputs added by hand (or minimised crashes) stay. Needs
libxxhash and libzstd (ctypes) for well-formed disk entries.
"""
import ctypes
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
xxhash = ctypes.CDLL("libxxhash.so.0")
xxhash.XXH3_64bits.restype = ctypes.c_uint64
xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
zstd = ctypes.CDLL("libzstd.so.1")
zstd.ZSTD_compress.restype = ctypes.c_size_t
zstd.ZSTD_compress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                               ctypes.c_size_t, ctypes.c_int]
zstd.ZSTD_compressBound.restype = ctypes.c_size_t
zstd.ZSTD_compressBound.argtypes = [ctypes.c_size_t]


def write(name, seeds):
    folder = HERE / "corpus" / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("seed-*"):
        old.unlink()
    for label, data in seeds.items():
        if isinstance(data, str):
            data = data.encode()
        (folder / f"seed-{label}").write_bytes(data)


# ---- native frames (docs/protocol.md) ----
OP = dict(hello=1, ping=2, get=3, put=4, exists=5, delete=6, stats=7, list=8, clear=9,
          scan=0x0B, dump=0x0C, restore=0x0D, bundle_begin=0x20, bundle_end=0x21)


def frame(op, body=b"", flags=0, id=7):
    return b"\xf2\x50" + struct.pack("<BBII", OP.get(op, op), flags, id, len(body)) + body


def str8(s):
    return struct.pack("<B", len(s)) + s


def str16(s):
    return struct.pack("<H", len(s)) + s


KEY = b"fxgraph-abc"
frames = {
    "hello": frame("hello", struct.pack("<HI", 1, 3) + str8(b"fuzz")),
    "ping": frame("ping", b"payload"),
    "get": frame("get", str8(b"inductor") + str16(KEY)),
    "get-bundle": frame("get", struct.pack("<Q", 99) + str8(b"autotune") + str16(KEY), flags=0x80),
    "put": frame("put", str8(b"inductor") + str16(KEY) + struct.pack("<Q", 0) + b"value bytes"),
    "put-nx-bundle": frame("put", struct.pack("<Q", 5) + str8(b"a") + str16(b"k") +
                           struct.pack("<Q", 1000) + b"v" * 80, flags=0x81),
    "exists": frame("exists", str8(b"inductor") + str16(KEY)),
    "del": frame("delete", str8(b"inductor") + str16(KEY)),
    "stats": frame("stats"),
    "hash-files": frame(0x0A, struct.pack("<H", 2) + str16(b"/usr/include/stdio.h") +
                        str16(b"/tmp/x.h")),
    "list": frame("list", str8(b"inductor") + str16(b"") + struct.pack("<I", 100)),
    "list-clamped": frame("list", str8(b"ns") + str16(b"cursor") + struct.pack("<I", 0)),
    "clear": frame("clear", str8(b"inductor")),
    "bundle-begin": frame("bundle_begin", str16(b"c" * 52) + str16(b"backend")),
    "bundle-end": frame("bundle_end", struct.pack("<Q", 12345)),
    "scan": frame("scan", str16(b"") + struct.pack("<IQB", 1000, 0, 2) + str8(b"fx-graph") +
                  str8(b"pgo")),
    "scan-cursor": frame("scan", str16(b"pgo/" + b"0" * 32) + struct.pack("<IQB", 0, 5, 0)),
    "dump": frame("dump", str8(b"inductor") + str16(KEY)),
    "restore": frame("restore", str8(b"pgo") + str16(KEY) + struct.pack("<QQ", 1, 0) + b"v" * 9,
                     flags=1),
    "scan-response": frame("scan", str16(b"pgo/ab") + struct.pack("<I", 1) + str8(b"pgo") +
                           str16(b"k") + struct.pack("<QQQ", 3, 4, 5)),
    "dump-response": frame("dump", struct.pack("<QQ", 7, 8) + b"value"),
    "hello-response": frame("hello", struct.pack("<HIQH", 1, 3, 512 << 20, 1024) +
                            str8(b"pt2cached")),
    "list-response": frame("list", str16(b"next") + struct.pack("<I", 1) + str16(b"k") +
                           struct.pack("<QQ", 3, 4)),
    "error-response": frame("get", str16(b"malformed GET body")),
    "bundle-begin-response": frame("bundle_begin", struct.pack("<QBIQ", 9, 1, 2, 3)),
    "cxx-lookup": frame(0x0E, str16(b"0" * 32) + struct.pack("<B", 2) + str8(b"@PT2_SRCDIR@") +
                        str16(b"/work/src") + str8(b"@PT2_TMPDIR@") + str16(b"/tmp")),
    "cxx-lookup-response": frame(0x0E, struct.pack("<BI", 2, 4) + b"PCXM" + b"result bytes"),
    "bad-magic": b"GET / HTTP/1.1\r\n\r\n",
    "unknown-op": frame(0x7f),
    "too-long": b"\xf2\x50" + struct.pack("<BBII", 3, 0, 1, 0xFFFFFFFF),
    "key-too-long": frame("get", str8(b"ns") + struct.pack("<H", 2000) + b"k"),
    "bad-namespace": frame("get", str8(b"NS!") + str16(b"k")),
    "truncated": frame("put", str8(b"ns") + str16(b"key") + b"\x00" * 8 + b"v")[:-3],
}
frames["pipeline"] = frames["hello"] + frames["put"] + frames["get"] + frames["stats"]
write("frame", frames)

# ---- RESP commands ----


def multibulk(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


write("resp", {
    "get": multibulk("GET", "pt2:fxgraph:abc"),
    "set": multibulk("SET", "key", "value", "EX", "60"),
    "hello3": multibulk("HELLO", "3", "AUTH", "default", "pw"),
    "binary": multibulk("SET", "k", bytes(range(256))),
    "empty-arg": multibulk("GET", ""),
    "pipeline": multibulk("PING") + multibulk("GET", "a") + b"PING\r\n",
    "inline": "PING\r\n",
    "inline-quoted": "SET \"a key\" 'a value'\r\n",
    "inline-empty": "\r\n",
    "null-array": "*-1\r\n",
    "zero": "*0\r\n",
    "partial": "*2\r\n$3\r\nGET\r\n$10\r\nabc",
    "bad-count": "*3000000000\r\n",
    "bad-bulk": "*1\r\n$-5\r\n",
    "not-dollar": "*1\r\n+3\r\n",
    "no-crlf": "*1\r\n$3\r\nGETxx",
    "large-bulk": "*2\r\n$3\r\nSET\r\n$536870912\r\n",
    "leading-zero": "*01\r\n$1\r\na\r\n",
})

# ---- disk entries (daemon/store/disk/disk_entry.hpp) ----


def entry(ns, key, value, created=1700000000000, expires=0, compress=False):
    payload, flags = value, 0
    if compress:
        bound = zstd.ZSTD_compressBound(len(value))
        buf = ctypes.create_string_buffer(bound)
        n = zstd.ZSTD_compress(buf, bound, value, len(value), 1)
        payload, flags = buf.raw[:n], 1
    head = b"P2CE" + struct.pack("<HHBHqqQQ", 1, flags, len(ns), len(key), created, expires,
                                 len(value), len(payload)) + ns + key
    body = head + payload
    return body + struct.pack("<Q", xxhash.XXH3_64bits(body, len(body)))


write("disk_entry", {
    "raw": entry(b"inductor", b"fxgraph-abc", b"compiled graph bytes"),
    "empty-value": entry(b"autotune", b"k", b""),
    "empty-key": entry(b"n", b"", b"v"),
    "expiring": entry(b"inductor", b"key", b"x" * 100, expires=1700000060000),
    "compressed": entry(b"inductor", b"big", b"abcdefgh" * 512, compress=True),
    "compressed-json": entry(b"autotune", b"k" * 40,
                             json.dumps({"XBLOCK": 128, "num_warps": 4}).encode() * 40,
                             compress=True),
    "bad-checksum": entry(b"ns", b"k", b"value")[:-1] + b"\x00",
    "structured": bytes(range(64)) * 3,
})

# ---- autotune bundles (docs/protocol.md, "Bundles") ----
best = {"XBLOCK": 128, "R0_BLOCK": 8, "num_warps": 4, "num_stages": 1,
        "configs_hash": "9" * 64, "found_by_coordesc": False, "time_taken_ms": 42,
        "triton_cache_hash": None}
best_ws = dict(best, num_consumer_groups=0, num_buffers_warp_spec=0, triton_cache_hash="abc")
k1, k2 = "a" * 64 + ".best_config", "0123456789abcdef" * 4 + ".best_config"
write("bundle", {
    "two": json.dumps({k1: best, k2: best_ws}),
    "one-float": json.dumps({k1: dict(best, XBLOCK=1.5, found_by_coordesc=True)}),
    "skipped": json.dumps({"not-a-key": best, k1: [1, 2], k2: best}),
    "unicode": json.dumps({k1: dict(best, note="caf\u00e9 \U0001f600")}),
    "empty": "{}",
    "not-object": "[1, 2, 3]",
    "not-json": "{\"a\": ",
    "best-config": json.dumps(best),
    "nested": json.dumps({k1: dict(best, extra={"a": [1, {"b": None}]})}),
})

# ---- config files (docs/configuration.md) ----
write("config", {
    "docs-example": """[daemon]
log_level = "info"
idle_exit_s = 3600          # exit after an hour without clients

[memory]
max_size = "1GiB"

[disk]
cache_dir = "/scratch/u/pt2cache"
max_size = "50GiB"
compress_level = 3

[caches]
fx_graph_cache = true
autograd_cache = true

[remote]
url = "redis://:s3cret@redis.internal:6379/0"
fx_graph = true
autograd = true
autotune = true
expire_s = 604800           # a week
pool_size = 8

[bundle]
idle_timeout_s = 600
""",
    "unix": "[remote]\nurl = \"unix:///run/redis.sock?db=3\"\nfx_graph = true\n",
    "host-port": "[remote]\nhost = \"h\"\nport = 6380\npassword = \"p\\u0001\"\n",
    "sizes": "[memory]\nmax_size = 0\n[disk]\nmax_size = \"1.5GiB\"\nwrite_mode = \"ASYNC\"\n",
    "dotted": "daemon.log_level = \"debug\"\ndisk.cache_dir = \"/tmp/c\\td\"\n",
    "empty": "",
    "unknown-section": "[nope]\na = 1\n",
    "unknown-key": "[daemon]\nnope = 1\n",
    "bad-type": "[daemon]\nio_threads = \"two\"\n",
    "bad-syntax": "[daemon\nlog_level = \n",
    "out-of-range": "[disk]\ncompress_level = 99\n",
})

# ---- Redis URLs (config/redis_url.hpp) ----
write("redis_url", {
    "plain": "redis://localhost",
    "port-db": "redis://h:6380/2",
    "auth": "redis://user:p%40ss@h:1/0",
    "password-only": "redis://:secret@redis.internal",
    "ipv6": "redis://[::1]:6379",
    "query": "redis://h?db=5&protocol=3",
    "unix": "unix:///run/redis/redis.sock",
    "unix-auth-db": "unix://u:p@/tmp/r.sock?db=1",
    "bad-scheme": "http://h",
    "tls": "rediss://user:pw@cache.example.com:6380/1",
    "bad-port": "redis://h:99999",
    "bad-percent": "redis://u:p%4@h",
    "unix-host": "unix://host/path",
})

# ---- pt2cache-cxx manifests without their checksum (docs/cxx.md) ----


def manifest_input(path, status=0, size=3, fill=b"a"):
    return str16(path) + struct.pack("<BQ", status, size) + fill * 16


def manifest(variants, version=1):
    out = b"PCXM" + struct.pack("<B3xI", version, len(variants))
    for variant in variants:
        out += struct.pack("<I", len(variant)) + b"".join(variant)
    return out


_variant = [manifest_input(b"@PT2_SRCDIR@/k.cpp"), manifest_input(b"/usr/include/cmath", 0, 9),
            manifest_input(b"@PT2_SRCDIR@/k.cpp.gch", 1, 0, b"\0")]
write("cxx_manifest", {
    "one": manifest([_variant]),
    "two-shared-paths": manifest([_variant, _variant[:2]]),
    "empty": manifest([]),
    "empty-variant": manifest([[]]),
    "bad-status": manifest([[manifest_input(b"/x", 9)]]),
    "too-many": manifest([[manifest_input(b"/x")]] * 17),
    "bad-version": manifest([_variant], version=2),
    "truncated": manifest([_variant])[:-7],
})

# ---- pt2cache-cxx header text and search lists (docs/cxx.md) ----

_GCC_V = b"""Using built-in specs.
ignoring duplicate directory "/usr/include/x86_64-linux-gnu/c++/12"
ignoring nonexistent directory "nonex"
#include "..." search starts here:
 q
#include <...> search starts here:
 /usr/include/c++/12
 /System/Library/Frameworks (framework directory)
 /usr/include
End of search list.
"""
write("cxx_includes", {
    "directives": b'#include <vector>\n  # include "a/b.h"\n#include_next <stdlib.h>\n'
                  b'#import "m.h"\n#if __has_include(<opt.h>) && __has_include_next("n.h")\n'
                  b'#include <>\n#include "open\n#endif\n',
    "gcc-v": _GCC_V,
    "gcc-v-truncated": _GCC_V[:-20],
})

# ---- archives (docs/archive.md) ----


def archive_record(ns, key, value, created=1700000000000, expires=0):
    head = b"\x01" + bytes([len(ns)]) + ns + struct.pack("<H", len(key)) + key + \
        struct.pack("<QQQ", created, expires, len(value)) + value
    return head + struct.pack("<Q", xxhash.XXH3_64bits(head, len(head))), len(value)


def archive(records, end=True, flags=1):
    stream = b"".join(r for r, _ in records)
    if end:
        tail = b"\x02" + struct.pack("<QQQ", len(records), sum(size for _, size in records),
                                     xxhash.XXH3_64bits(stream, len(stream)))
        stream += tail + struct.pack("<Q", xxhash.XXH3_64bits(tail, len(tail)))
    bound = zstd.ZSTD_compressBound(len(stream))
    buf = ctypes.create_string_buffer(bound)
    n = zstd.ZSTD_compress(buf, bound, stream, len(stream), 3)
    return b"P2CA" + struct.pack("<HH", 1, flags) + buf.raw[:n]


_records = [archive_record(b"fx-graph", b"key-1", b"compiled graph " * 20),
            archive_record(b"autotune", b"a" * 64 + b".best_config", b'{"XBLOCK": 128}', 1, 2),
            archive_record(b"pgo", b"k", b"")]
write("archive", {
    "three": archive(_records),
    "empty": archive([]),
    "no-end": archive(_records, end=False),
    "bad-flags": archive(_records, flags=3),
    "truncated": archive(_records)[:-5],
    "trailing": archive(_records) + b"\x00",
})
