"""The operator's dashboard (CPython only: `archetype serve` mounts it at /dashboard/).

Plain HTML and a little JavaScript (static/, no build step) over the same HTTP API and bearer
tokens as every client: it reads `GET /worlds`, `/worlds/{id}`, `/worlds/{id}/commands[/{id}]`,
`/worlds/{id}/audit` and `/worlds/{id}/state`, so it shows exactly what the token may read.
docs/dashboard.md describes the views.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = files(__name__) / "static"
URL = "/dashboard"


def mount_dashboard(app: FastAPI) -> None:
    app.mount(f"{URL}/", StaticFiles(directory=str(STATIC), html=True), name="dashboard")

    # A relative Location: never built from the request's Host header.
    @app.get(URL, include_in_schema=False)
    @app.get("/", include_in_schema=False)
    async def to_dashboard() -> RedirectResponse:
        return RedirectResponse(f"{URL}/", status_code=307)
