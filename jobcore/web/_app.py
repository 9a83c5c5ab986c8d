"""The dashboard's ASGI application: routes, rendering, and the write paths.

Every page is rendered on the server from Jinja2 templates with autoescaping on, so a
payload, error message, job name or queue is always text, never markup. Pages set a
Content-Security-Policy that allows only the app's own script and style files, so even
a markup slip would not run a script. Store calls run in Starlette's thread pool (the
driver protocol is synchronous).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode

import attrs
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from jobcore.cli._output import STATE_COLOURS, age, clip, when
from jobcore.cli._verbs import STATE_ORDER, VERBS, bulk_call, describe_filter, run_one, stats_data
from jobcore.clock import to_millis
from jobcore.driver import JobDriver
from jobcore.errors import (
    BackendError,
    ConfigurationError,
    InvalidInput,
    JobcoreError,
    JobNotFound,
    JobStateConflict,
    OptionInvalid,
    ScheduleNotFound,
    redact,
)
from jobcore.records import Job, JobFilter, JobState
from jobcore.scheduler import describe as describe_schedule
from jobcore.vocabulary import GUARDS, MAX_BULK_ROWS, MAX_PAGE, not_found
from jobcore.web._data import (
    CHART_MINUTES,
    FILTER_FIELDS,
    check_bulk_filter,
    count_matching,
    filter_from_query,
    throughput,
)
from jobcore.web._security import AUTH_COOKIE, CSRF_COOKIE, Auth, Guard
from jobcore.web._snapshots import Snapshots

__all__ = ["create_app"]

BULK_VERBS = ("cancel", "requeue", "remove", "promote")
PAGE_SIZE = 50
REFRESH_SECONDS = 10
SLOT_ROWS = MAX_PAGE
_HERE = resources.files("jobcore.web")
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _status_of(exc: JobcoreError) -> int:
    if isinstance(exc, JobNotFound | ScheduleNotFound):
        return 404
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, JobStateConflict):
        return 409
    if isinstance(exc, BackendError):
        return 503
    return 500 if isinstance(exc, ConfigurationError) else 400


def _percent(value: float | None) -> str:
    """A stored progress fraction as a whole percent (``40%``); empty without one."""
    return "" if value is None else f"{value:.0%}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _states_css() -> str:
    rules = [":root {"]
    rules += [f"  --state-{state}: {colour};" for state, colour in STATE_COLOURS.items()]
    rules.append("}")
    rules += [
        f".state-{state} {{ background: var(--state-{state}); }}\n.fill-{state} {{ fill: var(--state-{state}); }}\n"
        f".c-{state} {{ color: var(--state-{state}); }}"
        for state in STATE_COLOURS
    ]
    return "\n".join(rules) + "\n"


def _bar_chart(values: tuple[int, ...], state: str, title: str, start: datetime) -> Markup:
    """An inline SVG bar chart: one bar a minute. Only numbers and fixed words go in."""
    width, height, pad, top = 600, 120, 18, 18
    peak = max(max(values, default=0), 1)
    bar = width / len(values)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height + pad}" role="img" aria-label="{title}">',
        f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" class="axis"/>',
    ]
    for i, count in enumerate(values):
        if count:
            h = max(1.0, (height - top) * count / peak)
            minute = (start + timedelta(minutes=i)).strftime("%H:%M")
            parts.append(
                f'<rect x="{i * bar + 1:.1f}" y="{height - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                f'class="fill-{state}"><title>{minute}Z: {count}</title></rect>'
            )
    parts.append(f'<text x="0" y="{height + 14}" class="tick">{start.strftime("%H:%M")}Z</text>')
    parts.append(f'<text x="{width}" y="{height + 14}" class="tick" text-anchor="end">now</text>')
    parts.append(f'<text x="{width}" y="12" class="tick" text-anchor="end">peak {peak}/min</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - built from numbers and fixed words only


@attrs.define
class _Dashboard:
    driver: JobDriver
    guard: Guard
    read_only: bool
    title: str
    chart_ttl: float
    stats_ttl: float
    env: Environment = attrs.field(init=False)
    snapshots: Snapshots = attrs.field(init=False)
    static: dict[str, tuple[bytes, str]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(str(_HERE / "templates")),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=when, clip=clip, age=age, pretty=_pretty, percent=_percent)
        self.static = {
            name: ((_HERE / "static" / name).read_bytes(), _STATIC_TYPES[name[name.rfind("."):]])
            for name in ("dashboard.css", "dashboard.js")
        }
        self.static["states.css"] = (_states_css().encode(), _STATIC_TYPES[".css"])
        self.snapshots = Snapshots(self.driver.clock.now)

    # -- plumbing -----------------------------------------------------------------------

    def endpoint(
        self, view: Callable[[Request, dict[str, str]], Response], *, write: bool = False, public: bool = False,
    ) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            form: dict[str, str] = {}
            if request.method == "POST":
                body = (await request.body()).decode("utf-8", "replace")
                form = dict(parse_qsl(body, keep_blank_values=True))
            return await run_in_threadpool(self._run, view, request, form, write, public)

        return handle

    def _run(
        self, view: Callable[[Request, dict[str, str]], Response], request: Request, form: dict[str, str],
        write: bool, public: bool,
    ) -> Response:
        if not public and not self.guard.allows(request):
            if self.guard.challenge is not None:
                return self._plain("authentication required", 401, {"WWW-Authenticate": self.guard.challenge})
            if self.guard.uses_login and request.method == "GET":
                return RedirectResponse(self.url(request, "/login", next=request.url.path), 303)
            return self._plain("not allowed: this dashboard serves loopback clients only" if self.guard.auth is None
                               else "not allowed", 403)
        if write:
            if self.read_only:
                return self.error(request, OptionInvalid(
                    "this dashboard is read-only", "use the jobcore CLI, or a dashboard started without --read-only",
                ), 403)
            if not self.guard.csrf_ok(request, form):
                return self.error(request, OptionInvalid(
                    "the form's CSRF token is missing or stale (or it came from another site)",
                    "reload the page and submit the form again",
                ), 403)
        try:
            response = view(request, form)
        except JobcoreError as exc:
            response = self.error(request, exc, _status_of(exc))
        return self._finish(request, response)

    def _finish(self, request: Request, response: Response) -> Response:
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if CSRF_COOKIE not in request.cookies:
            response.set_cookie(
                CSRF_COOKIE, self._browser_id(request), httponly=True, samesite="strict",
                path=self.base(request) or "/",
            )
        return response

    def _browser_id(self, request: Request) -> str:
        existing = request.cookies.get(CSRF_COOKIE)
        if existing:
            return existing
        if not hasattr(request.state, "browser_id"):
            request.state.browser_id = self.guard.new_browser_id()
        return str(request.state.browser_id)

    @staticmethod
    def _plain(text: str, status: int, headers: dict[str, str] | None = None) -> Response:
        response = Response(text + "\n", status, headers=headers, media_type="text/plain")
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @staticmethod
    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def url(self, request: Request, path: str, **query: Any) -> str:
        """``path`` under this app's mount point, with the non-empty ``query`` parameters."""
        kept = {k: v for k, v in query.items() if v not in (None, "")}
        return self.base(request) + path + ("?" + urlencode(kept) if kept else "")

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        def url(path: str, **query: Any) -> str:
            return self.url(request, path, **query)

        page = self.env.get_template(template).render(
            url=url, title=self.title, read_only=self.read_only, states=[s.value for s in STATE_ORDER],
            csrf=self.guard.csrf_token(self._browser_id(request)), path=request.url.path[len(self.base(request)):],
            login=self.guard.uses_login, **context,
        )
        return HTMLResponse(page, status)

    def error(self, request: Request, exc: JobcoreError, status: int) -> Response:
        return self._finish(request, self.render(
            request, "error.html", status, code=exc.code, cause=redact(exc.cause), fix=redact(exc.fix),
        ))

    # -- pages --------------------------------------------------------------------------

    def overview(self, request: Request, _form: dict[str, str]) -> Response:
        intro = self.driver.introspect
        # Both reads are snapshots kept fresh by a background thread while pages are served
        # (every stats_ttl / chart_ttl seconds), so a render never waits for a count of
        # every row: it shows the latest answer and its age.
        counts = self.snapshots.get("stats", self.stats_ttl, intro.stats)
        charts = self.snapshots.get("chart", self.chart_ttl, lambda: throughput(intro, self.driver.clock.now()))
        data, chart, chart_time = stats_data(counts.value), charts.value, charts.at
        return self.render(
            request, "overview.html", data=data, now=counts.at, counts_age=int(counts.age()),
            refresh=REFRESH_SECONDS, chart=chart, chart_time=chart_time,
            done_chart=_bar_chart(chart.done, "done", "completed per minute", chart.start),
            failed_chart=_bar_chart(chart.failed, "failed", "failed per minute", chart.start),
            done_total=sum(chart.done), failed_total=sum(chart.failed), minutes=CHART_MINUTES,
            due_age=lambda s: "-" if s is None else age(timedelta(seconds=s)),
        )

    def jobs(self, request: Request, _form: dict[str, str]) -> Response:
        query = request.query_params
        given = {k: query.get(k, "") for k in FILTER_FIELDS}
        flt = filter_from_query(query)
        after, before = query.get("after") or None, query.get("before") or None
        size = PAGE_SIZE
        if query.get("limit"):
            try:
                size = int(query["limit"])
            except ValueError:
                raise OptionInvalid(f"limit {query['limit']!r:.20} is not a number", f"use 1..{MAX_PAGE}") from None
        page = self.driver.introspect.list(flt, size, after=after, before=before)
        return self.render(
            request, "jobs.html", jobs=page.jobs, after=page.after, before=page.before, given=given,
            filtered=flt is not None, bulk_verbs=BULK_VERBS, limit=size if size != PAGE_SIZE else "",
        )

    def job(self, request: Request, _form: dict[str, str]) -> Response:
        job_id = request.path_params["job_id"]
        job = self.driver.introspect.get(job_id)
        if job is None:
            raise not_found(job_id)
        now = self.driver.clock.now()
        verbs = [verb for verb in VERBS if GUARDS[verb].allows(job.state)]
        did = request.query_params.get("did")
        done = f"{GUARDS[did].past}: the job is now {job.state.value}" if did in GUARDS else None
        lease_left = None if job.lease_expires_at is None else job.lease_expires_at - now
        return self.render(
            request, "job.html", job=job, verbs=verbs, done=done, lease_left=lease_left,
            lapsed=lease_left is not None and lease_left <= timedelta(0), zero=timedelta(0),
            progress_age=None if job.progress is None else now - job.progress.updated_at,
            parents=self.driver.introspect.parents(job.id), children=self.driver.introspect.children(job.id),
        )

    def job_verb(self, request: Request, form: dict[str, str]) -> Response:
        job_id, verb = request.path_params["job_id"], request.path_params["verb"]
        if verb not in VERBS:
            raise OptionInvalid(f"{verb!r:.20} is not an operator verb", f"use one of: {', '.join(VERBS)}")
        reason = form.get("reason", "").strip() or None
        job = run_one(verb, self.driver.introspect, job_id, reason=reason)
        if verb == "remove":
            return self.render(request, "removed.html", job=job)
        return RedirectResponse(self.url(request, f"/jobs/{job.id}", did=verb), 303)

    def _bulk_form(self, source: Any) -> tuple[str, JobFilter]:
        verb = str(source.get("verb", ""))
        if verb not in BULK_VERBS:
            raise OptionInvalid(f"{verb!r:.20} has no bulk form", f"use one of: {', '.join(BULK_VERBS)}")
        return verb, check_bulk_filter(filter_from_query(source), verb)

    def bulk_confirm(self, request: Request, _form: dict[str, str]) -> Response:
        if self.read_only:
            raise OptionInvalid("this dashboard is read-only", "use the jobcore CLI for bulk changes")
        verb, flt = self._bulk_form(request.query_params)
        intro = self.driver.introspect
        count, exact = count_matching(intro, intro.stats(), flt, verb)
        given = {k: request.query_params.get(k, "") for k in FILTER_FIELDS}
        return self.render(
            request, "confirm.html", verb=verb, guard=GUARDS[verb], described=describe_filter(flt), count=count,
            exact=exact, given=given, per_call=MAX_BULK_ROWS,
        )

    def bulk_run(self, request: Request, form: dict[str, str]) -> Response:
        verb, flt = self._bulk_form(form)
        reason = form.get("reason", "").strip() or None
        result = bulk_call(verb, self.driver.introspect, flt, MAX_BULK_ROWS, reason=reason)
        given = {k: form.get(k, "") for k in FILTER_FIELDS}
        return self.render(
            request, "bulk_done.html", verb=verb, guard=GUARDS[verb], described=describe_filter(flt),
            result=result, given=given, reason=reason or "",
        )

    def dead(self, request: Request, _form: dict[str, str]) -> Response:
        queue = request.query_params.get("queue") or None
        jobs = self.driver.introspect.dead_letters(queue, MAX_PAGE)
        return self.render(request, "dead.html", jobs=jobs, queue=queue or "", limit=MAX_PAGE)

    def schedules(self, request: Request, _form: dict[str, str]) -> Response:
        now = to_millis(self.driver.clock.now())
        rows = [describe_schedule(s, now) for s in self.driver.schedules.list()]
        did = request.query_params.get("did")
        return self.render(
            request, "schedules.html", rows=rows, did=did if did in ("paused", "resumed") else None,
            name=request.query_params.get("name", ""),
        )

    def schedule_verb(self, request: Request, form: dict[str, str]) -> Response:
        action, name = request.path_params["action"], form.get("name", "")
        if action not in ("pause", "resume"):
            raise OptionInvalid(f"{action!r:.20} is not a schedule action", "use pause or resume")
        answer = getattr(self.driver.schedules, action)(name)
        if answer is None:
            raise ScheduleNotFound(f"no schedule named {name!r:.80}")
        return RedirectResponse(self.url(request, "/schedules", did=action + "d", name=name), 303)

    def slots(self, request: Request, _form: dict[str, str]) -> Response:
        # One page: the most recently enqueued running jobs (a fleet running more is
        # browsed on /jobs?state=running, which pages).
        page = self.driver.introspect.list(JobFilter(state={JobState.RUNNING}), SLOT_ROWS)
        running = list(page.jobs)
        holders: dict[str, list[Job]] = {}
        for job in running:
            holders.setdefault(job.worker_id or "-", []).append(job)
        now = self.driver.clock.now()
        fleet = self.driver.leases.holders(limit=SLOT_ROWS)
        return self.render(
            request, "slots.html", holders=sorted(holders.items()), count=len(running),
            capped=page.after is not None, now=now, zero=timedelta(0),
            fleet=[(s, age(max(s.expires_at - now, timedelta(0)))) for s in fleet],
            fleet_capped=len(fleet) >= SLOT_ROWS,
        )

    def rescue(self, request: Request, _form: dict[str, str]) -> Response:
        result = self.driver.introspect.rescue()
        return self.render(request, "rescued.html", result=result)

    def login(self, request: Request, form: dict[str, str]) -> Response:
        target = request.query_params.get("next") or form.get("next") or "/"
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # never an open redirect
        base = self.base(request)
        if target.startswith(base):
            target = target[len(base):] or "/"
        if not self.guard.uses_login:
            return RedirectResponse(self.url(request, target), 303)
        if request.method == "POST":
            if not self.guard.csrf_ok(request, form):
                return self.render(request, "login.html", 403, next=target, wrong=False, stale=True)
            cookie = self.guard.login_cookie(form.get("token", ""))
            if cookie is None:
                return self.render(request, "login.html", 401, next=target, wrong=True, stale=False)
            response = RedirectResponse(self.url(request, target), 303)
            response.set_cookie(AUTH_COOKIE, cookie, httponly=True, samesite="strict", path=base or "/")
            return response
        return self.render(request, "login.html", next=target, wrong=False, stale=False)

    def logout(self, request: Request, form: dict[str, str]) -> Response:
        # Not a store write (allowed in read-only mode), but still a POST with the CSRF token.
        if not self.guard.csrf_ok(request, form):
            raise OptionInvalid("the sign-out form's CSRF token is missing or stale", "reload the page and try again")
        response = RedirectResponse(self.url(request, "/login"), 303)
        response.delete_cookie(AUTH_COOKIE, path=self.base(request) or "/")
        return response

    def static_file(self, request: Request, _form: dict[str, str]) -> Response:
        found = self.static.get(request.path_params["name"])
        if found is None:
            return self._plain("not found", 404)
        body, media = found
        return Response(body, media_type=media, headers={"Cache-Control": "max-age=300"})

    def routes(self) -> list[BaseRoute]:
        e = self.endpoint
        return [
            Route("/", e(self.overview), name="overview"),
            Route("/jobs", e(self.jobs), name="jobs"),
            Route("/jobs/{job_id}", e(self.job), name="job"),
            Route("/jobs/{job_id}/{verb}", e(self.job_verb, write=True), methods=["POST"]),
            Route("/bulk", e(self.bulk_confirm), name="bulk"),
            Route("/bulk", e(self.bulk_run, write=True), methods=["POST"]),
            Route("/dead", e(self.dead), name="dead"),
            Route("/schedules", e(self.schedules), name="schedules"),
            Route("/schedules/{action}", e(self.schedule_verb, write=True), methods=["POST"]),
            Route("/slots", e(self.slots), name="slots"),
            Route("/rescue", e(self.rescue, write=True), methods=["POST"]),
            Route("/login", e(self.login, public=True), methods=["GET", "POST"]),
            Route("/logout", e(self.logout), methods=["POST"]),
            Route("/static/{name}", e(self.static_file, public=True)),
        ]


def create_app(
    driver: JobDriver,
    *,
    auth: Auth,
    read_only: bool = False,
    prefix: str = "",
    title: str = "jobcore",
    secret: bytes | None = None,
    chart_ttl: float = 30.0,
    stats_ttl: float = 5.0,
) -> Starlette:
    """The dashboard as an ASGI application over ``driver`` (left open: its owner closes it).

    ``auth`` must be given: a token string, a ``(user, password)`` pair for basic auth,
    a callable ``(request) -> bool`` from the host application, or ``None`` to serve
    loopback clients only (see :mod:`jobcore.web._security`). ``read_only=True`` hides
    every write and refuses every POST. ``prefix`` serves the pages under a path
    (``/ops/jobs``); an app mounted by a host (``Mount("/ops", app)``) needs none, since
    links follow the mount point. ``secret`` signs the CSRF and login cookies (random per
    process when not given; give one shared by every replica behind a load balancer).
    ``chart_ttl`` and ``stats_ttl``: the overview's charts and counts are read from the store by
    one background thread per app every this many seconds while pages are being served (the
    counts read every row), however many pages are open; a page shows the latest answer and
    its age and never waits for a read, except the app's very first. 0 reads in each request.
    """
    if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
        raise OptionInvalid(f"prefix {prefix!r:.60} must start with / and not end with /", "e.g. prefix='/ops'")
    dashboard = _Dashboard(driver, Guard(auth, secret), read_only, title, chart_ttl, stats_ttl)
    routes = dashboard.routes()
    app = Starlette(routes=[Mount(prefix, routes=routes)] if prefix else routes)
    app.state.dashboard = dashboard
    return app
