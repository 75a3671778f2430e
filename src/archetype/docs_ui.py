"""Interactive API docs from local assets (CPython only; `archetype serve` mounts them).

FastAPI's own `/docs` and `/redoc` pages load Swagger UI and ReDoc from a CDN, so they are blank
offline; the shared app therefore serves neither, and this module serves `/docs` with the Swagger
UI 5 assets (it reads OpenAPI 3.1) that the `fastapi-offline` package ships. No ReDoc: its page
still loads a logo from its CDN.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = files("fastapi_offline") / "static"
ASSETS_URL = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """`GET /docs`: Swagger UI, with the bearer scheme's Authorize button."""
    app.mount(ASSETS_URL, StaticFiles(directory=str(ASSETS)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            # no validator badge: it would send the document to an online validator
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )
