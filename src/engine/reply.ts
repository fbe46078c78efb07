/**
 * Wire helpers of engine calls: checking a reply's shape, and mapping
 * driver errors (the calls are declared in declarations.ts, bound in calls.ts).
 *
 * @module
 */

import { fromDatabaseError, KeyqError } from "../errors.ts";

/** Checks the shape of a parsed engine reply; true when it is what was asked for. */
export type Shape = (value: unknown) => boolean;

/**
 * An object whose listed fields have the given `typeof`s ("array" for
 * arrays, "null", "undefined" for a missing field; alternatives with `|`).
 *
 * @example
 * ```ts
 * const sent = fields({ id: "string", deduped: "boolean" });
 * sent({ id: "1", deduped: false }); // true
 * ```
 */
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
 * An array every element of which passes `item`.
 *
 * @example
 * ```ts
 * const ids = listOf((x) => typeof x === "string");
 * ids(["1", "2"]); // true
 * ```
 */
export function listOf(item: Shape): Shape {
  return (x) => Array.isArray(x) && x.every(item);
}

/**
 * Parses the `r` column of an engine reply (one JSON document unless the
 * call has its own `parse`; every row's, in order, for a set-returning
 * call's `lines`) and checks it, so a confused
 * connection (postgres.js can hand a stale COMMIT result to the next query
 * after a connection died) is a typed error instead of a crash further on.
 */
export function reply<T>(rows: unknown, fn: string, shape: Shape, parse: (text: string) => unknown = JSON.parse, lines?: (texts: string[]) => unknown): T {
  const row = Array.isArray(rows) ? (rows[0] as Record<string, unknown> | undefined) : undefined;
  const text = row?.r;
  let value: unknown;
  try {
    if (lines) {
      const all = texts(rows);
      value = all === undefined ? undefined : lines(all);
    } else {
      value = typeof text === "string" ? parse(text) : text;
    }
  } catch {
    value = undefined;
  }
  if (typeof row !== "object" || row === null || !("r" in row) || !shape(value)) {
    throw new KeyqError(
      "BAD_REPLY",
      `The engine call ${fn}() got a reply that is not its own (${
        describeRows(rows)
      }); the connection is confused or was lost. The call was not applied or is rolled back; retry it.`,
      { fn },
    );
  }
  return value as T;
}

/** The `r` texts of a set-returning call's rows; undefined (a bad reply) when one is not a text. */
function texts(rows: unknown): string[] | undefined {
  if (!Array.isArray(rows)) return undefined;
  const out = new Array<string>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const r = (rows[i] as Record<string, unknown> | null | undefined)?.r;
    if (typeof r !== "string") return undefined;
    out[i] = r;
  }
  return out;
}

function describeRows(rows: unknown): string {
  if (!Array.isArray(rows)) return `not rows but ${typeof rows}`;
  if (rows.length === 0) return "no rows";
  const row = rows[0];
  return typeof row === "object" && row !== null ? `a row with columns ${Object.keys(row).join(", ") || "none"}` : `a ${typeof row}`;
}

/** Maps engine errors to KeyqError, and a missing schema or function to NOT_MIGRATED (see errors.ts). */
export function mapError(err: unknown, schema: string): unknown {
  return fromDatabaseError(err, schema);
}
