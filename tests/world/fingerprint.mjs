// An independent implementation of the component fingerprint (docs/components.md, "The
// fingerprint, precisely"), written from that page alone: no Python, no shared code.
//
//   node fingerprint.mjs < cases.json
// reads [{"name": ..., "schema": <pydantic JSON Schema text>}, ...] and prints, per case,
// {"fingerprint": ..., "canonical": ...} as a JSON array.
//
// The schema comes in as TEXT because a number's JSON spelling matters: Python writes the float
// 1.0 as `1.0` and the integer 1 as `1`, and JSON.parse would make both the number 1. So this file
// has its own small parser that keeps each number's kind (integer or float).

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

const DOC_KEYS = new Set(["title", "description", "examples"]);

// -- parsing, keeping integers and floats apart --
function parse(text) {
  let i = 0;
  const ws = () => { while (" \t\n\r".includes(text[i])) i++; };
  const value = () => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++; const members = []; ws();
      if (text[i] === "}") { i++; return { kind: "object", members }; }
      for (;;) {
        ws(); const key = string(); ws(); i++; // ':'
        members.push([key, value()]); ws();
        if (text[i++] === "}") return { kind: "object", members };
      }
    }
    if (c === "[") {
      i++; const items = []; ws();
      if (text[i] === "]") { i++; return { kind: "array", items }; }
      for (;;) { items.push(value()); ws(); if (text[i++] === "]") return { kind: "array", items }; }
    }
    if (c === '"') return { kind: "string", value: string() };
    for (const [word, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) { i += word.length; return { kind: "literal", value: v }; }
    }
    const match = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    i += match[0].length;
    const isFloat = match[1] !== undefined || match[2] !== undefined;
    return isFloat ? { kind: "float", value: Number(match[0]) } : { kind: "integer", value: BigInt(match[0]) };
  };
  const string = () => {
    const start = i; i++;
    while (text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  return value();
}

// -- the canonical prefixed schema --
function stripDocs(node) {
  if (node.kind === "object") {
    return { kind: "object", members: node.members.filter(([k]) => !DOC_KEYS.has(k)).map(([k, v]) => [k, stripDocs(v)]) };
  }
  if (node.kind === "array") return { kind: "array", items: node.items.map(stripDocs) };
  return node;
}

const member = (node, key) => (node.members.find(([k]) => k === key) || [])[1];
const str = (value) => ({ kind: "string", value });
const byCodePoint = (a, b) => {
  const x = [...a].map((ch) => ch.codePointAt(0)); const y = [...b].map((ch) => ch.codePointAt(0));
  for (let k = 0; k < Math.min(x.length, y.length); k++) if (x[k] !== y[k]) return x[k] - y[k];
  return x.length - y.length;
};

function canonicalPrefixedSchema(name, schema) {
  const stripped = stripDocs(schema);
  const prefix = name.toLowerCase() + "__";
  const properties = member(stripped, "properties") || { kind: "object", members: [] };
  const required = member(stripped, "required") || { kind: "array", items: [] };
  return {
    kind: "object",
    members: [
      ["component", str(name)],
      ["properties", { kind: "object", members: properties.members.map(([k, v]) => [prefix + k, v]) }],
      ["required", { kind: "array", items: required.items.map((s) => prefix + s.value).sort(byCodePoint).map(str) }],
      ["defs", member(stripped, "$defs") || { kind: "object", members: [] }],
    ],
  };
}

// -- canonical JSON --
function quote(s) {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    const named = { 0x22: '\\"', 0x5c: "\\\\", 0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0c: "\\f" }[cp];
    if (named) out += named;
    else if (cp >= 0x20 && cp < 0x7f) out += ch;
    else if (cp > 0xffff) {
      const v = cp - 0x10000;
      out += u(0xd800 + (v >> 10)) + u(0xdc00 + (v & 0x3ff));
    } else out += u(cp);
  }
  return out + '"';
}
const u = (n) => "\\u" + n.toString(16).padStart(4, "0");

// Python's repr of a float: the shortest digits that round-trip; positional when the decimal
// exponent e (x = d.ddd * 10^e) is in -4 <= e < 16, always with a fractional part; else
// d.ddde+XX with at least two exponent digits.
function pythonFloat(x) {
  if (Object.is(x, -0)) return "-0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exp] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const e = Number(exp);
  if (e >= -4 && e < 16) {
    if (e >= 0) {
      const whole = digits.padEnd(e + 1, "0");
      const fraction = digits.slice(e + 1) || "0";
      return sign + whole.slice(0, e + 1) + "." + fraction;
    }
    return sign + "0." + "0".repeat(-e - 1) + digits;
  }
  const m = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
  return sign + m + "e" + (e < 0 ? "-" : "+") + String(Math.abs(e)).padStart(2, "0");
}

function canonical(node) {
  switch (node.kind) {
    case "object": {
      const members = [...node.members].sort(([a], [b]) => byCodePoint(a, b));
      return "{" + members.map(([k, v]) => quote(k) + ":" + canonical(v)).join(",") + "}";
    }
    case "array": return "[" + node.items.map(canonical).join(",") + "]";
    case "string": return quote(node.value);
    case "integer": return node.value.toString();
    case "float": return pythonFloat(node.value);
    default: return JSON.stringify(node.value);
  }
}

const cases = JSON.parse(readFileSync(0, "utf8"));
const answers = cases.map(({ name, schema }) => {
  const text = canonical(canonicalPrefixedSchema(name, parse(schema)));
  return { canonical: text, fingerprint: createHash("sha256").update(text, "ascii").digest("hex") };
});
process.stdout.write(JSON.stringify(answers));
