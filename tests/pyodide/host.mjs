// The Node process of the Pyodide harness: real Pyodide interpreters (npm `pyodide`, the
// CPython 3.14 of the Python Workers runtime) running the project's Python, with the runtime
// objects of workers_runtime.mjs as their bindings. pytest drives it over stdin/stdout, one JSON
// object per line, and reaches the Worker over HTTP on 127.0.0.1:
//
//   node tests/pyodide/host.mjs <repo root>
//   -> {"ready": {"port": N, "timings": {...}}}          once the "main" interpreter is up
//   <- {"id": 1, "op": "call", "interpreter": "main", "function": "module:name", "kwargs": {...}}
//   -> {"id": 1, "ok": true, "value": <JSON>} | {"id": 1, "ok": false, "error": "<traceback>"}
//   <- {"id": 2, "op": "boot", "interpreter": "bundle", "bundle": "<dir>"}   a fresh interpreter
//
// Python's own output goes to stderr. The process exits when stdin closes, so a pytest session
// that ends (or dies) never leaves it running.

import http from "node:http";
import readline from "node:readline";
import { loadPyodide } from "pyodide";
import * as runtime from "./workers_runtime.mjs";

const root = process.argv[2];
const interpreters = new Map();

// `_pyodide_entrypoint_helper` is a JS module of workerd's Python entry point, imported by the
// SDK. Only what the SDK uses is modelled: the `cloudflare:workers` module (env, waitUntil).
// patchWaitUntil is workerd's hook for keeping Python awaitables passed to ctx.waitUntil alive;
// nothing here collects them early, so it has nothing to do.
function entrypointHelper() {
  return {
    cloudflareWorkersModule: { env: {}, waitUntil: runtime.keepUntilSettled },
    patchWaitUntil() {},
  };
}

async function boot(name, options) {
  const started = performance.now();
  const pyodide = await loadPyodide({
    stdout: (line) => process.stderr.write(`[${name}] ${line}\n`),
    stderr: (line) => process.stderr.write(`[${name}] ${line}\n`),
  });
  const loaded = performance.now();
  for (const dir of options.bundle ? [root, options.bundle] : [root]) {
    pyodide.FS.mkdirTree(dir);
    pyodide.mountNodeFS(dir, dir);
  }
  pyodide.registerJsModule("workers_runtime", runtime);
  pyodide.registerJsModule("_pyodide_entrypoint_helper", entrypointHelper());
  // Compatibility flags the SDK reads at run time; an absent flag reads as False.
  pyodide.registerJsModule("_cloudflare_compat_flags", {});
  const paths = options.bundle ? [root, options.bundle, `${options.bundle}/python_modules`] : [root, `${root}/src`];
  pyodide.globals.set("_harness_paths", pyodide.toPy(paths));
  pyodide.runPython("import sys; sys.dont_write_bytecode = True; sys.path[:0] = _harness_paths; del _harness_paths");
  const harness = pyodide.pyimport("tests.pyodide.harness");
  const timings = JSON.parse(await harness.boot(options.bundle ? "bundle" : "src"));
  timings.load_pyodide_ms = loaded - started;
  timings.total_ms = performance.now() - started;
  interpreters.set(name, { pyodide, harness });
  return timings;
}

async function handle(request) {
  if (request.op === "boot") return boot(request.interpreter, { bundle: request.bundle });
  if (request.op === "call") {
    const { harness } = interpreters.get(request.interpreter ?? "main");
    return JSON.parse(await harness.call(request.function, JSON.stringify(request.kwargs ?? {})));
  }
  throw new Error(`unknown op ${request.op}`);
}

// The Worker over HTTP: each request becomes a JS Request handed to the Worker's entry as the
// runtime hands it (tests/pyodide/harness.py: fetch). `x-harness-now-ms` sets the deployment's
// clock first, so a test's ManualClock reaches the Durable Objects.
async function serve(req, res) {
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
    const now = headers.get("x-harness-now-ms");
    headers.delete("x-harness-now-ms");
    const hasBody = !["GET", "HEAD"].includes(req.method);
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers,
      body: hasBody ? Buffer.concat(chunks) : undefined,
    });
    const { harness } = interpreters.get("main");
    const response = await harness.fetch(request, now === null ? undefined : Number(now));
    for (const [key, value] of response.headers) res.appendHeader(key, value);
    res.writeHead(response.status);
    res.end(Buffer.from(await response.arrayBuffer()));
  } catch (error) {
    // workerd answers an exception out of fetch with a bare 500; the stack helps the test report.
    res.writeHead(500, { "content-type": "text/plain" });
    res.end(`harness: the Worker threw: ${error?.stack ?? error}`);
  }
}

function reply(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const timings = await boot("main", {});
const server = http.createServer(serve);
server.listen(0, "127.0.0.1", () => reply({ ready: { port: server.address().port, timings } }));

const lines = readline.createInterface({ input: process.stdin });
lines.on("line", async (line) => {
  const request = JSON.parse(line);
  try {
    reply({ id: request.id, ok: true, value: await handle(request) });
  } catch (error) {
    reply({ id: request.id, ok: false, error: String(error?.message ?? error) });
  }
});
lines.on("close", () => process.exit(0));
