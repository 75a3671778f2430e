"""Every route and runner-protocol method, called with a token of every role, against the written
role matrix of docs/http.md (the role column of "Routes", the roles' "includes" and the runner
protocol's method table). The expectations come from the page, not from the code: a route or
method the app has and the page has no row for fails, and so does a role allowed more, or less,
than its row says. Run on `archetype serve`'s app (the shared app with its /docs, dashboard and
/metrics) and on the Worker's (the same app over Durable Objects on the stand-in)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.routing import Mount, Route

from archetype.api.runner_protocol import LEDGER_ROUTE_ROLES, WORLD_SCOPED
from archetype.metrics import Metrics
from archetype.server import serve_app
from archetype.settings import ServeSettings
from tests.api.conftest import edge_app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "http.md"
PLACEHOLDERS = {"world_id": "no-such-world", "command_id": "c1", "method": "{method}"}
FILES = {"/docs/assets/{path}": "swagger-ui.css", "/dashboard/{path}": "index.html"}  # a file each mount serves


def _section(title: str) -> list[list[str]]:
    """The cells of each table row of one section of the page, up to its next heading."""
    text = PAGE.read_text()
    start = text.index(f"\n{title}\n") + len(title) + 2
    end = re.search(r"\n#+ ", text[start:])
    body = text[start : start + end.start()] if end else text[start:]
    rows = [line for line in body.splitlines() if line.startswith("|") and not set(line) <= set("|- ")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip("|"))] for row in rows]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def role_includes() -> dict[str, set[str]]:
    """Role -> every role it grants (itself, and what it includes, transitively), from the page."""
    direct = {}
    for cells in _section("## Tokens and roles")[1:]:
        (role,) = _names(cells[0])
        direct[role] = set(_names(cells[1]))

    def granted(role: str) -> set[str]:
        return {role}.union(*(granted(included) for included in direct[role]))

    return {role: granted(role) for role in direct}


def route_roles() -> dict[tuple[str, str], str]:
    """(method, path template) -> its least role ('none': public; 'per method': the runner protocol)."""
    roles = {}
    for cells in _section("## Routes")[1:]:
        spelled = _names(cells[0])[0]  # "GET /worlds/{world_id}/state?after=&limit="
        method, path = spelled.split(" ", 1)
        roles[method, path.split("?", 1)[0]] = cells[1]
    return roles


def method_roles() -> dict[str, str]:
    """Runner-protocol method -> its least role, from the page."""
    roles = {}
    for cells in _section("## The runner protocol")[1:]:
        if cells[0] != "method":
            roles.update(dict.fromkeys(_names(cells[0]), cells[1]))
    return roles


INCLUDES = role_includes()
ROUTES = route_roles()
METHODS = method_roles()
TOKENS = {f"t-{role}": {"principal": f"p-{role}", "roles": [role]} for role in INCLUDES} | {
    "t-no-role": {"principal": "p-no-role", "roles": []}
}


def app_routes(app) -> set[tuple[str, str]]:
    """(method, path template) of every route the app answers, mounts included."""
    found = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found.add(("GET", f"{route.path}/{{path}}"))
        elif isinstance(route, Route):
            found.update((method, route.path) for method in route.methods or () if method != "HEAD")
    return found


def serve_like(authority):
    config = ServeSettings()
    return serve_app(config, authority, TOKENS, Metrics(0), audit=None)  # type: ignore[arg-type]


@pytest.fixture(params=["serve", "worker"])
async def edge(request, tmp_path, clock):
    async with edge_app(request.param, tmp_path, clock, serve_like, TOKENS) as (_, app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
            yield request.param, app_routes(app), client


def test_the_page_has_a_row_for_every_route_and_method():
    served = app_routes(serve_like(None))
    assert served - set(ROUTES) == set(), "routes without a row in docs/http.md"
    assert set(ROUTES) - served == set(), "rows of docs/http.md naming no route"
    assert set(LEDGER_ROUTE_ROLES) - set(METHODS) == set(), "runner-protocol methods without a row in docs/http.md"
    assert set(METHODS) - set(LEDGER_ROUTE_ROLES) == set(), "rows of docs/http.md naming no runner-protocol method"
    assert set(METHODS.values()) <= set(INCLUDES) and set(ROUTES.values()) <= {*INCLUDES, "none", "per method"}


def calls() -> list[tuple[str, str, str]]:
    """(method, url, least role) for every route, each runner-protocol method one call of its own."""
    found = []
    for (method, path), role in sorted(ROUTES.items()):
        url = path.replace("{path}", FILES[path]) if path in FILES else path.format(**PLACEHOLDERS)
        if role != "per method":
            found.append((method, url, role))
            continue
        scoped = "{world_id}" in path
        found += [(method, url.format(method=m), METHODS[m]) for m in sorted(METHODS) if (m in WORLD_SCOPED) == scoped]
    return found


@pytest.mark.parametrize("method,url,role", calls(), ids=lambda value: str(value))
async def test_each_role_may_do_exactly_what_the_matrix_says(edge, method, url, role):
    name, routes, client = edge
    matched = [(m, p) for (m, p) in ROUTES if m == method and re.match("^" + re.sub(r"\{[a-z_]+\}", "[^/]+", p) + "$", url)]
    if not set(matched) & routes:
        pytest.skip(f"{method} {url} is not a route of the {name} app (`archetype serve` only)")
    body = {} if method in ("POST", "PUT", "PATCH") else None
    for token, entry in [(None, None), *TOKENS.items()]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = await client.request(method, url, json=body, headers=headers)
        allowed = role == "none" or (entry is not None and any(role in INCLUDES[r] for r in entry["roles"]))
        who = entry["roles"] if entry else "no token"
        if allowed:
            assert answer.status_code not in (401, 403), f"{method} {url} ({role}) refused {who}: {answer.text}"
            assert answer.status_code != 500, f"{method} {url} ({role}) failed for {who}: {answer.text}"
        else:
            expected = 401 if token is None else 403
            assert answer.status_code == expected, f"{method} {url} ({role}) answered {who}: {answer.status_code} {answer.text}"


@pytest.mark.parametrize("path", ["/worlds/no-such-world%2Fcommands", "/worlds/w%2fx/ledger/list_worlds", "/ledger%2Flist_worlds"])
async def test_an_encoded_slash_routes_nowhere_on_either_app(edge, path):
    """The framework routes on the decoded path; the front door refuses the encoded slash first."""
    _, _, client = edge
    for method in ("GET", "POST"):
        answer = await client.request(method, path, json={} if method == "POST" else None, headers={"Authorization": "Bearer t-admin"})
        assert (answer.status_code, answer.json()["code"]) == (422, "invalid_request"), answer.text
