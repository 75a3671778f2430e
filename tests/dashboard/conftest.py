"""A real `archetype serve` with a moving world, and Debian's Chromium driven by Playwright.

Screenshots are kept as test artifacts under `test-artifacts/dashboard/` (git-ignored; override
with $ARCHETYPE_ARTIFACTS); the session prints where they went."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from archetype.world import ComponentValue
from tests.component_modules.alpha import Position, Velocity
from tests.support.serve import serving, wait_for

CHROMIUM = "/usr/bin/chromium"  # ./dev setup installs Debian's chromium package where missing
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("ARCHETYPE_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
ADMIN = {"Authorization": "Bearer t-admin"}
PLAYER = {"Authorization": "Bearer t-player"}


def component(value) -> dict:
    return ComponentValue.from_component(value).model_dump()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`archetype serve` with world d1: three moving ships (applied) and one rejected despawn."""
    tmp_path = tmp_path_factory.mktemp("dashboard")
    with serving(tmp_path) as (_, url):
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "arena", "world_id": "d1"}, headers=ADMIN).status_code == 201
            for index, (x, dx) in enumerate([(0, 1), (10, -1), (5, 0.5)]):
                spawn = {"type": "spawn", "tick": 0, "components": [component(Position(x=x, y=index)), component(Velocity(dx=dx, dy=0))]}
                keyed = {**PLAYER, "Idempotency-Key": f"ship-{index}"}
                assert http.post("/worlds/d1/commands", json=spawn, headers=keyed).status_code == 202
            despawn = {"type": "despawn", "tick": 0, "entity_id": 999}
            assert http.post("/worlds/d1/commands", json=despawn, headers={**PLAYER, "Idempotency-Key": "ghost"}).status_code == 202
            wait_for(lambda: http.get("/worlds/d1/commands/ghost", headers=PLAYER).json()["status"] == "REJECTED", "the rejection")
        yield url


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: ./dev setup installs Debian's chromium package")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    print(f"\ndashboard screenshots: {ARTIFACTS}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def page_on(browser, served: str):
    """A page that may reach only the server: any other host is refused, so nothing loads from a CDN."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.problems = []  # console errors and failed requests: a broken page, whatever it shows
    page.on("console", lambda message: message.type == "error" and page.problems.append(message.text))
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(served) else route.abort())
    page.on("requestfailed", lambda request: page.problems.append(f"{request.url}: {request.failure}"))
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def page(browser, served):
    with page_on(browser, served) as page:
        yield page


def shot(page, name: str) -> None:
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)
