"""pt2cache.torch.install() against a stand-in torch.

torch is a multi-GB download and is not installed where these tests run, so
this is the one place a stand-in is used: a minimal module tree
``torch/_inductor/remote_cache.py`` written to a temp directory that
reproduces the structure of the real one (pytorch/pytorch,
torch/_inductor/remote_cache.py as of torch 2.5 to 2.9): ``RemoteCacheBackend``
(abstract ``_get``/``_put`` behind concrete ``get``/``put``),
``RemoteCacheJsonSerde``, ``RemoteCache`` with the class attribute
``backend_override_cls`` consulted in ``__init__``, ``RedisRemoteCache``
formatting ``pt2:{cache_id}::{key}:c1`` and building a
``RedisRemoteCacheBackend`` only when no override is set, the five remote
cache classes, ``LocalCache``/``LocalAutotuneCache`` and ``create_cache``.
It is written from a reading of that file, not copied. A torch 2.4-style tree
(no ``RemoteCache``, no hook) and no torch at all cover the refusal paths.

Each scenario runs in a subprocess so that the stand-in never enters this
interpreter's sys.modules; the daemon is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pt2cache
import pt2cache.autotune as at
from pyclient_helpers import PACKAGE_SRC

MODERN_REMOTE_CACHE = '''
"""Stand-in for torch/_inductor/remote_cache.py (see test_pyclient_torch.py)."""
from __future__ import annotations

import json
import logging
import os
import sys
from abc import abstractmethod
from typing import Any, Callable, Generic, Optional, TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_U = TypeVar("_U")

# Probes for the tests: what the real module would have done.
REDIS_BACKENDS_BUILT = 0
STATS = {}


def _count(name, what):
    STATS.setdefault(name, {}).setdefault(what, 0)
    STATS[name][what] += 1


class RemoteCacheBackend(Generic[_T]):
    def __init__(self) -> None:
        self._name = f"backend:{type(self).__name__}"

    @abstractmethod
    def _get(self, key: str) -> Optional[_T]:
        pass

    @abstractmethod
    def _put(self, key: str, data: _T) -> None:
        pass

    def get(self, key: str) -> Optional[_T]:
        value = self._get(key)
        _count(self._name, "miss" if value is None else "hit")
        return value

    def put(self, key: str, data: _T) -> None:
        self._put(key, data)
        _count(self._name, "put")


class RemoteCacheSerde(Generic[_T, _U]):
    @abstractmethod
    def encode(self, data: _T) -> _U:
        pass

    @abstractmethod
    def decode(self, data: _U) -> _T:
        pass


class RemoteCacheJsonSerde(RemoteCacheSerde):
    def encode(self, data):
        return bytes(json.dumps(data), "ascii")

    def decode(self, data):
        return json.loads(data)


class LocalCacheBackend(RemoteCacheBackend[bytes]):
    def _get(self, key):
        try:
            with open(key, "rb") as fd:
                return fd.read()
        except FileNotFoundError:
            return None

    def _put(self, key, data):
        os.makedirs(os.path.dirname(key), exist_ok=True)
        with open(key, "wb") as fd:
            fd.write(data)


class RemoteCache(Generic[_T]):
    backend_override_cls: Optional[Callable[[], RemoteCacheBackend[Any]]] = None

    def __init__(self, backend, serde) -> None:
        if (override_cls := self.__class__.backend_override_cls) is not None:
            self.backend = override_cls()
        else:
            self.backend = backend
        self.serde = serde

    def get(self, key: str):
        return self._get(key, None)

    def put(self, key: str, value) -> None:
        assert value is not None
        self._put(key, value, None)

    def _get(self, key, sample):
        if data := self._backend_get(key):
            return self.serde.decode(data)
        return None

    def _backend_get(self, key):
        return self.backend.get(key)

    def _put(self, key, value, sample):
        self._backend_put(key, self.serde.encode(value))

    def _backend_put(self, key, data):
        self.backend.put(key, data)


class RedisRemoteCacheBackend(RemoteCacheBackend[bytes]):
    def __init__(self, cache_id: str) -> None:
        global REDIS_BACKENDS_BUILT
        super().__init__()
        REDIS_BACKENDS_BUILT += 1
        self._redis = None  # the real one builds redis.Redis here

    def _get(self, key):
        return None

    def _put(self, key, data):
        pass


class RedisRemoteCache(RemoteCache):
    def __init__(self, cache_id: str) -> None:
        if self.__class__.backend_override_cls:
            backend = None
        else:
            backend = RedisRemoteCacheBackend(cache_id)
        super().__init__(backend, RemoteCacheJsonSerde())
        version = 1
        self._key_fmt = f"pt2:{cache_id}::{{key}}:c{version}"

    def _get_key(self, key):
        return self._key_fmt.format(key=key)

    def _get(self, key, sample):
        return super()._get(self._get_key(key), sample)

    def _put(self, key, value, sample):
        super()._put(self._get_key(key), value, sample)


class LocalCache(RemoteCache):
    def __init__(self, cache_id: str) -> None:
        super().__init__(LocalCacheBackend(), RemoteCacheJsonSerde())


class LocalAutotuneCache(LocalCache):
    pass


class RemoteAutotuneCache(RedisRemoteCache):
    pass


class RemoteBundledAutotuneCache(RedisRemoteCache):
    pass


class RemoteFxGraphCache(RedisRemoteCache):
    pass


class RemoteAOTAutogradCache(RedisRemoteCache):
    pass


%(pgo)s


def create_cache(key, is_fbcode=False, fb_cache_cls=None, oss_cache_cls=None, *,
                 local_cache_cls=None):
    try:
        this_module = sys.modules[__name__]
        if local_cache_cls is not None:
            return getattr(this_module, local_cache_cls)(key)
        if is_fbcode:
            raise ModuleNotFoundError("torch._inductor.fb")
        return getattr(this_module, oss_cache_cls)(key)
    except Exception:
        log.warning("Unable to create cache", exc_info=True)
        return None
'''

PGO_CLASS = '''class RemoteDynamoPGOCache(RedisRemoteCache):
    pass'''

# torch 2.4: a bare backend interface, no RemoteCache and so no hook.
OLD_REMOTE_CACHE = '''
from __future__ import annotations
import os
from abc import abstractmethod

class RemoteCacheBackend:
    @abstractmethod
    def get(self, key): pass

    @abstractmethod
    def put(self, key, data): pass

class RedisRemoteCacheBackend(RemoteCacheBackend):
    def __init__(self, cache_id):
        self._key_fmt = f"pt2:{cache_id}:{{key}}"
    def get(self, key): return None
    def put(self, key, data): pass
'''


def make_torch(root: Path, version: str, remote_cache: str = None) -> Path:
    """A stand-in torch package under root/<version>/torch."""
    base = root / f"torch-{version}"
    inductor = base / "torch" / "_inductor"
    inductor.mkdir(parents=True)
    (base / "torch" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (inductor / "__init__.py").write_text("")
    if remote_cache is not None:
        (inductor / "remote_cache.py").write_text(remote_cache)
    return base


def run_python(code: str, path: list, env: dict = None, timeout=60) -> dict:
    """Runs `code` (which prints one JSON line last) with `path` first on
    PYTHONPATH; returns that JSON."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(PACKAGE_SRC)])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          env=full_env, timeout=timeout)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.fixture
def modern_torch(tmp_root):
    return make_torch(tmp_root, "2.9.0+standin", MODERN_REMOTE_CACHE % {"pgo": PGO_CLASS})


TORCH_KEY = bytes(range(32))
BACKEND = "b" * 64


def test_install_routes_every_remote_cache_through_the_daemon(modern_torch, daemon):
    client = pt2cache.Client(daemon.socket, strict=True)
    # Written by pt2cache beforehand, read through Inductor's classes.
    client.put("fx-graph", "fprewritten", b'{"data": "cHJl", "time_taken_ms": 3}')
    configs = [at.Config({"XBLOCK": 64}, 4, 2), at.Config({"XBLOCK": 128}, 4, 2)]
    configs_hash = at.hash_configs(configs)
    inner = at.prepare_key("/tmp/k/ab/cabkernel.py")
    cache_id = at.remote_cache_id(TORCH_KEY, BACKEND, configs_hash)
    best = at.best_config(configs[1], configs_hash, 9_000_000)
    code_hash = at.comment_stripped_hash("def kernel(): pass # run 1\n")
    bkey = at.bundle_key(code_hash, BACKEND)

    out = run_python(f'''
        import json, logging
        import pt2cache.torch as pt
        from torch._inductor import remote_cache as rc
        out = {{"installed": list(pt.install())}}
        out["routed"] = sorted(pt.installed())

        def make(cache_id, cls):
            return rc.create_cache(cache_id, False, "Fb" + cls, cls)

        fx = make("fx-graph-v1", "RemoteFxGraphCache")
        out["backend"] = type(fx.backend).__name__
        out["fx_miss"] = fx.get("fabc")
        fx.put("fabc", {{"data": "Zm9v", "time_taken_ms": 12}})
        out["fx_hit"] = fx.get("fabc")
        out["fx_prewritten"] = fx.get("fprewritten")
        make("autograd-experimental", "RemoteAOTAutogradCache").put(
            "a123", {{"data": "YW90", "time_taken_ms": 4}})
        make("dynamo-pgo", "RemoteDynamoPGOCache").put("job:0:", {{"data": "cGdv"}})
        autotune = make({cache_id!r}, "RemoteAutotuneCache")
        autotune.put({inner!r}, {best!r})
        out["autotune_hit"] = autotune.get({inner!r})
        bundled = make("bundled-autotune-v1", "RemoteBundledAutotuneCache")
        out["bundle_miss"] = bundled.get({bkey!r})
        bundled.put({bkey!r}, {{"0" * 64 + ".best_config": {best!r}}})
        out["redis_backends_built"] = rc.REDIS_BACKENDS_BUILT
        out["local_autotune_untouched"] = rc.LocalAutotuneCache.backend_override_cls is None
        out["base_untouched"] = rc.RemoteCache.backend_override_cls is None
        out["stats"] = rc.STATS
        pt.uninstall()
        out["after_uninstall"] = rc.RemoteFxGraphCache.backend_override_cls is None
        out["routed_after_uninstall"] = list(pt.installed())
        print(json.dumps(out))
    ''', [modern_torch], env={"PT2CACHE_SOCKET": str(daemon.socket)})

    assert out["installed"] == ["RemoteFxGraphCache", "RemoteAOTAutogradCache",
                                "RemoteAutotuneCache", "RemoteBundledAutotuneCache",
                                "RemoteDynamoPGOCache"]
    assert out["routed"] == sorted(out["installed"])
    assert out["backend"] == "Pt2CacheBackend"
    assert out["fx_miss"] is None
    assert out["fx_hit"] == {"data": "Zm9v", "time_taken_ms": 12}
    assert out["fx_prewritten"] == {"data": "cHJl", "time_taken_ms": 3}
    assert out["autotune_hit"] == best
    assert out["bundle_miss"] is None
    assert out["redis_backends_built"] == 0, "the Redis backend must not even be built"
    assert out["local_autotune_untouched"] and out["base_untouched"]
    assert out["stats"]["backend:Pt2CacheBackend"] == {"miss": 2, "hit": 3, "put": 5}
    assert out["after_uninstall"] and out["routed_after_uninstall"] == []

    # Where the entries landed: the namespaces of proto/inductor_keys.hpp, the
    # values the JSON bytes Inductor's serde made.
    assert client.get("fx-graph", "fabc") == b'{"data": "Zm9v", "time_taken_ms": 12}'
    assert client.get("aot-autograd", "a123") == b'{"data": "YW90", "time_taken_ms": 4}'
    assert client.get("pgo", "job:0:") == b'{"data": "cGdv"}'
    assert client.get("autotune", f"{cache_id}::{inner}") == at.encode_best_config(best)
    bundle = client.get("autotune-bundle", bkey)
    assert json.loads(bundle) == {"0" * 64 + ".best_config": best}
    # The typed API reads what Inductor's RemoteAutotuneCache wrote.
    keys = at.AutotuneKeys(configs_hash, None, f"{cache_id}::{inner}")
    assert client.read_best_config(keys, configs) is configs[1]


def test_installed_backend_with_an_explicit_client_and_ttl(modern_torch, daemon):
    out = run_python(f'''
        import json, time
        import pt2cache, pt2cache.torch as pt
        from torch._inductor import remote_cache as rc
        pt.install(pt2cache.Client({str(daemon.socket)!r}, strict=True),
                   classes=["RemoteFxGraphCache"])
        out = {{"routed": list(pt.installed())}}
        fx = rc.create_cache("fx-graph-v1", False, "X", "RemoteFxGraphCache")
        fx.put("fshort", {{"data": "x"}})
        out["now"] = fx.get("fshort")
        time.sleep(1.3)
        out["later"] = fx.get("fshort")
        out["pgo_not_routed"] = rc.RemoteDynamoPGOCache.backend_override_cls is None
        print(json.dumps(out))
    ''', [modern_torch], env={"TORCHINDUCTOR_REDIS_EXPIRE": "1"})
    assert out == {"routed": ["RemoteFxGraphCache"], "now": {"data": "x"}, "later": None,
                   "pgo_not_routed": True}


def test_installed_backend_without_a_daemon_is_a_quiet_miss(modern_torch, tmp_root):
    out = run_python('''
        import json, time
        import pt2cache.torch as pt
        from torch._inductor import remote_cache as rc
        pt.install()
        fx = rc.create_cache("fx-graph-v1", False, "X", "RemoteFxGraphCache")
        start = time.perf_counter()
        results = []
        for i in range(100):
            fx.put(f"f{i}", {"data": "x"})
            results.append(fx.get(f"f{i}"))
        out = {"results": sorted(set(map(str, results))),
               "seconds": time.perf_counter() - start}
        print(json.dumps(out))
    ''', [modern_torch], env={"PT2CACHE_SOCKET": str(tmp_root / "absent.sock")})
    assert out["results"] == ["None"]
    assert out["seconds"] < 0.5


def test_torch_without_the_pgo_class_routes_the_others(tmp_root, daemon):
    base = make_torch(tmp_root, "2.5.1", MODERN_REMOTE_CACHE % {"pgo": ""})
    out = run_python('''
        import json, logging
        logging.basicConfig(level=logging.INFO)
        import pt2cache.torch as pt
        print(json.dumps({"installed": list(pt.install())}))
    ''', [base], env={"PT2CACHE_SOCKET": str(daemon.socket)})
    assert out["installed"] == ["RemoteFxGraphCache", "RemoteAOTAutogradCache",
                                "RemoteAutotuneCache", "RemoteBundledAutotuneCache"]


REFUSAL = '''
    import json
    import pt2cache.torch as pt
    try:
        pt.install()
        print(json.dumps({"raised": None}))
    except RuntimeError as e:
        print(json.dumps({"raised": str(e)}))
'''


def test_old_torch_without_the_hook_is_refused_clearly(tmp_root):
    base = make_torch(tmp_root, "2.4.1", OLD_REMOTE_CACHE)
    message = run_python(REFUSAL, [base])["raised"]
    assert message is not None
    assert "torch 2.4.1" in message
    assert "RemoteCache.backend_override_cls" in message


def test_torch_without_remote_cache_module_is_refused_clearly(tmp_root):
    base = make_torch(tmp_root, "2.1.0", None)
    message = run_python(REFUSAL, [base])["raised"]
    assert "torch 2.1.0" in message and "torch._inductor.remote_cache" in message
    assert "backend_override_cls" in message


def test_torch_with_none_of_the_classes_is_refused(tmp_root):
    base = make_torch(tmp_root, "2.9.0", MODERN_REMOTE_CACHE % {"pgo": ""})
    code = REFUSAL.replace("pt.install()", "pt.install(classes=['NoSuchCache'])")
    message = run_python(code, [base])["raised"]
    assert "torch 2.9.0" in message and "NoSuchCache" in message


def test_missing_torch_is_refused_clearly():
    code = "import sys\nsys.modules['torch'] = None\n" + textwrap.dedent(REFUSAL)
    message = run_python(code, [])["raised"]
    assert message.startswith("pt2cache.torch.install(): torch is not installed")


def test_importing_pt2cache_does_not_import_torch():
    out = run_python('''
        import json, sys
        sys.modules["torch"] = None  # any import of torch would now fail
        import pt2cache, pt2cache.torch, pt2cache.autotune, pt2cache.keys
        print(json.dumps({"ok": True}))
    ''', [])
    assert out == {"ok": True}


def test_redis_expire_env_parsing(monkeypatch):
    from pt2cache.torch import _ttl_from_env

    for text, ttl in [(None, None), ("", None), ("60", 60), ("0", None), ("-5", None),
                      ("soon", None)]:
        if text is None:
            monkeypatch.delenv("TORCHINDUCTOR_REDIS_EXPIRE", raising=False)
        else:
            monkeypatch.setenv("TORCHINDUCTOR_REDIS_EXPIRE", text)
        assert _ttl_from_env() == ttl, text


def test_standin_matches_the_hook_contract(modern_torch):
    """Guards the stand-in itself: an override class set on a subclass is
    constructed with no arguments and replaces the Redis backend."""
    out = run_python('''
        import json
        from torch._inductor import remote_cache as rc
        class Probe(rc.RemoteCacheBackend):
            def _get(self, key): return b'"v"'
            def _put(self, key, data): pass
        rc.RemoteFxGraphCache.backend_override_cls = Probe
        c = rc.create_cache("fx-graph-v1", False, "X", "RemoteFxGraphCache")
        print(json.dumps({"backend": type(c.backend).__name__, "get": c.get("k"),
                          "redis": rc.REDIS_BACKENDS_BUILT}))
    ''', [modern_torch])
    assert out == {"backend": "Probe", "get": "v", "redis": 0}
