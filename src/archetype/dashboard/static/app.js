// The archetype dashboard: hash routes over the public HTTP API, with the user's bearer token.
// Every text from the server goes into the page through textContent (h() below), never as HTML.
"use strict";

const STATUSES = ["PENDING", "LEASED", "RETRYABLE", "APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED"];
const POLL_MS = 1000;
const LAGGING_EVENTS = 1000; // audit lag above this many events marks a world "lagging"
const PAGE = 200;

class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

const token = () => sessionStorage.getItem("archetype-token");

// A link may sign in: its fragment carries the token (`#token=T`, or a view's `#/worlds/w?token=T`).
// A fragment is never sent to the server, so no request, log or Referer holds it; the page keeps it
// as the sign-in form does and at once replaces the address (history.replaceState) with the view
// alone, so the token is not left to be copied, bookmarked or gone back to.
function takeTokenFromAddress() {
  const [path, search] = location.hash.replace(/^#/, "").split("?");
  const alone = path.startsWith("token=") ? new URLSearchParams(path) : null;
  const params = new URLSearchParams(search ?? "");
  const given = (alone ?? params).get("token")?.trim();
  if (!given) return;
  sessionStorage.setItem("archetype-token", given);
  params.delete("token");
  const rest = params.toString();
  const view = alone ? "" : `#${path}${rest ? `?${rest}` : ""}`;
  history.replaceState(null, "", `${location.pathname}${location.search}${view}`);
  document.getElementById("login").hidden = true;
  document.getElementById("logout").hidden = false;
}

async function api(path, method = "GET") {
  const response = await fetch(path, { method, headers: { Authorization: `Bearer ${token()}` } });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, body?.code ?? `http_${response.status}`, body?.message ?? response.statusText);
  }
  return body;
}

function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const badge = (text) => h("span", { class: `badge ${text}` }, text);
const time = (ms) => (ms === null || ms === undefined ? "-" : new Date(ms).toISOString().replace("T", " ").slice(0, 23));
const query = (params) => {
  const given = Object.entries(params).filter(([, value]) => value !== "" && value !== null && value !== undefined);
  return given.length ? `?${new URLSearchParams(given)}` : "";
};

function table(columns, rows, testid) {
  return h("table", { "data-testid": testid },
    h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", {}, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => {
      const value = cell(row);
      return h("td", typeof value === "number" ? { class: "num" } : {}, value ?? "-");
    })))));
}

// -- tick rates, from successive polls of each world's tick head --
const seen = new Map(); // world_id -> {tick, at, rate}

function tickRate(world) {
  const now = performance.now();
  const last = seen.get(world.world_id);
  let rate = last?.rate ?? null;
  if (last && now - last.at >= 500) {
    rate = ((world.tick_head - last.tick) * 1000) / (now - last.at);
    seen.set(world.world_id, { tick: world.tick_head, at: now, rate });
  } else if (!last) {
    seen.set(world.world_id, { tick: world.tick_head, at: now, rate: null });
  }
  return rate;
}

function health(world, rate) {
  if (world.status === "CLOSING") return "closing";
  if (world.status === "DESTROYED") return "destroyed";
  if (world.health?.status === "STALLED") return "stalled";
  if (world.outbox_pending > LAGGING_EVENTS) return "lagging";
  return rate ? "ok" : "idle";
}

// -- views: each returns a node, re-rendered every poll --
async function worldsView() {
  const { worlds } = await api("/worlds");
  const rows = worlds.map((world) => ({ ...world, rate: tickRate(world) }));
  return h("section", {},
    h("h1", {}, "Worlds"),
    table([
      ["world", (w) => h("a", { href: `#/worlds/${encodeURIComponent(w.world_id)}` }, w.world_id)],
      ["name", (w) => w.name],
      ["status", (w) => badge(w.status)],
      ["health", (w) => badge(health(w, w.rate))],
      ["tick head", (w) => w.tick_head],
      ["ticks/s", (w) => (w.rate === null ? "…" : w.rate.toFixed(1))],
      ["audit lag (events)", (w) => w.outbox_pending],
      ["created", (w) => time(w.created_at)],
    ], rows, "worlds"));
}

const filters = { status: "", principal: "" };

async function worldView(worldId) {
  const [world, commands, state] = await Promise.all([
    api(`/worlds/${encodeURIComponent(worldId)}`),
    api(`/worlds/${encodeURIComponent(worldId)}/commands${query({ ...filters, limit: PAGE })}`),
    api(`/worlds/${encodeURIComponent(worldId)}/state?limit=1000`),
  ]);
  const rate = tickRate(world);
  return h("section", {},
    h("h1", {}, `World ${world.world_id} `, badge(world.status), " ", badge(health(world, rate))),
    h("p", { "data-testid": "world-summary" },
      `tick ${world.tick_head} · ${rate === null ? "…" : rate.toFixed(1)} ticks/s · audit lag ${world.outbox_pending} events`),
    world.health?.status === "STALLED"
      ? h("p", { class: "error", "data-testid": "stalled" },
        `Stalled since ${time(world.health.since)}: ${world.health.failed_attempts} failed tick attempts; last error: ${world.health.last_error}`)
      : null,
    h("h2", {}, "Commands"),
    commandFilters(),
    table([
      ["#", (c) => c.sequence],
      ["command", (c) => h("a", { href: `#/worlds/${encodeURIComponent(worldId)}/commands/${encodeURIComponent(c.command_id)}${query({ principal: c.principal ?? "" })}` }, c.command_id)],
      ["principal", (c) => c.principal],
      ["operation", (c) => c.operation],
      ["tick", (c) => c.scheduled_tick],
      ["status", (c) => badge(c.status)],
      ["attempts", (c) => `${c.attempts}/${c.max_attempts}`],
      ["applied at", (c) => c.applied_tick],
      ["last error", (c) => c.last_error],
    ], commands.commands, "commands"),
    commands.next_after === null ? null : h("p", { class: "muted" }, `first ${PAGE} shown; narrow the filters to see others`),
    h("p", { class: "muted" }, "Dead letters: filter by DEAD_LETTER; open one to redrive it (operators)."),
    h("h2", {}, `Entities at tick ${state.tick_head}`),
    entities(state.entities));
}

function commandFilters() {
  const status = h("select", { "data-testid": "status-filter", onchange: (e) => { filters.status = e.target.value; render(); } },
    h("option", { value: "" }, "every status"), STATUSES.map((s) => h("option", { value: s }, s)));
  status.value = filters.status;
  const principal = h("input", { "data-testid": "principal-filter", placeholder: "principal (analysts)",
    onchange: (e) => { filters.principal = e.target.value.trim(); render(); } });
  principal.value = filters.principal;
  return h("div", { class: "filters" }, "status ", status, "principal ", principal);
}

function numericFields(entities) {
  const fields = new Set();
  for (const entity of entities) {
    for (const component of entity.components) {
      for (const [field, value] of Object.entries(component.data)) {
        if (typeof value === "number") fields.add(`${component.name}.${field}`);
      }
    }
  }
  return [...fields];
}

function fieldValue(entity, field) {
  if (field === "entity_id") return entity.entity_id;
  const [name, key] = field.split(".");
  const value = entity.components.find((c) => c.name === name)?.data[key];
  return typeof value === "number" ? value : null;
}

const plotAxes = { x: null, y: null };

function entities(list) {
  const fields = numericFields(list);
  const grid = table([
    ["entity", (e) => e.entity_id],
    ["components", (e) => h("code", {}, e.components.map((c) => `${c.name} ${JSON.stringify(c.data)}`).join("  "))],
  ], list, "entities");
  if (!fields.length) return grid;
  if (!fields.includes(plotAxes.y)) [plotAxes.x, plotAxes.y] = fields.length > 1 ? fields.slice(0, 2) : ["entity_id", fields[0]];
  const axis = (which) => {
    const select = h("select", { "data-testid": `plot-${which}`, onchange: (e) => { plotAxes[which] = e.target.value; render(); } },
      ["entity_id", ...fields].map((f) => h("option", { value: f }, f)));
    select.value = plotAxes[which];
    return select;
  };
  return h("div", { class: "panes" }, grid,
    h("div", {}, h("div", { class: "filters" }, "x ", axis("x"), "y ", axis("y")), plot(list, plotAxes.x, plotAxes.y)));
}

function plot(list, xField, yField) {
  const [width, height, pad] = [420, 300, 34];
  const points = list.map((e) => [fieldValue(e, xField), fieldValue(e, yField)]).filter(([x, y]) => x !== null && y !== null);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("data-testid", "plot");
  const range = (values) => {
    const [low, high] = [Math.min(...values), Math.max(...values)];
    return low === high ? [low - 1, high + 1] : [low, high];
  };
  const [x0, x1] = range(points.map((p) => p[0]));
  const [y0, y1] = range(points.map((p) => p[1]));
  const sx = (x) => pad + ((x - x0) / (x1 - x0)) * (width - 2 * pad);
  const sy = (y) => height - pad - ((y - y0) / (y1 - y0)) * (height - 2 * pad);
  const add = (tag, attributes, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
  };
  for (const [x, y] of points) add("circle", { cx: sx(x), cy: sy(y), r: 4 });
  add("text", { x: pad, y: height - 8 }, `${xField}: ${x0} … ${x1}`);
  add("text", { x: 4, y: 14 }, `${yField}: ${y0} … ${y1}`);
  return svg;
}

async function commandView(worldId, commandId, principal) {
  const base = `/worlds/${encodeURIComponent(worldId)}`;
  const record = await api(`${base}/commands/${encodeURIComponent(commandId)}${query({ principal })}`);
  let trail;
  try {
    trail = (await api(`${base}/audit${query({ command_id: commandId, principal, limit: 1000 })}`)).events;
  } catch (error) {
    if (error.code !== "audit_unavailable") throw error;
    trail = null;
  }
  const { payload, ...fields } = record;
  // a new command linked to this dead letter, same key every click: a retry answers the same one
  const redrive = async () => {
    const path = `${base}/dead-letters/${encodeURIComponent(commandId)}/redrive${query({ principal: record.principal ?? "", trusted: record.principal === null ? "true" : "" })}`;
    const made = await api(path, "POST");
    location.hash = `#/worlds/${encodeURIComponent(worldId)}/commands/${encodeURIComponent(made.command_id)}${query({ principal: record.principal ?? "" })}`;
  };
  return h("section", {},
    h("h1", {}, `Command ${record.command_id} `, badge(record.status)),
    h("p", {}, h("a", { href: `#/worlds/${encodeURIComponent(worldId)}` }, `← world ${worldId}`)),
    record.status === "DEAD_LETTER"
      ? h("p", {}, h("button", { "data-testid": "redrive", onclick: () => redrive().catch(showError) }, "Redrive"),
        " a new command with this operation and a fresh attempt budget (operators)")
      : null,
    table([["field", ([key]) => key], ["value", ([key, value]) => (key.endsWith("_at") ? time(value) : value ?? "-")]],
      Object.entries(fields), "record"),
    h("h2", {}, "Payload"),
    h("pre", { "data-testid": "payload" }, JSON.stringify(payload, null, 2)),
    h("h2", {}, "Outbox trail"),
    h("p", { class: "muted" }, "The audit projection's events for this command: it may lag the ledger by a projection round."),
    trail === null
      ? h("p", { "data-testid": "trail" }, "This server has no audit projection.")
      : table([
        ["event", (e) => e.event_seq],
        ["type", (e) => e.event_type],
        ["status", (e) => badge(e.status)],
        ["tick", (e) => e.tick],
        ["by", (e) => e.principal],
        ["at", (e) => time(e.occurred_at)],
      ], trail, "trail"));
}

// -- routing, polling and sign-in --
function route() {
  const [path, search] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(search ?? "");
  if (parts[0] === "worlds" && parts.length === 4 && parts[2] === "commands") {
    return () => commandView(parts[1], parts[3], params.get("principal") ?? "");
  }
  if (parts[0] === "worlds" && parts.length === 2) return () => worldView(parts[1]);
  return worldsView;
}

let rendering = false;

// `poll`: a timer's refresh, skipped while the user is in a form control (a re-render would close it).
async function render(poll = false) {
  if (!token()) return signIn();
  if (rendering || (poll && document.activeElement?.matches("main input, main select"))) return;
  rendering = true;
  const status = document.getElementById("status");
  try {
    const view = await route()();
    document.getElementById("main").replaceChildren(view);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    status.classList.remove("error");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      sessionStorage.removeItem("archetype-token");
      return signIn(error.message);
    }
    showError(error);
  } finally {
    rendering = false;
  }
}

function showError(error) {
  const status = document.getElementById("status");
  status.textContent = `error: ${error.message}`;
  status.classList.add("error");
  status.setAttribute("data-testid", "error");
}

function signIn(message = "") {
  document.getElementById("login").hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("main").replaceChildren();
  document.getElementById("login-error").textContent = message;
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("archetype-token", document.getElementById("token").value.trim());
  document.getElementById("login").hidden = true;
  document.getElementById("logout").hidden = false;
  render();
});
document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem("archetype-token");
  signIn();
});
window.addEventListener("hashchange", () => {
  takeTokenFromAddress();
  document.getElementById("main").replaceChildren();
  render();
});
takeTokenFromAddress();
if (token()) document.getElementById("logout").hidden = false;
render();
setInterval(() => render(true), POLL_MS);
