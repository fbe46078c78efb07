/**
 * postgres.js adapter: `fromPostgresJs(sql)`. Typed structurally; imports nothing from `postgres`.
 * @module
 */
import { type Executor, ORM_STATEMENT, type Row, type SqlParam, type TxDriver } from "../driver.ts";
import type { KeyqError } from "../errors.ts";
import { connectionLost } from "../faults.ts";
import { poolerError, wentAstray } from "./shared.ts";

/** A pending postgres.js query; `.simple()` sends it by the simple protocol (several statements). */
export interface PostgresJsQueryLike extends PromiseLike<unknown> {
  /** Sends the query by the simple protocol. */
  simple(): PromiseLike<unknown>;
}

/** The part of a postgres.js `sql` (or transaction `tx`) the adapter uses. */
export interface PostgresJsTxLike {
  /** `sql.unsafe(text, params, { prepare })`; `prepare` is ignored when the client has `prepare: false`. */
  unsafe(text: string, params?: unknown[], options?: { prepare?: boolean }): PostgresJsQueryLike;
  /** `sql.typed(value, oid)`: a parameter with an explicit type. */
  typed(value: string, oid: number): unknown;
}

/** A postgres.js transaction `tx`: queries plus nested savepoint scopes. */
export interface PostgresJsTransactionLike extends PostgresJsTxLike {
  /** `tx.savepoint(name, fn)`: SAVEPOINT "s<n>_<name>", ROLLBACK TO it when `fn` throws. */
  savepoint(name: string, fn: (sp: PostgresJsTransactionLike) => Promise<unknown>): PromiseLike<unknown>;
}

/** The part of a postgres.js `sql` instance the adapter uses. */
export interface PostgresJsLike extends PostgresJsTxLike {
  /** `sql.begin(fn)`: BEGIN … COMMIT on one connection, ROLLBACK when `fn` throws. */
  begin(fn: (tx: PostgresJsTransactionLike) => Promise<unknown>): PromiseLike<unknown>;
  /** The parsed options; `prepare` (default true) makes postgres.js name its statements. */
  readonly options?: { readonly prepare?: boolean; readonly max?: number };
  /** `sql.listen(channel, fn)`: LISTEN on postgres.js's own dedicated connection. */
  listen?(channel: string, fn: (payload: string) => void): PromiseLike<{ unlisten(): PromiseLike<unknown> }>;
}

/** Whether a statement text may be a named prepared statement (true for the first `MAX_NAMED` texts seen). */
type Names = (text: string) => boolean;

/** Distinct statement texts a driver names: keyq's own (a few dozen) plus room for a handler's. */
const MAX_NAMED = 200;

function names(): Names {
  const named = new Set<string>();
  return (text) => named.has(text) || (named.size < MAX_NAMED && !!named.add(text));
}

/**
 * Params go as `text` (oid 25), else postgres.js serializes by the server-inferred type
 * (JSON.stringify for `$1::jsonb`); an ORM helper's statement (ORM_STATEMENT)
 * passes its values as they are, as the ORM's own postgres.js driver does. Several statements give one result per row-returning one.
 *
 * A statement with parameters is sent as a named prepared statement
 * (`prepare: true`): postgres.js sends an unnamed one as Parse/Describe/Flush,
 * waits for the parameter types, then Bind/Execute/Sync — two round trips
 * every time. A named one costs those two once per connection, then one
 * (Bind/Execute/Sync). keyq's statement texts are a small fixed set; a
 * handler's `tx.query` texts may not be (postgres.js never deallocates a
 * statement), so only the first `MAX_NAMED` distinct texts of a driver are
 * named, the rest go unnamed. A client created with `prepare: false`
 * (transaction poolers) overrides this: postgres.js then prepares nothing.
 */
async function run(sql: PostgresJsTxLike, text: string, params?: readonly SqlParam[], named?: Names): Promise<Row[]> {
  const res = (await (params === undefined
    ? sql.unsafe(text).simple()
    : sql.unsafe(text, text.startsWith(ORM_STATEMENT) ? [...params] : params.map((p) => (p === null ? null : sql.typed(p, 25))), {
      prepare: named?.(text) ?? false,
    }))) as
      | Row[]
      | Row[][];
  return Array.from(Array.isArray(res[0]) ? (res.at(-1) as Row[]) : (res as Row[]));
}

/**
 * A statement outside a transaction. postgres.js re-prepares a named
 * statement the server connection lacks (26000) by itself; a name that
 * exists already (42P05: a transaction pooler handed this client another
 * client's server connection) reaches here and becomes
 * PREPARED_STATEMENTS_UNSUPPORTED, whose message names `prepare: false`.
 */
async function autocommit(sql: PostgresJsLike, text: string, params: readonly SqlParam[] | undefined, named: Names): Promise<Row[]> {
  try {
    return await run(sql, text, params, named);
  } catch (err) {
    if (params !== undefined && sql.options?.prepare !== false && wentAstray(err, true)) throw astrayError(err);
    throw err;
  }
}

/** A connection that is gone, by the one list of codes (faults.ts). */
const gone = connectionLost;

/** A transaction's connection state, shared by its executors. */
interface TxState {
  dead: boolean;
  ctl: AbortController;
  /** The first error that shows a named prepared statement went astray. */
  astray?: unknown;
  /** The driver's choice of texts to name. */
  named: Names;
  /** A statement of the transaction's own scope failed: postgres.js will refuse to commit it. */
  failed?: boolean;
}

/**
 * With `prepare: true` postgres.js sends its own SAVEPOINT, ROLLBACK TO and
 * COMMIT as named prepared statements, prepared once per client connection.
 * A transaction-mode pooler (PgBouncer < 1.21, Supavisor, Neon's pooled
 * endpoint) hands each transaction any server connection, where the name
 * may not exist (26000) or exist already (42P05); PgBouncer may also answer
 * 08P01. postgres.js then re-prepares and retries in the aborted
 * transaction: a SAVEPOINT fails with 26000, and a COMMIT silently becomes a
 * ROLLBACK (measured: 200 events handled 2,165 times, every run "successful").
 */
function noteAstray(st: TxState, prepare: boolean, err: unknown): void {
  if (prepare && wentAstray(err)) st.astray ??= err;
}

const astrayError = (cause: unknown): KeyqError =>
  poolerError("postgres.js", "postgres(url, { prepare: false })", cause, "its COMMIT silently rolled back", " The batch was rolled back.");

/** Transactions whose COMMIT is verified while `prepare` is on (then the check stops costing a round trip). */
const PROBATION = 100;

function deadError(cause: unknown): Error {
  return Object.assign(new Error("The transaction's connection was lost; no further query is sent on it.", { cause }), {
    code: "CONNECTION_CLOSED",
  });
}

/**
 * Queries on a transaction whose connection died are refused here, never
 * handed to postgres.js: it would write them to a closed socket (a crash in
 * `nextWrite`, porsager/postgres#1154) or to the connection's next session
 * (a stale COMMIT result for the next query).
 */
async function guarded(st: TxState, sql: PostgresJsTxLike, text: string, params?: readonly SqlParam[], prepare = false): Promise<Row[]> {
  if (st.dead) throw deadError(st.ctl.signal.reason);
  try {
    return await run(sql, text, params, st.named);
  } catch (err) {
    noteAstray(st, prepare, err);
    if (gone(err) && !st.astray) kill(st, err);
    throw err;
  }
}

function kill(st: TxState, err: unknown): void {
  if (st.dead) return;
  st.dead = true;
  st.ctl.abort(err);
}

/**
 * The transaction executor. postgres.js refuses to commit a transaction in
 * which any query failed unless that query ran in one of its savepoint
 * scopes, so `savepoint` uses them. postgres.js names them "s<n>_<name>" with
 * one counter per transaction and never releases them; counting here lets
 * the adapter release each one, so a long batch does not pile up
 * subtransactions.
 */
function wrapTransaction(tx: PostgresJsTransactionLike, st: TxState, prepare: boolean, made: { n: number } = { n: 0 }, top = true): Executor {
  return {
    signal: st.ctl.signal,
    // The transaction's own scope: SAVEPOINT statements work (see transaction()).
    ...(top ? { savepointStatements: true } : {}),
    query: top
      ? (text, params) =>
        guarded(st, tx, text, params, prepare).catch((err: unknown) => {
          st.failed = true;
          throw err;
        })
      : (text, params) => guarded(st, tx, text, params, prepare),
    async savepoint<T>(fn: (sp: Executor) => Promise<T>): Promise<T> {
      if (st.dead) throw deadError(st.ctl.signal.reason);
      const name = `s${made.n++}_keyq`;
      try {
        return (await tx.savepoint("keyq", async (sp) => {
          try {
            // A scope nests: its own savepoints share the transaction's counter of names.
            return await fn(wrapTransaction(sp, st, prepare, made, false));
          } catch (err) {
            if (st.dead) await never; // no ROLLBACK TO on a dead connection
            throw err;
          }
        })) as T;
      } catch (err) {
        noteAstray(st, prepare, err); // its own SAVEPOINT statement went astray
        throw err;
      } finally {
        // Not awaited: it goes out in the same write as the transaction's next
        // statement (no round trip of its own). A failure shows there: postgres.js
        // then refuses to commit the transaction.
        if (!st.dead) {
          Promise.resolve(tx.unsafe(`release savepoint "${name}"`)).catch((err) => {
            if (gone(err)) kill(st, err);
          });
        }
      }
    },
  };
}

/**
 * COMMIT sent by the adapter, then BEGIN (in the same write), so that the
 * ROLLBACK postgres.js sends after a statement failed finds an empty
 * transaction to end. A COMMIT that answers ROLLBACK (the transaction was
 * aborted after all) is an error: nothing was committed.
 */
async function commitItself(tx: PostgresJsTxLike): Promise<void> {
  const commit = tx.unsafe("commit").simple();
  const begin = tx.unsafe("begin").simple();
  Promise.resolve(begin).catch(() => {});
  const r = (await commit) as { command?: string };
  await begin;
  if (r.command !== "COMMIT") {
    throw Object.assign(new Error(`keyq: the transaction's COMMIT answered ${String(r.command)}: it was aborted and rolled back.`), { code: "25P02" });
  }
}

/** Never settles: handed to postgres.js so it sends no COMMIT/ROLLBACK on a dead connection. */
const never: Promise<never> = new Promise<never>(() => {});

/**
 * A postgres.js transaction (or savepoint scope) has `savepoint` and no
 * `begin`; the top-level `sql` (autocommit) has `begin`, a reserved
 * connection neither.
 */
function isTransaction(x: unknown): x is PostgresJsTransactionLike {
  const t = x as Record<string, unknown> | null;
  return typeof x === "function" && typeof t!.unsafe === "function" && typeof t!.typed === "function" &&
    typeof t!.savepoint === "function" && t!.begin === undefined;
}

/**
 * Wraps a postgres.js `sql` instance. `query` without params uses the simple
 * protocol, so the text may hold several statements (the rows of the last
 * statement that returns rows come back); `transaction` uses `sql.begin`.
 *
 * When the server ends a transaction's session (a kill, a restart, an idle
 * timeout), postgres.js rejects `begin()` at once while the callback may
 * still run. The adapter then refuses every further query of that
 * transaction, aborts the executor's `signal`, and leaves postgres.js's
 * callback unsettled so it never writes COMMIT or ROLLBACK to the dead
 * connection: the transaction rejects with the connection error, and the
 * process does not crash.
 *
 * Statements with parameters go as named prepared statements (one round
 * trip each once prepared on a connection, instead of two); see `run`.
 *
 * Behind a transaction-mode pooler (PgBouncer, Supavisor, a pooled serverless
 * endpoint) create the client with `prepare: false`: nothing is prepared then. With the default
 * `prepare: true`, postgres.js's own SAVEPOINT and COMMIT statements go
 * astray there (a COMMIT can silently roll back); the adapter detects it
 * (the server's 26000/42P05/08P01, and `pg_xact_status` of the first 100
 * transactions' COMMITs) and the batch fails with `KeyqError`
 * "PREPARED_STATEMENTS_UNSUPPORTED", whose message says to pass `prepare: false`.
 *
 * @example
 * ```ts
 * import postgres from "postgres";
 * import { fromPostgresJs } from "@keyq/keyq/postgres-js";
 * const sql = postgres("postgres://postgres@127.0.0.1:5432/test");
 * const db = fromPostgresJs(sql);
 * console.log(await db.query("select $1::text as hi", ["hello"]));
 * await sql.end();
 * ```
 */
export function fromPostgresJs(sql: PostgresJsLike): TxDriver {
  let verified = 0;
  const named = names();
  return {
    name: "postgres-js",
    connections: sql.options?.max,
    // The caller's own transaction: keyq does not own its life, so a fresh state.
    adopt: (native) =>
      isTransaction(native)
        ? wrapTransaction(native, { dead: false, ctl: new AbortController(), named }, sql.options?.prepare !== false)
        : undefined,
    query: (text, params) => autocommit(sql, text, params, named),
    ...(sql.listen
      ? {
        async listen(channel: string, onNotify: (payload: string) => void) {
          const l = await sql.listen!(channel, onNotify);
          return async () => void await l.unlisten();
        },
      }
      : {}),
    async transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T> {
      const st: TxState = { dead: false, ctl: new AbortController(), named };
      const prepare = sql.options?.prepare !== false;
      const verify = prepare && verified < PROBATION;
      let xid: Promise<Row[]> | undefined;
      let out: T;
      let committed: { out: T } | undefined;
      try {
        out = (await sql.begin(async (tx) => {
          try {
            const out = await fn(wrapTransaction(tx, st, prepare));
            if (st.failed && !st.dead) {
              // A statement failed and was rolled back to a savepoint: the transaction is
              // fine, but postgres.js would roll it back, so it is committed here.
              await commitItself(tx);
              committed = { out };
              return out; // postgres.js then rolls back the empty transaction commitItself began
            }
            // Not awaited: it goes out in the same write as postgres.js's COMMIT (no round trip of its own).
            if (verify && !st.dead) {
              xid = run(tx, "select pg_current_xact_id_if_assigned()::text as x");
              xid.catch(() => {}); // observed now: it may fail before begin() settles (its error is the transaction's)
            }
            return st.dead ? await never : out;
          } catch (err) {
            if (st.dead) return await never;
            throw err;
          }
        })) as T;
      } catch (err) {
        xid?.catch(() => {}); // settles with the transaction; its error is the transaction's
        if (st.astray) throw astrayError(st.astray);
        if (committed) return committed.out;
        if (gone(err)) kill(st, err);
        throw err;
      }
      if (st.astray) throw astrayError(st.astray);
      // It failed only in an aborted transaction, whose COMMIT then rolled back without an error.
      const x = xid && (await xid.catch((err: unknown) => Promise.reject(astrayError(err))))[0]?.x;
      if (typeof x === "string") {
        // A COMMIT whose prepared statement went astray rolls back without an error: ask the server.
        const [r] = await autocommit(sql, "select pg_xact_status($1::xid8)::text as s", [x], named);
        if (r?.s === "aborted") throw astrayError(null);
        verified++;
      }
      return out;
    },
  };
}
