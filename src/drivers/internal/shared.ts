/**
 * What the driver adapters share: detecting a transaction-mode pooler from
 * the errors of named prepared statements, and the refusal that names the
 * client option to turn them off. Internal (no package entry).
 *
 * @module
 */
import { KeyqError } from "../../errors.ts";

/**
 * SQLSTATEs of a named prepared statement that went astray behind a
 * transaction-mode pooler (PgBouncer, Supavisor, a pooled serverless
 * endpoint), which hands each transaction any server connection: the name
 * is missing there (26000 invalid_sql_statement_name), taken already
 * (42P05 duplicate_prepared_statement), or another statement (08P01
 * protocol_violation, e.g. "bind message supplies 3 parameters, but
 * prepared statement "P7" requires 2", measured through PgBouncer 1.18).
 */
const ASTRAY: ReadonlySet<string> = new Set(["26000", "42P05", "08P01"]);

/**
 * True when `err` is such an error. With `strict`, a protocol violation
 * (08P01) counts only when its message names a prepared statement.
 *
 * @example
 * ```ts
 * import { wentAstray } from "./shared.ts";
 * console.log(wentAstray({ code: "42P05", message: 'prepared statement "P0" already exists' })); // true
 * console.log(wentAstray({ code: "08P01", message: "unexpected message" }, true)); // false
 * ```
 */
export function wentAstray(err: unknown, strict = false): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (!e || typeof e.code !== "string" || !ASTRAY.has(e.code)) return false;
  return !strict || e.code !== "08P01" || /prepared statement/.test(String(e.message));
}

/**
 * The `PREPARED_STATEMENTS_UNSUPPORTED` error: `client` sent a named
 * prepared statement that went astray (`cause`, or null when only its
 * effect was seen: `seen` says what), and `fix` is the client option that
 * turns them off.
 *
 * @example
 * ```ts
 * import { poolerError } from "./shared.ts";
 * const err = poolerError("postgres.js", "postgres(url, { prepare: false })", { code: "26000", message: "no such statement" });
 * console.log(err.code, err.message);
 * ```
 */
export function poolerError(client: string, fix: string, cause: unknown, seen = "", tail = ""): KeyqError {
  const e = cause as { code?: unknown; message?: unknown } | null;
  const detail = e ? `${e.code ? `${String(e.code)}: ` : ""}${String(e.message ?? seen)}` : seen;
  return new KeyqError(
    "PREPARED_STATEMENTS_UNSUPPORTED",
    `${client} sent a named prepared statement that this server connection does not have or holds as another statement (${detail}): ` +
      `a transaction-mode pooler (PgBouncer, Supavisor, a pooled serverless endpoint) is in front of Postgres. Create the client with ${fix}.${tail}`,
    { code: e?.code, prepare: true },
    cause === undefined || cause === null ? undefined : { cause },
  );
}
