"""The dashboard in a real headless Chromium against a real `archetype serve`: sign in, worlds with
status, health and tick rate, commands filtered by status, one command's record and outbox trail,
the live entities (table and plot); and the API docs, offline. Each step keeps a screenshot."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import shot

pytestmark = pytest.mark.timeout(120)
# every expectation waits this long (playwright's default is 5 s: a busy machine's full suite
# saw a sign-in error still empty after it)
expect.set_options(timeout=15_000)


def sign_in(page, url: str, token: str) -> None:
    page.goto(f"{url}/dashboard/")
    page.fill("#token", token)
    page.click("#login button")


def test_worlds_commands_a_command_and_the_entities(page, served):
    sign_in(page, served, "t-operator")
    worlds = page.get_by_test_id("worlds")
    row = worlds.locator("tr", has_text="d1")
    expect(row).to_contain_text("arena")
    expect(row).to_contain_text("ACTIVE")
    expect(row.locator("td").nth(3)).to_have_text("ok")  # health: ticking
    expect(row.locator("td").nth(5)).to_have_text(re.compile(r"^[1-9]\d*\.\d$"))  # ticks/s, ~20
    shot(page, "1-worlds")

    row.get_by_role("link", name="d1").click()
    commands = page.get_by_test_id("commands")
    expect(commands.locator("tbody tr")).to_have_count(4)  # an operator sees every principal's
    page.get_by_test_id("status-filter").select_option("REJECTED")
    expect(commands.locator("tbody tr")).to_have_count(1)
    expect(commands).to_contain_text("ghost")
    expect(commands).to_contain_text("entity 999")
    shot(page, "2-world-rejected-commands")

    entities = page.get_by_test_id("entities")
    expect(entities.locator("tbody tr")).to_have_count(3)
    expect(entities).to_contain_text("Position")
    expect(page.get_by_test_id("plot").locator("circle")).to_have_count(3)  # Position.x against Position.y
    expect(page.get_by_test_id("plot-x")).to_have_value("Position.x")
    before = page.get_by_test_id("entities").inner_text()
    expect(page.get_by_test_id("entities")).not_to_have_text(before)  # live: the ships move
    shot(page, "3-world-entities")

    commands.get_by_role("link", name="ghost").click()
    record = page.get_by_test_id("record")
    expect(record).to_contain_text("REJECTED")
    expect(record).to_contain_text("pat")
    expect(page.get_by_test_id("payload")).to_contain_text('"entity_id": 999')
    trail = page.get_by_test_id("trail")
    expect(trail.locator("tbody tr")).to_have_count(2)  # once the projector has run
    expect(trail).to_contain_text("admitted")
    expect(trail).to_contain_text("rejected")
    shot(page, "4-command")
    assert page.problems == []


def test_a_player_sees_only_its_own_and_a_bad_token_signs_out(page, served):
    sign_in(page, served, "t-player2")
    page.get_by_test_id("worlds").get_by_role("link", name="d1").click()
    expect(page.get_by_test_id("entities").locator("tbody tr")).to_have_count(3)  # state is shared
    expect(page.get_by_test_id("commands").locator("tbody tr")).to_have_count(0)  # commands are not
    shot(page, "5-another-player")

    page.evaluate("sessionStorage.setItem('archetype-token', 'wrong')")
    page.reload()
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("unauthenticated")
    shot(page, "6-bad-token")


def test_a_link_with_the_token_in_its_fragment_signs_in_and_the_address_forgets_it(page, served):
    requested = []
    page.on("request", lambda request: requested.append((request.url, request.headers.get("referer", ""))))
    page.goto(f"{served}/dashboard/#/worlds/d1/commands/ghost?principal=pat&token=t-operator")  # a screenshot tool's link
    expect(page.get_by_test_id("record")).to_contain_text("REJECTED")  # signed in as the operator, on that view
    assert page.url == f"{served}/dashboard/#/worlds/d1/commands/ghost?principal=pat"  # the token is gone from the address
    assert page.evaluate("sessionStorage.getItem('archetype-token')") == "t-operator"
    assert page.evaluate("history.length") == 2  # replaced, not pushed: no entry to go back to holds it
    shot(page, "7-signed-in-from-a-link")

    page.goto(f"{served}/dashboard/#token=t-player2")  # pasted into the open tab: another token, the worlds view
    expect(page.get_by_test_id("worlds").get_by_role("link", name="d1")).to_be_visible()
    assert page.url == f"{served}/dashboard/"
    assert page.evaluate("sessionStorage.getItem('archetype-token')") == "t-player2"
    page.get_by_test_id("worlds").get_by_role("link", name="d1").click()
    expect(page.get_by_test_id("entities").locator("tbody tr")).to_have_count(3)
    expect(page.get_by_test_id("commands").locator("tbody tr")).to_have_count(0)  # the player's own: none
    # A fragment never leaves the browser: no request (so no server log) and no Referer carries the token.
    assert requested and not [seen for seen in requested if "t-operator" in "".join(seen) or "t-player2" in "".join(seen)]
    assert page.problems == []


def test_the_api_docs_render_offline_with_the_bearer_scheme(page, served):
    page.goto(f"{served}/docs")
    expect(page.locator(".opblock-summary-path", has_text="/worlds/{world_id}/commands").first).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("Authorize"))).to_be_visible()
    page.get_by_role("button", name=re.compile("Authorize")).click()
    expect(page.get_by_text("HTTPBearer  (http, Bearer)")).to_be_visible()
    shot(page, "8-swagger-ui")
    assert page.problems == []


def test_the_dashboard_redirect_is_relative(served):
    import httpx

    for path in ("/", "/dashboard"):
        response = httpx.get(f"{served}{path}", headers={"Host": "evil.example"}, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (307, "/dashboard/")


def test_a_stalled_world_and_a_dead_letter_redriven_from_its_page(browser, tmp_path):
    """`archetype serve --module tests.server.faulty`: world `hot` stalls (its processor raises),
    world `cold` dead-letters a command (its hook raises Permanent); the operator sees the stall
    and redrives the dead letter with the button."""
    import httpx

    from tests.component_modules.alpha import Position, Velocity
    from tests.dashboard.conftest import ADMIN, PLAYER, component, page_on
    from tests.support.serve import serving, wait_for

    with serving(tmp_path, "--module", "tests.server.faulty") as (process, url):
        with httpx.Client(base_url=url, timeout=10) as http:
            for world_id, value in (("hot", Position(x=1, y=1)), ("cold", Velocity(dx=-1, dy=0))):
                assert http.post("/worlds", json={"name": world_id, "world_id": world_id}, headers=ADMIN).status_code == 201
                spawn = {"type": "spawn", "tick": 0, "components": [component(value)]}
                assert http.post(f"/worlds/{world_id}/commands", json=spawn,
                                 headers={**PLAYER, "Idempotency-Key": "k"}).status_code == 202  # fmt: skip
            wait_for(lambda: http.get("/worlds/cold/commands/k", headers=PLAYER).json()["status"] == "DEAD_LETTER", "a dead letter")
        with page_on(browser, url) as page:
            sign_in(page, url, "t-operator")
            row = page.get_by_test_id("worlds").locator("tr", has_text="hot")
            expect(row.locator("td").nth(3)).to_have_text("stalled")
            row.get_by_role("link", name="hot").click()
            expect(page.get_by_test_id("stalled")).to_contain_text("RuntimeError: the reactor overheated")
            shot(page, "5-stalled-world")

            page.goto(f"{url}/dashboard/#/worlds/cold/commands/k?principal=pat")
            expect(page.get_by_test_id("record")).to_contain_text("Permanent: ships do not fly backwards")
            page.get_by_test_id("redrive").click()
            record = page.get_by_test_id("record")
            expect(record).to_contain_text("k.redrive")  # the new command's page
            expect(record.locator("tr", has_text="redriven_from")).to_contain_text("1")
            shot(page, "6-redriven")
            assert page.problems == []
