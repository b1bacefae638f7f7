"""pt2cache: the Python client of pt2cached, the per-user PyTorch compile-cache
daemon (pure standard library).

- :class:`Client`: the native protocol (get / put / exists / delete / stats /
  list / clear / ping / bundles and typed autotune best-configs); a default
  client never raises, failures are misses.
- :mod:`pt2cache.autotune`: Inductor's best-config keys, JSON and selection
  rules, byte for byte.
- :mod:`pt2cache.torch`: ``install()`` routes Inductor's remote caches through
  the daemon.
- :mod:`pt2cache.triton`: ``Backend``, a Triton remote-cache backend
  (``TRITON_REMOTE_CACHE_BACKEND=pt2cache.triton:Backend``).
- :mod:`pt2cache.keys`: the Redis key <-> namespace mapping.
"""

from .autotune import AutotuneKeys, Config
from .client import (BundleBegin, Client, ListEntry, ListPage, ServerInfo, default_client,
                     default_socket_path)
from .errors import (CacheTimeoutError, ProtocolError, Pt2CacheError, ServerError,
                     UnknownTokenError, UnreachableError, UnsupportedError)

__version__ = "0.1.0"

__all__ = [
    "AutotuneKeys",
    "BundleBegin",
    "CacheTimeoutError",
    "Client",
    "Config",
    "ListEntry",
    "ListPage",
    "ProtocolError",
    "Pt2CacheError",
    "ServerError",
    "ServerInfo",
    "UnknownTokenError",
    "UnreachableError",
    "UnsupportedError",
    "default_client",
    "default_socket_path",
    "__version__",
]
