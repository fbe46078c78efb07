/**
 * Input checks at the public boundary. Schemas stay private (an exported
 * valibot constant is a slow type for JSR); callers get typed errors.
 *
 * @module
 */

import * as v from "valibot";
import { KeyqError } from "./errors.ts";
import type { Duration } from "./types.ts";

const encoder = new TextEncoder();
const SCHEMA_NAME = /^[a-z_][a-z0-9_]*$/;
const OBJECT_NAME = /^[A-Za-z][A-Za-z0-9_.:-]*$/;

/** Checks a schema identifier: lowercase letters, digits, `_`; at most 63 bytes. */
export function checkSchemaName(value: unknown): string {
  if (typeof value !== "string" || !SCHEMA_NAME.test(value) || encoder.encode(value).length > 63) {
    throw new KeyqError(
      "INVALID_IDENTIFIER",
      `Schema name ${show(value)} is not valid; use 1–63 lowercase letters, digits or "_", starting with a letter or "_".`,
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
  ms: 1, millisecond: 1, milliseconds: 1,
  s: 1e3, sec: 1e3, secs: 1e3, second: 1e3, seconds: 1e3,
  m: 6e4, min: 6e4, mins: 6e4, minute: 6e4, minutes: 6e4,
  h: 36e5, hour: 36e5, hours: 36e5, d: 864e5, day: 864e5, days: 864e5,
};

/** Parses a duration to milliseconds; undefined stays undefined. */
export function durationMs(field: string, value: Duration | undefined, min = 0): number | undefined {
  if (value === undefined) return undefined;
  let ms = Number.NaN;
  if (typeof value === "number") ms = value;
  else if (typeof value === "string") {
    const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*$/i.exec(value);
    if (m) ms = Number(m[1]) * (m[2] ? UNITS[m[2].toLowerCase()] ?? Number.NaN : 1);
  }
  if (!Number.isFinite(ms) || ms < min || (min === 0 && ms < 0)) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Option "${field}" is ${show(value)}; give ${min > 0 ? "a positive" : "a non-negative"} duration in milliseconds or text like "30s", "5 minutes", "1 hour".`,
      { field, value },
    );
  }
  return ms;
}

/** Parses `input` with a private schema or throws INVALID_INPUT naming the field. */
export function parse<S extends v.GenericSchema>(schema: S, input: unknown, what: string): v.InferOutput<S> {
  const result = v.safeParse(schema, input ?? {});
  if (result.success) return result.output;
  const issue = result.issues[0];
  const path = v.getDotPath(issue);
  if (issue.type === "strict_object") {
    throw new KeyqError("INVALID_INPUT", `Unknown option "${path ?? String(issue.input)}" in ${what}; remove it or check its spelling.`, {
      field: path ?? what,
    });
  }
  const where = path ? `"${path}" of ${what}` : what;
  throw new KeyqError("INVALID_INPUT", `Option ${where} is ${show(issue.input)}: ${issue.message}.`, {
    field: path ?? what,
    value: issue.input,
  });
}

/** A whole number within bounds, with a message that says so. */
export function int(min: number, max: number): v.GenericSchema<number> {
  return v.pipe(
    v.number(`expected a whole number from ${min} to ${max}`),
    v.integer(`expected a whole number from ${min} to ${max}`),
    v.minValue(min, `expected a whole number from ${min} to ${max}`),
    v.maxValue(max, `expected a whole number from ${min} to ${max}`),
  );
}

/** A duration: milliseconds or text; checked precisely by `durationMs`. */
export const duration: v.GenericSchema<Duration> = v.union(
  [v.number(), v.string()],
  "expected milliseconds or text like \"30s\"",
);

/** Serialises a payload to JSON text, refusing what JSON cannot carry. */
export function payloadJson(payload: unknown, where: string): string {
  let bad: string | undefined;
  let text: string | undefined;
  try {
    text = JSON.stringify(payload, (key, value) => {
      if (bad) return value;
      const t = typeof value;
      if (t === "bigint" || t === "function" || t === "symbol") bad = `${t} at ${key === "" ? "the top level" : `"${key}"`}`;
      else if (t === "number" && !Number.isFinite(value)) bad = `${value} at "${key}"`;
      return t === "bigint" ? null : value;
    });
  } catch (err) {
    bad = (err as Error).message;
  }
  if (bad || text === undefined) {
    throw new KeyqError(
      "INVALID_PAYLOAD",
      `The payload of ${where} is not JSON (${bad ?? "undefined"}); send plain objects, arrays, strings, finite numbers, booleans or null.`,
      { field: "payload" },
    );
  }
  return text;
}

/** A value for a message: quoted and shortened. */
export function show(value: unknown): string {
  let s: string;
  try {
    s = typeof value === "string" ? JSON.stringify(value) : typeof value === "bigint" ? `${value}n` : String(JSON.stringify(value) ?? value);
  } catch {
    s = String(value);
  }
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
