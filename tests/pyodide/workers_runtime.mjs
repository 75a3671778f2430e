// The Workers runtime objects our Python touches, written in JavaScript so that every value the
// Worker and the Durable Object hand them crosses Pyodide's real FFI (JsProxy / PyProxy, to_js,
// to_py, null and undefined) the way it does in workerd. Class names match workerd's where the
// Python SDK (workers-runtime-sdk) looks at `constructor.name` to decide how to wrap a binding.
//
// What is modelled, and from where (the Cloudflare docs and workerd's behaviour as documented):
// - ctx.storage.sql.exec(query, ...bindings) -> a cursor (iterator, toArray, raw, columnNames,
//   rowsRead, rowsWritten); bindings must be strings, numbers, null or byte buffers.
// - ctx.storage.transactionSync(fn): synchronous; rolled back when fn throws.
// - getAlarm / setAlarm / deleteAlarm (setAlarm refusing what workerd refuses); the harness fires
//   alarms (runAlarm).
// - the DO namespace (idFromName, get) and its stubs: arguments and results are structured-cloned
//   (a PyProxy cannot be cloned: DataCloneError), one call at a time per object.
// - a Queue producer (sendBatch) with Cloudflare's message shape and limits.
// Only what our Python and the SDK call is modelled.
//
// The SQL itself goes to an *engine* (the seam): { exec(query, bindings) -> JSON text of
// {columnNames, rows, rowsRead, rowsWritten} or {error}, transaction(fn) }. The default engine is
// Pyodide's sqlite3 with the stand-in's Durable Object SQL rules (tests/pyodide/harness.py); the
// workerd-backed real engine can replace it without touching anything else here.

import { createHash } from "node:crypto";

const QUEUE_MAX_BATCH_MESSAGES = 100;
const QUEUE_MAX_BATCH_BYTES = 256_000;
const QUEUE_MAX_MESSAGE_BYTES = 128_000;
const QUEUE_MESSAGE_OVERHEAD_BYTES = 100;
const QUEUE_MESSAGE_FIELDS = new Set(["body", "contentType", "delaySeconds"]);
const QUEUE_CONTENT_TYPES = new Set(["json", "text", "bytes", "v8"]);

function isPlainObject(value) {
  return value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;
}

// setAlarm refuses a time from here on: 2**63 - 1 nanoseconds, in milliseconds (observed on workerd).
const ALARM_LIMIT_MS = 9223372036854.775;

function checkBinding(value, index) {
  // workerd binds null/undefined, strings, numbers and byte buffers; anything else is a TypeError
  // (a boolean, a BigInt, an array, a Map, a PyProxy ...).
  if (value === null || value === undefined || typeof value === "string" || typeof value === "number") return;
  if (value instanceof ArrayBuffer || ArrayBuffer.isView(value)) return;
  const kind = value?.constructor?.name ?? typeof value;
  throw new TypeError(`SQL binding ${index + 1}: cannot bind a value of type ${kind}`);
}

export class SqlStorageCursor {
  #columns;
  #rows;
  #position = 0;

  constructor(columnNames, rows, rowsRead, rowsWritten) {
    this.#columns = columnNames;
    this.#rows = rows;
    this.rowsRead = rowsRead;
    this.rowsWritten = rowsWritten;
  }

  get columnNames() {
    return [...this.#columns];
  }

  takeRow() {
    return this.#position < this.#rows.length ? this.#rows[this.#position++] : undefined;
  }

  next() {
    const row = this.takeRow();
    if (row === undefined) return { done: true, value: undefined };
    return { done: false, value: Object.fromEntries(this.#columns.map((name, i) => [name, row[i]])) };
  }

  toArray() {
    const rows = [];
    for (let step = this.next(); !step.done; step = this.next()) rows.push(step.value);
    return rows;
  }

  raw() {
    return new SqlStorageRawCursor(this);
  }

  [Symbol.iterator]() {
    return this;
  }
}

// cursor.raw(): the same rows as column arrays, sharing the cursor's position. A class, not an
// object literal: a plain object would be turned into a dict by the SDK's python_from_rpc.
export class SqlStorageRawCursor {
  #cursor;

  constructor(cursor) {
    this.#cursor = cursor;
  }

  get columnNames() {
    return this.#cursor.columnNames;
  }

  next() {
    const row = this.#cursor.takeRow();
    return row === undefined ? { done: true, value: undefined } : { done: false, value: [...row] };
  }

  toArray() {
    const rows = [];
    for (let step = this.next(); !step.done; step = this.next()) rows.push(step.value);
    return rows;
  }

  [Symbol.iterator]() {
    return this;
  }
}

export class SqlStorage {
  #engine;

  constructor(engine) {
    this.#engine = engine;
  }

  exec(query, ...bindings) {
    if (typeof query !== "string") throw new TypeError("exec takes the SQL text as its first argument");
    bindings.forEach(checkBinding);
    const answer = JSON.parse(this.#engine.exec(query, bindings));
    if (answer.error !== undefined) throw new Error(answer.error);
    return new SqlStorageCursor(answer.columnNames, answer.rows, answer.rowsRead, answer.rowsWritten);
  }
}

// What the runtime keeps for one object across evictions: its engine (storage) and its alarm.
class ObjectRecord {
  constructor(id, engine) {
    this.id = id;
    this.engine = engine;
    this.alarm = null;
    this.instance = null;
    this.state = null;
    this.gate = Promise.resolve();
  }
}

export class DurableObjectStorage {
  #record;

  constructor(record) {
    this.#record = record;
    this.sql = new SqlStorage(record.engine);
  }

  transactionSync(fn) {
    if (typeof fn !== "function") throw new TypeError("transactionSync takes a function");
    return this.#record.engine.transaction(() => {
      const result = fn();
      if (result !== null && typeof result === "object" && typeof result.then === "function") {
        throw new TypeError("transactionSync callback must complete synchronously (it returned a promise)");
      }
      return result;
    });
  }

  async getAlarm() {
    return this.#record.alarm;
  }

  async setAlarm(scheduledTime) {
    if (typeof scheduledTime !== "number" || !Number.isFinite(scheduledTime)) {
      throw new TypeError("setAlarm takes milliseconds since the epoch (or a Date)");
    }
    // workerd's own refusals (its alarm is 64-bit nanoseconds since the epoch), as it words them
    if (scheduledTime <= 0) throw new TypeError("setAlarm() cannot be called with an alarm time <= 0");
    if (scheduledTime >= ALARM_LIMIT_MS) throw new TypeError("This API doesn't support dates after 2189.");
    this.#record.alarm = scheduledTime;
  }

  async deleteAlarm() {
    this.#record.alarm = null;
  }
}

export class DurableObjectId {
  constructor(name) {
    this.name = name;
    this.hex = createHash("sha256").update(name).digest("hex");
  }

  toString() {
    return this.hex;
  }
}

export class DurableObjectState {
  constructor(record) {
    this.id = record.id;
    this.storage = new DurableObjectStorage(record);
  }

  waitUntil(promise) {
    keepUntilSettled(promise);
  }
}

// A stub answers every property with an RPC method, as workerd's do, except the few a caller
// probes to learn what kind of value it holds (a stub is not a thenable).
const NOT_RPC = new Set(["then", "constructor", "toJSON", "valueOf", "toString"]);

export class DurableObjectStub {
  constructor(call, id) {
    this.id = id;
    return new Proxy(this, {
      get(target, prop, receiver) {
        if (typeof prop !== "string" || NOT_RPC.has(prop) || prop === "id") return Reflect.get(target, prop, receiver);
        return async (...args) => structuredClone(await call(id, prop, structuredClone(args)));
      },
    });
  }
}

// `hooks` are the runtime's Python entry points: construct(state, env) builds the exported class,
// invoke(instance, method, args) makes one RPC call with the runtime's conversions,
// alarm(instance, info) runs the alarm handler; engine() makes a fresh storage engine.
export class DurableObjectNamespace {
  #hooks;
  #records = new Map();

  constructor(hooks) {
    this.#hooks = hooks;
    this.env = null; // the env every object is constructed with (set by the deployment)
  }

  idFromName(name) {
    if (typeof name !== "string") throw new TypeError("idFromName takes a string");
    return new DurableObjectId(name);
  }

  get(id) {
    if (!(id instanceof DurableObjectId)) throw new TypeError("get takes a DurableObjectId from this namespace");
    return new DurableObjectStub((objectId, method, args) => this.#call(objectId, method, args), id);
  }

  #record(id) {
    let record = this.#records.get(id.hex);
    if (record === undefined) {
      record = new ObjectRecord(id, this.#hooks.engine());
      this.#records.set(id.hex, record);
    }
    return record;
  }

  #instance(record) {
    if (record.instance === null) {
      record.state = new DurableObjectState(record);
      record.instance = this.#hooks.construct(record.state, this.env);
    }
    return record.instance;
  }

  // One event at a time per object: the whole call holds the object's input gate (stricter than
  // workerd, which lets events interleave at awaits that are not storage operations).
  #gated(record, work) {
    const run = record.gate.then(work);
    record.gate = run.catch(() => {});
    return run;
  }

  #call(id, method, args) {
    const record = this.#record(id);
    return this.#gated(record, () => this.#hooks.invoke(this.#instance(record), method, args));
  }

  // -- harness controls --
  instance(name) {
    return this.#instance(this.#record(this.idFromName(name)));
  }

  alarmTime(name) {
    return this.#record(this.idFromName(name)).alarm;
  }

  evict(name) {
    const record = this.#record(this.idFromName(name));
    record.instance = record.state = null;
  }

  // Fire the object's alarm if one is set. As in workerd, the alarm is cleared when its handler
  // starts (the handler may set the next one) and stays set for a retry when the handler throws.
  async runAlarm(name) {
    const record = this.#record(this.idFromName(name));
    if (record.alarm === null) return false;
    await this.#gated(record, async () => {
      const scheduled = record.alarm;
      record.alarm = null;
      try {
        await this.#hooks.alarm(this.#instance(record), { retryCount: 0, isRetry: false });
      } catch (error) {
        if (record.alarm === null) record.alarm = scheduled;
        throw error;
      }
    });
    return true;
  }
}

export class WorkerQueue {
  #failures = [];

  constructor() {
    this.batches = [];
  }

  get messages() {
    return this.batches.flat();
  }

  failNext(count = 1) {
    for (let i = 0; i < count; i++) this.#failures.push(new Error("Queue send failed: internal error"));
  }

  async sendBatch(messages, options) {
    if (!Array.isArray(messages)) {
      throw new TypeError(`sendBatch takes an array of messages, not ${messages?.constructor?.name ?? typeof messages}`);
    }
    if (messages.length === 0) throw new Error("sendBatch needs at least one message");
    if (messages.length > QUEUE_MAX_BATCH_MESSAGES) {
      throw new Error(`sendBatch of ${messages.length} messages exceeds ${QUEUE_MAX_BATCH_MESSAGES}`);
    }
    let total = 0;
    messages.forEach((message, index) => {
      if (!isPlainObject(message) || !("body" in message)) {
        const kind = message?.constructor?.name ?? typeof message;
        throw new TypeError(`message ${index}: a MessageSendRequest object {body, contentType?, delaySeconds?}, not ${kind}`);
      }
      const extra = Object.keys(message).filter((key) => !QUEUE_MESSAGE_FIELDS.has(key));
      if (extra.length) throw new TypeError(`message ${index}: unknown fields ${extra.join(", ")}`);
      if (message.contentType !== undefined && !QUEUE_CONTENT_TYPES.has(message.contentType)) {
        throw new TypeError(`message ${index}: contentType ${message.contentType} is not one of json, text, bytes, v8`);
      }
      const encoded = message.contentType === "json" ? JSON.stringify(message.body) : undefined;
      if (message.contentType === "json" && encoded === undefined) {
        throw new TypeError(`message ${index}: a json body must be JSON-serialisable`);
      }
      const size = (encoded ?? JSON.stringify(structuredClone(message.body)) ?? "").length + QUEUE_MESSAGE_OVERHEAD_BYTES;
      if (size > QUEUE_MAX_MESSAGE_BYTES) throw new Error(`message ${index} is ${size} bytes > ${QUEUE_MAX_MESSAGE_BYTES}`);
      total += size;
    });
    if (total > QUEUE_MAX_BATCH_BYTES) throw new Error(`sendBatch of ${total} bytes exceeds ${QUEUE_MAX_BATCH_BYTES}`);
    const copies = structuredClone(messages); // the send takes a copy now
    await null; // the send is network I/O: it resolves later
    if (this.#failures.length) throw this.#failures.shift();
    this.batches.push(copies.map((message) => message.body));
  }
}

export class ExecutionContext {
  waitUntil(promise) {
    keepUntilSettled(promise);
  }
}

// Work handed to waitUntil runs on after the response; its failure is reported, not lost.
export function keepUntilSettled(promise) {
  Promise.resolve(promise).catch((error) => process.stderr.write(`waitUntil: ${error?.stack ?? error}\n`));
}

