"""jobcore's web dashboard for operators: an ASGI application over the public driver protocol.

Install with ``pip install 'jobcore-queue[web]'``; run with ``jobcore web --url ...``, or
mount :func:`create_app` into a Starlette or FastAPI application. See docs/dashboard.md.
"""

from __future__ import annotations

from jobcore.web._app import create_app
from jobcore.web._security import Auth, check_exposure, is_loopback

__all__ = ["Auth", "check_exposure", "create_app", "is_loopback"]
