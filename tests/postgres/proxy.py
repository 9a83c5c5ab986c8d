"""URLs through the parity suite's TCP proxy (:class:`jobcore.parity._proxy.Proxy`) for PostgreSQL fault tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobcore.parity._proxy import Proxy

__all__ = ["Proxy", "proxy_to", "silent", "through"]


def proxy_to(url: str) -> Proxy:
    """A started proxy in front of the server of a ``postgresql://`` URL."""
    parts = urlsplit(url)
    return Proxy(parts.hostname or "127.0.0.1", parts.port or 5432).start()


def silent() -> Proxy:
    """A started proxy that accepts connections and never answers (frozen before any came)."""
    proxy = Proxy("127.0.0.1", 9).start()
    proxy.freeze()
    return proxy


def through(url: str, proxy: Proxy, **query: Any) -> str:
    """``url`` reaching the server through ``proxy``, with ``query`` options added."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
    options = [*parse_qsl(parts.query), *((k, str(val)) for k, val in query.items())]
    return urlunsplit(parts._replace(netloc=f"{auth}{proxy.host}:{proxy.port}", query=urlencode(options)))
