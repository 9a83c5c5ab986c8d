"""Who may see the dashboard and who may change anything: authentication and CSRF.

``auth`` is one of:

* a string: a shared token. A browser signs in once on ``/login`` (the token is kept
  in an HttpOnly, SameSite=Strict cookie as an HMAC, never as itself); a script sends
  ``Authorization: Bearer TOKEN``.
* a ``(user, password)`` pair: HTTP basic authentication.
* a callable taking the Starlette ``Request`` and answering ``True`` to let it in: the
  host application's own login (a session cookie, a proxy header...).
* ``None``: no authentication, and then only loopback clients are served. ``jobcore
  web`` refuses to bind anything but loopback without one (``JC_WEB_UNPROTECTED``).

Every write is a POST carrying a CSRF token: an HMAC of a random per-browser cookie
under the app's secret, checked in constant time, plus a same-origin check of the
``Origin`` header when the browser sends one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable
from typing import Union
from urllib.parse import urlsplit

from starlette.requests import Request

from jobcore.errors import WebUnprotected

__all__ = [
    "AUTH_COOKIE",
    "CSRF_COOKIE",
    "Auth",
    "Guard",
    "check_exposure",
    "is_loopback",
]

Auth = Union[str, tuple[str, str], Callable[[Request], bool], None]  # noqa: UP007 - a runtime alias on 3.10
AUTH_COOKIE = "jobcore_auth"
CSRF_COOKIE = "jobcore_csrf"


def is_loopback(host: str | None) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (a name other than localhost is not trusted)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, auth: Auth) -> None:
    """Refuse to serve on a non-loopback address without authentication (``JC_WEB_UNPROTECTED``)."""
    if auth is None and not is_loopback(host):
        raise WebUnprotected(
            f"the dashboard would listen on {host!r:.60} with no authentication: anyone who can reach that "
            "address could cancel or delete jobs",
            "set a token (--token or $JOBCORE_WEB_TOKEN), basic auth (--basic-auth USER:PASSWORD or "
            "$JOBCORE_WEB_BASIC_AUTH), or bind to 127.0.0.1; add --read-only to hide every write",
        )


class Guard:
    """Checks one app's requests: authentication and CSRF, under one random secret."""

    def __init__(self, auth: Auth, secret: bytes | None = None) -> None:
        if auth is not None and not (isinstance(auth, str | tuple) or callable(auth)):
            raise TypeError("auth must be a token, a (user, password) pair, a callable or None")
        if isinstance(auth, str) and not auth:
            raise ValueError("an empty token would let anyone in")
        if isinstance(auth, tuple) and (len(auth) != 2 or not all(isinstance(p, str) and p for p in auth)):
            raise ValueError("basic auth is a (user, password) pair of non-empty strings")
        self.auth = auth
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _mac(self, label: str, value: str) -> str:
        return hmac.new(self._secret, f"{label}:{value}".encode(), hashlib.sha256).hexdigest()

    @property
    def uses_login(self) -> bool:
        """A token app signs browsers in on ``/login``."""
        return isinstance(self.auth, str)

    @property
    def challenge(self) -> str | None:
        """The ``WWW-Authenticate`` header of a refused basic-auth request."""
        return 'Basic realm="jobcore", charset="UTF-8"' if isinstance(self.auth, tuple) else None

    def login_cookie(self, token: str) -> str | None:
        """The cookie value that signs a browser in, or ``None`` for a wrong token."""
        if not isinstance(self.auth, str) or not hmac.compare_digest(token.encode(), self.auth.encode()):
            return None
        return self._mac("login", self.auth)

    def allows(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard."""
        auth = self.auth
        if auth is None:
            return is_loopback(request.client.host if request.client else None)
        if isinstance(auth, str):
            header = request.headers.get("authorization", "")
            if header[:7].lower() == "bearer " and hmac.compare_digest(header[7:].strip().encode(), auth.encode()):
                return True
            cookie = request.cookies.get(AUTH_COOKIE, "")
            return hmac.compare_digest(cookie.encode(), self._mac("login", auth).encode())
        if isinstance(auth, tuple):
            header = request.headers.get("authorization", "")
            if header[:6].lower() != "basic ":
                return False
            try:
                user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            same_user = hmac.compare_digest(user.encode(), auth[0].encode())
            return hmac.compare_digest(password.encode(), auth[1].encode()) and same_user
        return bool(auth(request))

    # -- CSRF -------------------------------------------------------------------------

    @staticmethod
    def new_browser_id() -> str:
        return secrets.token_urlsafe(24)

    def csrf_token(self, browser_id: str) -> str:
        """The token every form of this browser carries."""
        return self._mac("csrf", browser_id)

    def csrf_ok(self, request: Request, form: dict[str, str]) -> bool:
        """A POST is genuine: same origin (when the browser says), and the form's token matches its cookie."""
        origin = request.headers.get("origin")
        if origin and origin != "null":
            host = request.headers.get("host", "")
            if urlsplit(origin).netloc != host:
                return False
        browser_id = request.cookies.get(CSRF_COOKIE, "")
        given = form.get("csrf", "")
        return bool(browser_id) and hmac.compare_digest(given.encode(), self.csrf_token(browser_id).encode())
