// The real Durable Object SQL engine, driven from CPython over loopback HTTP (engine.py beside
// this file). Each Durable Object of the SqlEngine class is the `ctx.storage` of one object that
// the CPython stand-in runtime hosts; it runs the statements it is sent on its SQLite storage.
//
// POST /?object=<name> with {"statements": [[query, [binding, ...]], ...], "expect": ...}
//   expect == null        run the statements in one transactionSync and commit;
//   expect == [answers]   the same, but commit only if every answer is exactly the expected one
//                         (else roll back and answer 409);
//   "probe": true         run them in one transactionSync, then roll it back.
// The answer is {"answers": [text, ...]}: one JSON text per statement, {"rows", "columns",
// "rowsRead", "rowsWritten"} or {"error"}, so the client can hand it back byte for byte.

import { DurableObject } from "cloudflare:workers";

class Rollback extends Error {}

// JSON carries what Pyodide would hand the engine, except three values it cannot spell.
function binding(value) {
  if (value === null || typeof value !== "object") return value;
  if (value.$ === "undefined") return undefined;
  if (value.$ === "bigint") return BigInt(value.v);
  if (value.$ === "number") return Number(value.v);
  throw new TypeError(`unknown binding ${JSON.stringify(value)}`);
}

// JSON.stringify turns -0 into 0 and non-finite numbers into null; blobs have no JSON form.
function result(value) {
  if (typeof value === "number" && (!Number.isFinite(value) || Object.is(value, -0))) {
    return { $: "number", v: Object.is(value, -0) ? "-0" : String(value) };
  }
  if (value instanceof ArrayBuffer) {
    return { $: "bytes", v: btoa(String.fromCharCode(...new Uint8Array(value))) };
  }
  return value;
}

export class SqlEngine extends DurableObject {
  run(statements) {
    return statements.map(([query, bindings]) => {
      try {
        const cursor = this.ctx.storage.sql.exec(query, ...bindings.map(binding));
        const rows = cursor.raw().toArray().map((row) => row.map(result));
        return JSON.stringify({
          rows,
          columns: cursor.columnNames,
          rowsRead: cursor.rowsRead,
          rowsWritten: cursor.rowsWritten,
        });
      } catch (error) {
        // A failed statement leaves the transaction open, as when Python catches the exception.
        return JSON.stringify({ error: `${error.name}: ${error.message}` });
      }
    });
  }

  async fetch(request) {
    const { statements, expect, probe } = await request.json();
    let answers;
    try {
      this.ctx.storage.transactionSync(() => {
        answers = this.run(statements);
        if (probe || (expect !== null && answers.some((answer, i) => answer !== expect[i]))) {
          throw new Rollback();
        }
      });
    } catch (error) {
      if (!(error instanceof Rollback)) throw error;
      if (!probe) return Response.json({ answers }, { status: 409 });
    }
    return Response.json({ answers });
  }
}

export default {
  fetch(request, env) {
    const name = new URL(request.url).searchParams.get("object");
    if (request.method !== "POST" || !name) return new Response("POST /?object=<name>", { status: 400 });
    return env.ENGINE.getByName(name).fetch(request);
  },
};
