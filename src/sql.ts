/**
 * Calls engine functions with named, cast parameters and parses their JSON
 * result. The schema is a validated identifier; every value is a bind
 * parameter.
 *
 * @module
 */

import type { Executor, SqlParam } from "./driver.ts";
import { fromDatabaseError, KeyqError } from "./errors.ts";

/** One named argument: name, SQL type, value. */
export type Arg = readonly [name: string, type: string, value: unknown];

/** Converts a value to the text form the driver contract carries. */
export function param(value: unknown): SqlParam {
  if (value === null || value === undefined) return null;
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  return JSON.stringify(value);
}

/**
 * Builds `select "schema".fn(a => $1::text::t, …)::text as r`. Every parameter
 * is typed `text` first so no driver serialises by an inferred type
 * (postgres.js would JSON-encode a jsonb string twice, and send `'f'` for bool).
 */
export function callText(schema: string, fn: string, args: readonly Arg[]): string {
  const list = args.map(([name, type], i) => `${name} => $${i + 1}::text::${type}`).join(", ");
  return `select "${schema}".${fn}(${list})::text as r`;
}

/** Runs an engine function on `exec` and returns its parsed JSON result. */
export async function call<T>(exec: Executor, schema: string, fn: string, args: readonly Arg[] = []): Promise<T> {
  let rows;
  try {
    rows = await exec.query(callText(schema, fn, args), args.map((a) => param(a[2])));
  } catch (err) {
    throw mapError(err, schema);
  }
  const text = rows[0]?.r;
  return (typeof text === "string" ? JSON.parse(text) : text) as T;
}

/** Maps engine errors to KeyqError, and a missing schema or function to NOT_MIGRATED. */
export function mapError(err: unknown, schema: string): unknown {
  const mapped = fromDatabaseError(err);
  if (mapped !== err) return mapped;
  // Only a missing top-level object means "not migrated"; the same codes from
  // inside an engine function (a `where` context) are bugs and pass through.
  const e = err as { code?: unknown; message?: unknown; where?: unknown } | null;
  const topLevel = !e?.where;
  if (e && topLevel && (e.code === "3F000" || e.code === "42883") && String(e.message).includes(schema)) {
    return new KeyqError(
      "NOT_MIGRATED",
      `The keyq schema "${schema}" is missing or out of date (${String(e.message)}); call migrate() first.`,
      { schema },
    );
  }
  return err;
}
