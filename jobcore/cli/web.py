"""``jobcore web``: serve the operator dashboard (docs/dashboard.md) until SIGINT/SIGTERM.

Refuses, before connecting to anything, to listen beyond loopback without
authentication (``JC_WEB_UNPROTECTED``): a token (``--token`` or, better, kept out of
the process list, ``$JOBCORE_WEB_TOKEN``) or basic auth (``--basic-auth USER:PASSWORD``
or ``$JOBCORE_WEB_BASIC_AUTH``). ``--read-only`` hides and refuses every write. Needs the
``web`` extra (Starlette, Jinja2, uvicorn).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from jobcore.cli._output import note
from jobcore.cli._store import add_url_option, open_store, store_url
from jobcore.errors import ConfigurationError, OptionInvalid, redact

__all__ = ["ENV_BASIC_AUTH", "ENV_TOKEN", "register"]

ENV_TOKEN = "JOBCORE_WEB_TOKEN"  # noqa: S105 - the variable's name, not a token
ENV_BASIC_AUTH = "JOBCORE_WEB_BASIC_AUTH"


def _auth(args: argparse.Namespace) -> str | tuple[str, str] | None:
    token = args.token or os.environ.get(ENV_TOKEN) or None
    basic = args.basic_auth or os.environ.get(ENV_BASIC_AUTH) or None
    if token and basic:
        raise OptionInvalid("both a token and basic auth were given", "choose one: --token or --basic-auth")
    if basic:
        user, sep, password = basic.partition(":")
        if not sep or not user or not password:
            raise OptionInvalid("--basic-auth must be USER:PASSWORD, both non-empty", "e.g. --basic-auth ops:s3cret")
        return user, password
    return token


def _cmd_web(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: PLC0415 - the web extra is optional

        from jobcore.web import check_exposure, create_app  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"the dashboard needs {exc.name}, which is not installed",
            "pip install 'jobcore-queue[web]'",
        ) from None
    if not 1 <= args.port <= 65535:
        raise OptionInvalid(f"--port {args.port} is not a port number", "pass a port from 1 to 65535")
    auth = _auth(args)
    check_exposure(args.host, auth)  # before connecting to anything
    with open_store(args) as driver:
        app = create_app(driver, auth=auth, read_only=args.read_only, prefix=args.prefix or "")
        mode = "read-only" if args.read_only else "read-write"
        who = "loopback only, no auth" if auth is None else ("token" if isinstance(auth, str) else "basic auth")
        note(f"jobcore dashboard ({mode}, {who}) on http://{args.host}:{args.port}{args.prefix or ''}/ "
             f"for {redact(store_url(args) or 'the given driver')}")
        config: dict[str, Any] = {"host": args.host, "port": args.port, "log_level": "warning"}
        uvicorn.run(app, **config)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``jobcore web``."""
    summary = "serve the operator dashboard in a browser"
    p = subparsers.add_parser("web", help=summary, description=summary)
    add_url_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--token", help=f"require this token (browsers sign in once; default ${ENV_TOKEN})")
    p.add_argument("--basic-auth", metavar="USER:PASSWORD", help=f"require HTTP basic auth (default ${ENV_BASIC_AUTH})")
    p.add_argument("--read-only", action="store_true", help="hide and refuse every write (cancel, requeue, ...)")
    p.add_argument("--prefix", default="", help="serve under this path, e.g. /ops (behind a proxy)")
    p.set_defaults(func=_cmd_web)
