/**
 * What Postgres can store without changing it: text without NUL or unpaired
 * surrogates (a driver would turn `"a\ud800"` into `"a\ufffd"`, so two
 * different keys would collide), and JSON that round-trips exactly. One
 * recursive walk per payload, no JSON round trip: it runs per event on the
 * producer's hot path.
 *
 * @module
 */

import { KeyqError } from "./errors.ts";

/** Matches a NUL or a surrogate code unit; the precise test runs only on a hit. */
const SUSPECT = /[\0\ud800-\udfff]/;
const BAD = /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Why `s` cannot be stored, or undefined when it can. */
export function textProblem(s: string): string | undefined {
  if (!SUSPECT.test(s)) return undefined;
  const m = BAD.exec(s);
  if (!m) return undefined;
  if (m[0] === "\0") return `contains a NUL character (U+0000) at index ${m.index}, which Postgres text cannot hold`;
  const unit = m[0].charCodeAt(0).toString(16).toUpperCase();
  return `contains an unpaired surrogate (U+${unit}) at index ${m.index}, which is not valid Unicode and would be stored as U+FFFD`;
}

/** Throws INVALID_INPUT when `s` holds text Postgres cannot store; `where` names the event. */
export function checkText(field: string, s: string, where: string): string {
  const problem = textProblem(s);
  if (problem) {
    throw new KeyqError("INVALID_INPUT", `The ${field}${where ? ` of ${where}` : ""} ${problem}; remove it or encode the value (e.g. base64).`, {
      field,
      reason: problem,
      value: s,
    });
  }
  return s;
}

/** A value for a message: quoted, shown as given (NaN, -0, 5n, Symbol(x)…), shortened. */
export function show(value: unknown): string {
  let s: string;
  switch (typeof value) {
    case "string":
      s = JSON.stringify(value);
      break;
    case "number":
      s = Object.is(value, -0) ? "-0" : String(value);
      break;
    case "bigint":
      s = `${value}n`;
      break;
    case "symbol":
      s = value.toString();
      break;
    case "function":
      s = `function ${value.name || "(anonymous)"}`;
      break;
    case "undefined":
      s = "undefined";
      break;
    default:
      s = showObject(value);
  }
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

function showObject(value: unknown): string {
  if (value === null) return "null";
  const proto = Object.getPrototypeOf(value);
  if (proto !== null && proto !== Object.prototype && !Array.isArray(value)) {
    return `a ${(proto?.constructor?.name as string | undefined) || "object"}`;
  }
  try {
    return JSON.stringify(
      value,
      (_k, v) =>
        typeof v === "bigint" || typeof v === "symbol" || typeof v === "function" || (typeof v === "number" && !Number.isFinite(v))
          ? show(v)
          : v === undefined
          ? "undefined"
          : v,
    ) ?? "undefined";
  } catch {
    return Array.isArray(value) ? "an array" : "an object";
  }
}

/** Deepest nesting a payload may have (deeper is refused, which also catches cycles). */
const MAX_DEPTH = 1000;

function refuse(path: string, what: string, fix: string, where: string): never {
  throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where} has ${what} at ${path}, which JSON would change or drop; ${fix}.`, {
    field: path,
  });
}

function kindOf(value: object): string {
  const name = (Object.getPrototypeOf(value)?.constructor?.name as string | undefined) || "object";
  return `a ${name}`;
}

/** The path of the value being checked, as `payload.items[1]`; built only for an error. */
function pathOf(stack: readonly (string | number)[]): string {
  let path = "payload";
  for (const k of stack) {
    path += typeof k === "number" ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`;
  }
  return path;
}

/** `stack` holds the keys down to `value`: no path string is built on the happy path. */
function walk(value: unknown, stack: (string | number)[], where: string): void {
  switch (typeof value) {
    case "string": {
      if (!SUSPECT.test(value)) return;
      const problem = textProblem(value);
      if (problem) {
        throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where}: the string at ${pathOf(stack)} ${problem}; remove it or encode the value.`, {
          field: pathOf(stack),
        });
      }
      return;
    }
    case "number":
      if (!Number.isFinite(value)) refuse(pathOf(stack), show(value), "send finite numbers only (or null)", where);
      return;
    case "boolean":
      return;
    case "undefined":
      return refuse(pathOf(stack), "undefined", "use null", where);
    case "bigint":
      return refuse(pathOf(stack), `the bigint ${show(value)}`, "send it as a string or a number", where);
    case "function":
    case "symbol":
      return refuse(pathOf(stack), `a ${typeof value}`, "send data only", where);
  }
  if (value === null) return;
  if (stack.length >= MAX_DEPTH) refuse(pathOf(stack), `nesting deeper than ${MAX_DEPTH} levels (a cycle?)`, "flatten the payload", where);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      stack.push(i);
      walk(value[i], stack, where);
      stack.pop();
    }
    return;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    const fix = value instanceof Date ? "send date.toISOString() (a string) instead" : "convert it to a plain object or array";
    refuse(pathOf(stack), kindOf(value as object), fix, where);
  }
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const problem = SUSPECT.test(key) ? textProblem(key) : undefined;
    if (problem) {
      throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where}: the property name ${show(key)} at ${pathOf(stack)} ${problem}; rename it.`, {
        field: pathOf(stack),
      });
    }
    const v = (value as Record<string, unknown>)[key];
    // A property holding undefined is left out, as JSON.stringify and optional fields expect.
    if (v !== undefined) {
      stack.push(key);
      walk(v, stack, where);
      stack.pop();
    }
  }
}

/**
 * True when `value` has the shape of plain JSON: plain objects and arrays,
 * finite numbers, no undefined in arrays, no bigint, function or symbol,
 * not too deep. Its strings are not looked at: `mayHoldBadText` scans the
 * serialised payloads for them in one pass. False for anything `checkJson`
 * could refuse (it then judges and words the error).
 */
export function plainShape(value: unknown, depth = 0): boolean {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(value);
    case "object":
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth >= MAX_DEPTH) return false;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (!plainShape(value[i], depth + 1)) return false;
    return true;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return false;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const v = (value as Record<string, unknown>)[key];
    if (v !== undefined && !plainShape(v, depth + 1)) return false;
  }
  return true;
}

/**
 * What JSON.stringify writes for the text Postgres cannot store: NUL as
 * `\u0000`, an unpaired surrogate as `\udXXX` (it writes paired ones as
 * they are). A match may also be a backslash the text itself holds; a
 * payload that matches is checked string by string (`checkJson`).
 */
const BAD_ESCAPE = /\\u(?:0000|d[89a-f])/i;

/** False when JSON text written by JSON.stringify surely holds no NUL and no unpaired surrogate. */
export function mayHoldBadText(json: string): boolean {
  return json.includes("\\u") && BAD_ESCAPE.test(json);
}

/**
 * Refuses payloads that JSON would silently change (Map, Set, Date, class
 * instances, undefined in arrays, NaN, bigint…) or Postgres cannot store
 * (NUL, unpaired surrogates), naming the path such as `payload.items[1]`.
 */
export function checkJson(payload: unknown, where: string): void {
  try {
    walk(payload, [], where);
  } catch (err) {
    if (err instanceof KeyqError) throw err;
    // A getter or proxy that throws while being read.
    throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where} could not be read (${show(String((err as Error)?.message ?? err))}); send plain data.`, {
      field: "payload",
    });
  }
}
