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

/** Checks the shape of a parsed engine reply; true when it is what was asked for. */
export type Shape = (value: unknown) => boolean;

/** Any JSON value but a missing one. */
const present: Shape = (x) => x !== undefined;

/** An object whose listed fields have the given `typeof`s ("array" for arrays). */
export function fields(spec: Record<string, string>): Shape {
  return (x) => {
    if (typeof x !== "object" || x === null || Array.isArray(x)) return false;
    const o = x as Record<string, unknown>;
    return Object.entries(spec).every(([k, t]) => {
      const alts = t.split("|");
      const v = o[k];
      const kind = Array.isArray(v) ? "array" : v === null ? "null" : typeof v;
      return alts.includes(kind);
    });
  };
}

/**
 * Parses the `r` column of an engine reply and checks it, so a confused
 * connection (postgres.js can hand a stale COMMIT result to the next query
 * after a connection died) is a typed error instead of a crash further on.
 */
export function reply<T>(rows: unknown, fn: string, shape: Shape = present): T {
  const row = Array.isArray(rows) ? (rows[0] as Record<string, unknown> | undefined) : undefined;
  const text = row?.r;
  let value: unknown;
  try {
    value = typeof text === "string" ? JSON.parse(text) : text;
  } catch {
    value = undefined;
  }
  if (typeof row !== "object" || row === null || !("r" in row) || !shape(value)) {
    throw new KeyqError(
      "BAD_REPLY",
      `The engine call ${fn}() got a reply that is not its own (${describeRows(rows)}); the connection is confused or was lost. The call was not applied or is rolled back; retry it.`,
      { fn },
    );
  }
  return value as T;
}

function describeRows(rows: unknown): string {
  if (!Array.isArray(rows)) return `not rows but ${typeof rows}`;
  if (rows.length === 0) return "no rows";
  const row = rows[0];
  return typeof row === "object" && row !== null ? `a row with columns ${Object.keys(row).join(", ") || "none"}` : `a ${typeof row}`;
}

/** Runs an engine function on `exec` and returns its parsed JSON result, checked by `shape`. */
export async function call<T>(exec: Executor, schema: string, fn: string, args: readonly Arg[] = [], shape?: Shape): Promise<T> {
  let rows;
  try {
    rows = await exec.query(callText(schema, fn, args), args.map((a) => param(a[2])));
  } catch (err) {
    throw mapError(err, schema);
  }
  return reply<T>(rows, fn, shape);
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
