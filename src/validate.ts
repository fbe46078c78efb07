/**
 * Input checks at the public boundary. Schemas stay private (an exported
 * valibot constant is a slow type for JSR); callers get typed errors that
 * name the field, show the value as given and say what to do.
 *
 * @module
 */

import * as v from "valibot";
import { KeyqError } from "./errors.ts";
import { show, textProblem } from "./text.ts";
import type { Duration } from "./types.ts";

export { checkText, show } from "./text.ts";

const encoder = new TextEncoder();
const SCHEMA_NAME = /^[a-z_][a-z0-9_]*$/;
/** What a queue, consumer or lock scope name looks like (checked with its byte length, at most 63). */
export const OBJECT_NAME: RegExp = /^[A-Za-z][A-Za-z0-9_.:-]*$/;

/** Longest duration keyq stores as an interval or timestamp offset: 100 years. */
export const MAX_INTERVAL_MS: number = 36_525 * 86_400_000;
/** Longest timeout Postgres (int4 milliseconds) and `setTimeout` accept: about 24.8 days. */
export const MAX_TIMEOUT_MS: number = 2_147_483_647;

/** Checks a schema identifier: lowercase letters, digits, `_`; at most 63 bytes; not `pg_…`. */
export function checkSchemaName(value: unknown): string {
  if (typeof value !== "string" || !SCHEMA_NAME.test(value) || encoder.encode(value).length > 63 || value.startsWith("pg_")) {
    throw new KeyqError(
      "INVALID_IDENTIFIER",
      `Schema name ${show(value)} is not valid; use 1–63 lowercase letters, digits or "_", starting with a letter or "_" (not "pg_", which Postgres reserves).`,
      { field: "schema", value },
    );
  }
  return value;
}

/** Checks a queue or consumer name: a letter, then letters, digits, `_ . : -`; at most 63 bytes. */
export function checkName(kind: "queue" | "consumer", value: unknown): string {
  if (typeof value !== "string" || !OBJECT_NAME.test(value) || encoder.encode(value).length > 63) {
    throw new KeyqError(
      "INVALID_IDENTIFIER",
      `The ${kind} name ${show(value)} is not valid; use 1–63 bytes of letters, digits, "_", ".", ":" or "-", starting with a letter.`,
      { field: kind, value },
    );
  }
  return value;
}

const UNITS: Record<string, number> = {
  ms: 1,
  millisecond: 1,
  milliseconds: 1,
  s: 1e3,
  sec: 1e3,
  secs: 1e3,
  second: 1e3,
  seconds: 1e3,
  m: 6e4,
  min: 6e4,
  mins: 6e4,
  minute: 6e4,
  minutes: 6e4,
  h: 36e5,
  hour: 36e5,
  hours: 36e5,
  d: 864e5,
  day: 864e5,
  days: 864e5,
};

function rangeText(ms: number): string {
  return ms === MAX_TIMEOUT_MS ? "2147483647 ms (about 24.8 days)" : ms === MAX_INTERVAL_MS ? "100 years" : `${ms} ms`;
}

/**
 * Parses a duration to milliseconds; undefined stays undefined. `min` > 0
 * asks for a positive duration; `max` bounds it to what the engine stores.
 */
export function durationMs(field: string, value: Duration | undefined, min: number = 0, max: number = MAX_INTERVAL_MS): number | undefined {
  if (value === undefined) return undefined;
  let ms = Number.NaN;
  if (typeof value === "number") ms = value;
  else if (typeof value === "string") {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*$/i.exec(value);
    if (m) ms = Number(m[1]) * (m[2] ? UNITS[m[2].toLowerCase()] ?? Number.NaN : 1);
  }
  if (!Number.isFinite(ms) || ms < min || (min === 0 && ms < 0) || ms > max || (min > 0 && ms === 0)) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Option "${field}" is ${show(value)}; give ${min > 0 ? "a positive" : "a non-negative"} duration of at most ${rangeText(max)}, ` +
        `in milliseconds or as text like "30s", "5 minutes", "1 hour".`,
      { field, value },
    );
  }
  return ms;
}

/** Checks an id: a bigint as a decimal string within Postgres' int8 range. */
export function checkId(field: string, value: unknown, what: string): string {
  if (typeof value !== "string" || !/^\d{1,19}$/.test(value) || BigInt(value) > 9_223_372_036_854_775_807n) {
    throw new KeyqError("INVALID_INPUT", `${what} takes ids as decimal strings such as "42" (at most 9223372036854775807), not ${show(value)}.`, {
      field,
      value,
    });
  }
  return value;
}

type SchemaNode = { entries?: Record<string, unknown>; wrapped?: unknown; message?: unknown; pipe?: unknown[] };

function unwrap(s: unknown): SchemaNode | undefined {
  let node = s as SchemaNode | undefined;
  while (node && node.wrapped) node = node.wrapped as SchemaNode;
  return node;
}

/** The schema node at `path` (object entries only). */
function nodeAt(schema: unknown, path: readonly string[]): SchemaNode | undefined {
  let node = unwrap(schema);
  for (const key of path) node = unwrap(node?.entries?.[key]);
  return node;
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}

/**
 * The valid option closest to `name` (case-insensitive edit distance), when
 * it is close enough to be a plausible typo.
 */
export function closest(name: string, valid: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of valid) {
    const d = distance(name.toLowerCase(), k.toLowerCase());
    if (d < bestD) [best, bestD] = [k, d];
  }
  // With one valid option ({ transaction } for { tx }) it is the only candidate.
  return valid.length === 1 || bestD <= Math.max(2, Math.ceil(name.length / 2)) ? best : undefined;
}

function unknownKey(issue: v.BaseIssue<unknown>, schema: unknown, what: string): KeyqError {
  const keys = (issue.path ?? []).map((p) => String(p.key));
  const name = keys.pop()!;
  const where = keys.length ? `"${keys.join(".")}" of ${what}` : what;
  const valid = Object.keys(nodeAt(schema, keys)?.entries ?? {});
  const best = closest(name, valid);
  const list = valid.length ? ` Valid options: ${valid.join(", ")}.` : "";
  const hint = best ? `did you mean "${best}"?${list}` : `remove it or check its spelling.${list}`;
  return new KeyqError("INVALID_INPUT", `Unknown option ${show(name)} in ${where}; ${hint}`, {
    field: [...keys, name].join("."),
    option: name,
    suggestion: best,
  });
}

function expectation(node: SchemaNode | undefined): string {
  const m = node?.message ?? (node?.pipe?.[1] as SchemaNode | undefined)?.message;
  return typeof m === "string" ? ` (${m})` : "";
}

/** Parses `input` with a private schema or throws INVALID_INPUT naming the field. */
export function parse<S extends v.GenericSchema>(schema: S, input: unknown, what: string): v.InferOutput<S> {
  const result = v.safeParse(schema, input ?? {});
  if (result.success) return result.output;
  // A typo shows up as an unknown key plus, often, a missing one: name the typo.
  const issue = result.issues.find((i) => i.type === "strict_object" && i.expected === "never") ?? result.issues[0];
  const path = v.getDotPath(issue);
  if (issue.type === "strict_object" && issue.expected === "never") throw unknownKey(issue, schema, what);
  if (path && issue.received === "undefined" && issue.message.startsWith("Invalid key")) {
    const node = nodeAt(schema, path.split("."));
    throw new KeyqError("INVALID_INPUT", `Option "${path}" is missing from ${what}; add it${expectation(node)}.`, { field: path, missing: true });
  }
  if (!path && (typeof input !== "object" || Array.isArray(input))) {
    throw new KeyqError("INVALID_INPUT", `Expected ${what} as an object, not ${show(input)}.`, { field: what, value: input });
  }
  const where = path ? `"${path}" of ${what}` : what;
  throw new KeyqError("INVALID_INPUT", `Option ${where} is ${show(issue.input)}: ${issue.message}.`, {
    field: path ?? what,
    value: issue.input,
  });
}

/** A whole number within bounds, with a message that says so. */
export function int(min: number, max: number): v.GenericSchema<number> {
  const msg = `expected a whole number from ${min} to ${max}`;
  return v.pipe(v.number(msg), v.integer(msg), v.minValue(min, msg), v.maxValue(max, msg));
}

/** A duration: milliseconds or text; checked precisely by `durationMs`. */
export const duration: v.GenericSchema<Duration> = v.union(
  [v.number(), v.string()],
  'expected milliseconds or text like "30s"',
);

/** Text Postgres can store: a string without NUL or unpaired surrogates. */
export function text(field: string, min: number, max: number): v.GenericSchema<string> {
  const msg = `expected a string of ${min}–${max} characters`;
  return v.pipe(
    v.string(msg),
    v.minLength(min, msg),
    v.maxLength(max, msg),
    v.rawCheck(({ dataset, addIssue }) => {
      const problem = typeof dataset.value === "string" ? textProblem(dataset.value) : undefined;
      if (problem) addIssue({ message: `${field} ${problem}; remove it or encode the value (e.g. base64)` });
    }),
  );
}
