/**
 * Which failures a worker may retry. One table, read by `work()` (retry with
 * backoff or give up) and by the batch (is the transaction's connection gone?).
 *
 * - "connection": the session or the server went away; the batch's
 *   transaction is lost and a later attempt, on a new connection, may work.
 * - "transient": the server refused for now (too many connections, a
 *   serialization failure or deadlock, a lock or statement timeout); the
 *   connection may be fine.
 * - "permanent": retrying cannot help (bad input, not migrated, unknown
 *   queue, kind or slot mismatch, the user ended the pool, a bug).
 *
 * @module
 */

import { KeyqError } from "./errors.ts";

/** How a failure is treated. */
export type FaultKind = "connection" | "transient" | "permanent";

// SQLSTATEs. Class 08 (connection exception) is matched by prefix.
const SQLSTATE: Record<string, FaultKind> = {
  "57P01": "connection", // admin_shutdown: pg_terminate_backend, smart/fast shutdown
  "57P02": "connection", // crash_shutdown
  "57P03": "connection", // cannot_connect_now: starting up, in recovery
  "57P05": "connection", // idle_session_timeout
  "25P03": "connection", // idle_in_transaction_session_timeout
  "53300": "transient", // too_many_connections
  "53200": "transient", // out_of_memory (shared lock table full)
  "40001": "transient", // serialization_failure
  "40P01": "transient", // deadlock_detected
  "55P03": "transient", // lock_not_available (lock_timeout)
  "57014": "transient", // query_canceled (statement_timeout)
};

// Driver and socket codes (postgres.js, Bun.SQL, Node/Deno/Bun sockets).
const DRIVER: Record<string, FaultKind> = {
  CONNECTION_CLOSED: "connection", // postgres.js: the server or network closed it
  CONNECTION_DESTROYED: "connection", // postgres.js: terminated while a query was pending
  CONNECT_TIMEOUT: "connection",
  CONNECTION_ENDED: "permanent", // postgres.js: the user called sql.end()
  ERR_POSTGRES_CONNECTION_CLOSED: "connection", // Bun.SQL
  ERR_POSTGRES_CONNECTION_REFUSED: "connection", // Bun.SQL: "Failed to connect" while the server is down
  ERR_POSTGRES_CONNECTION_TIMEOUT: "connection",
  ERR_POSTGRES_IDLE_TIMEOUT: "connection",
  ERR_POSTGRES_LIFETIME_TIMEOUT: "connection",
  ECONNREFUSED: "connection",
  ECONNRESET: "connection",
  ECONNABORTED: "connection",
  EPIPE: "connection",
  ETIMEDOUT: "connection",
  EHOSTUNREACH: "connection",
  ENETUNREACH: "connection",
  EAI_AGAIN: "connection",
};

// Drivers that say it only in words (pg, Neon's WebSocket pool).
const MESSAGES: [RegExp, FaultKind][] = [
  [/Client was closed and is not queryable|Cannot use a pool after calling end/i, "permanent"],
  [/Connection terminated|connection error and is not queryable|timeout exceeded when trying to connect/i, "connection"],
  [/terminating connection|the database system is (starting up|shutting down|in recovery mode)/i, "connection"],
  [/socket hang up|WebSocket (was )?closed|Connection (closed|ended) unexpectedly/i, "connection"],
];

/** The kind a driver code or SQLSTATE says; undefined for a code of no known kind. */
function codeKind(code: unknown): FaultKind | undefined {
  if (typeof code !== "string") return undefined;
  if (code in DRIVER) return DRIVER[code]!;
  if (code in SQLSTATE) return SQLSTATE[code]!;
  if (/^08[0-9A-Z]{3}$/.test(code)) return "connection";
  return undefined;
}

/**
 * True when the error's own `code` says its connection is gone (a driver or
 * socket code, a shutdown or idle-timeout SQLSTATE, class 08): the one list
 * the driver adapters check (postgres.js stops a transaction's queries on
 * it). Messages and causes are `classify`'s business.
 *
 * @example
 * ```ts
 * import { connectionLost } from "./faults.ts";
 * console.log(connectionLost({ code: "57P01" })); // true: pg_terminate_backend
 * console.log(connectionLost({ code: "23505" })); // false: a unique violation
 * ```
 */
export function connectionLost(err: unknown): boolean {
  return codeKind((err as { code?: unknown } | null)?.code) === "connection";
}

/**
 * Classifies an error: "connection", "transient" or "permanent". A
 * `KeyqError` is permanent except `BAD_REPLY` (a reply from a confused
 * connection) and `BATCH_ABORTED` (a lost connection or a deadline). Causes
 * are followed, so a wrapped driver error counts as itself.
 */
export function classify(err: unknown, depth = 0): FaultKind {
  if (err instanceof KeyqError) {
    if (err.code === "BAD_REPLY") return "connection";
    if (err.code === "BATCH_ABORTED") return err.details.reason === "connection" ? "connection" : "transient";
    return "permanent";
  }
  const e = err as { code?: unknown; errno?: unknown; bunCode?: unknown; message?: unknown; cause?: unknown } | null;
  if (!e || typeof e !== "object") return "permanent";
  for (const code of [e.code, e.bunCode, e.errno]) {
    const kind = codeKind(code);
    if (kind) return kind;
  }
  const message = typeof e.message === "string" ? e.message : "";
  for (const [re, kind] of MESSAGES) if (re.test(message)) return kind;
  if (e.cause !== undefined && e.cause !== err && depth < 4) return classify(e.cause, depth + 1);
  return "permanent";
}

/** Retry delays of `work()`: `baseMs` doubling per attempt up to `capMs`. */
export interface Backoff {
  baseMs: number;
  capMs: number;
}

/**
 * The wait before retry `attempt` (1, 2, …): exponential, capped, with
 * "equal jitter" (half fixed, half random), so workers restarted together
 * spread out but never hammer the server with near-zero waits.
 */
export function backoffMs(attempt: number, b: Backoff, random: () => number = Math.random): number {
  const ceiling = Math.min(b.capMs, b.baseMs * 2 ** Math.min(attempt - 1, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
