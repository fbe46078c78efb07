/**
 * postgres.js adapter: `fromPostgresJs(sql)`. Typed structurally; imports nothing from `postgres`.
 * @module
 */
import { type Executor, ORM_STATEMENT, pairLead, type Row, type SqlParam, type TxDriver } from "../driver.ts";
import type { KeyqError } from "../errors.ts";
import { connectionLost } from "../faults.ts";
import { poolerError, wentAstray } from "./internal/shared.ts";
import { finish, reserver } from "./internal/postgres-js-reserve.ts";

/** A pending postgres.js query; `.simple()` sends it by the simple protocol (several statements). */
export interface PostgresJsQueryLike extends PromiseLike<unknown> {
  /** Sends the query by the simple protocol. */
  simple(): PromiseLike<unknown>;
}

/** The part of a postgres.js `sql` (or transaction `tx`) the adapter uses. */
export interface PostgresJsTxLike {
  /** `sql.unsafe(text, params, { prepare })`; `prepare` is ignored when the client has `prepare: false`. */
  unsafe(text: string, params?: unknown[], options?: { prepare?: boolean; onexecute?: (connection: PostgresJsConnection) => unknown }): PostgresJsQueryLike;
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
  /** `sql.reserve()` (postgres.js 3.4): one connection of the pool to itself until `release()`. */
  reserve?(): Promise<PostgresJsReservedLike>;
  /** `sql.listen(channel, fn)`: LISTEN on postgres.js's own dedicated connection. */
  listen?(channel: string, fn: (payload: string) => void): PromiseLike<{ unlisten(): PromiseLike<unknown> }>;
}

/**
 * The connection postgres.js hands a query's `onexecute` option (as its own
 * `begin()` does): it calls the connection's `onclose` when the socket closes.
 */
export interface PostgresJsConnection {
  /** Called by postgres.js when the connection's socket closes. */
  onclose?: ((err: unknown) => void) | null;
  /** Set by `sql.reserve()` while reserved; with `release` false the connection goes back to the pool by itself on its next idle ReadyForQuery. */
  reserved?: ((() => unknown) & { release?: boolean }) | null;
}

/** A reserved connection of postgres.js (`sql.reserve()`). */
export interface PostgresJsReservedLike extends PostgresJsTxLike {
  /** Hands the connection back to the pool. */
  release(): void;
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
  const res =
    (await (params === undefined
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
 * The executor of a postgres.js transaction of the caller's (`adopt`). postgres.js refuses to commit a transaction in
 * which any query failed unless that query ran in one of its savepoint
 * scopes, so `savepoint` uses them. postgres.js names them "s<n>_<name>" with
 * one counter per transaction and never releases them; counting here lets
 * the adapter release each one, so a long batch does not pile up
 * subtransactions.
 */
function wrapTransaction(tx: PostgresJsTransactionLike, st: TxState, prepare: boolean, made: { n: number } = { n: 0 }): Executor {
  return {
    signal: st.ctl.signal,
    query: (text, params) => guarded(st, tx, text, params, prepare),
    async savepoint<T>(fn: (sp: Executor) => Promise<T>): Promise<T> {
      if (st.dead) throw deadError(st.ctl.signal.reason);
      const name = `s${made.n++}_keyq`;
      try {
        return (await tx.savepoint("keyq", async (sp) => {
          try {
            // A scope nests: its own savepoints share the transaction's counter of names.
            return await fn(wrapTransaction(sp, st, prepare, made));
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
 * The first statement of a transaction on `r`, with BEGIN issued just
 * before it: postgres.js writes what is issued in one tick together, so
 * both cost one round trip. BEGIN's `onexecute` hands over the connection,
 * whose close is then heard at once (as postgres.js's own `begin()` does).
 */
function opener(r: PostgresJsReservedLike, st: TxState, heard: { closed: boolean; conn?: PostgresJsConnection }): Promise<unknown> {
  const onexecute = (c: PostgresJsConnection) => {
    heard.conn = c;
    c.onclose = (err) => {
      heard.closed = true;
      kill(st, err);
    };
    return true; // the connection takes the next query at once (pipelined)
  };
  const begin = Promise.resolve(r.unsafe("begin", [], { onexecute }).simple());
  begin.catch((err: unknown) => gone(err) && kill(st, err));
  return begin;
}

/**
 * BEGIN … COMMIT on a reserved connection, sent by the adapter: BEGIN in
 * the same write as the transaction's first statement, COMMIT (simple
 * protocol, never a prepared statement that could go astray) when `fn`
 * resolves, ROLLBACK when it throws. A COMMIT that answers ROLLBACK (the
 * transaction was aborted) is an error. A lost connection rejects at once,
 * while `fn` may still run: its further queries are refused (guarded), and
 * neither COMMIT nor ROLLBACK is written to it.
 */
async function reserved<T>(
  r: PostgresJsReservedLike,
  st: TxState,
  prepare: boolean,
  fn: (tx: Executor) => Promise<T>,
  lead?: (exec: Executor) => unknown,
): Promise<T> {
  const heard: { closed: boolean; conn?: PostgresJsConnection } = { closed: false };
  let begin: Promise<unknown> | undefined;
  let opened = false; // fn issued its first statement: BEGIN is written, no lead statement may follow
  const leads: Promise<unknown>[] = [];
  const tx: Executor = {
    signal: st.ctl.signal,
    query(text, params) {
      opened = true;
      const first = begin ??= st.dead ? undefined : opener(r, st, heard);
      const out = guarded(st, r, text, params, prepare);
      if (!first) return out;
      // The statement can fail (a killed connection) before BEGIN has answered,
      // while nothing awaits it yet: Node 26 reported that as an unhandled
      // rejection (2 of 6 runs of tests/postgres-js-handback.test.ts). The
      // chain below still hands the caller its error.
      out.catch(() => {});
      return first.then(() => out, (err: unknown) => Promise.reject(err));
    },
  };
  // The connection's own error (a kill, a restart, an idle timeout), as postgres.js's begin() rejected with it.
  const lost = new Promise<never>((_, reject) => {
    const fail = () => reject(st.ctl.signal.reason);
    if (st.ctl.signal.aborted) fail();
    else st.ctl.signal.addEventListener("abort", fail, { once: true });
  });
  lost.catch(() => {});
  let ended = false; // COMMIT was sent: no ROLLBACK after it
  let released = false;
  const release = () => {
    if (released || heard.closed) return;
    released = true;
    if (heard.conn) heard.conn.onclose = null;
    r.release();
  };
  const last = (text: "commit" | "rollback") => finish(r, heard, text, () => (released = true));
  // Statements before BEGIN, each its own autocommit transaction, written with BEGIN and fn's first statement.
  const before: Executor = {
    query(text, params) {
      if (opened) return Promise.reject(new Error("keyq: a lead statement must be issued before the transaction's first statement."));
      const out = guarded(st, r, text, params, prepare);
      leads.push(out.catch(() => {}));
      return out;
    },
  };
  try {
    if (lead) lead(before);
    const work = fn(tx);
    work.catch(() => {}); // it may settle after the connection was lost
    const out = await Promise.race([work, lost]);
    // Without BEGIN the connection goes back only once the lead's statements answered (see finish()).
    if (!begin) return (await Promise.all(leads), out);
    if (st.dead) throw st.ctl.signal.reason;
    ended = true;
    const commit = last("commit") as Promise<{ command?: string }>;
    const res = await Promise.race([commit.catch((err: unknown) => Promise.reject(gone(err) ? (kill(st, err), err) : err)), lost]);
    if (res.command !== "COMMIT") {
      throw Object.assign(new Error(`keyq: the transaction's COMMIT answered ${String(res.command)}: it was aborted and rolled back.`), { code: "25P02" });
    }
    return out;
  } catch (err) {
    if (begin && !ended && !st.dead) {
      await last("rollback").catch((e: unknown) => gone(e) && kill(st, e));
    }
    if (!begin) await Promise.race([Promise.all(leads), lost.catch(() => {})]);
    if (st.astray) throw astrayError(st.astray);
    throw err;
  } finally {
    release();
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
 * statement that returns rows come back); `transaction` runs on a
 * connection of `sql.reserve()`, its BEGIN in the same network write as its
 * first statement (one round trip for both), COMMIT and ROLLBACK sent by
 * the adapter.
 *
 * When the server ends a transaction's session (a kill, a restart, an idle
 * timeout), the transaction rejects at once with the connection error while
 * `fn` may still run (the connection's close is heard as postgres.js's own
 * `begin()` hears it). The adapter then refuses every further query of that
 * transaction, aborts the executor's `signal`, and writes neither COMMIT nor
 * ROLLBACK to the dead connection, so the process does not crash.
 *
 * Statements with parameters go as named prepared statements (one round
 * trip each once prepared on a connection, instead of two); see `run`.
 *
 * Behind a transaction-mode pooler (PgBouncer, Supavisor, a pooled serverless
 * endpoint) create the client with `prepare: false`: nothing is prepared then. With the default
 * `prepare: true`, named statements go astray there; the adapter detects it
 * (the server's 26000/42P05/08P01; BEGIN, COMMIT and ROLLBACK it sends
 * itself by the simple protocol, so they cannot) and the batch fails with `KeyqError`
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
  const named = names();
  const reserve = sql.reserve ? reserver(sql as Parameters<typeof reserver>[0]) : undefined;
  const open = async <T>(fn: (tx: Executor) => Promise<T>, lead?: (exec: Executor) => unknown): Promise<T> => {
    if (!reserve) throw new Error("keyq: postgres.js 3.4 or newer is needed (sql.reserve)");
    const st: TxState = { dead: false, ctl: new AbortController(), named };
    return await reserved(await reserve(), st, sql.options?.prepare !== false, fn, lead);
  };
  const transaction = <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => open(fn);
  return {
    name: "postgres-js",
    connections: sql.options?.max,
    // The caller's own transaction: keyq does not own its life, so a fresh state.
    adopt: (native) =>
      isTransaction(native) ? wrapTransaction(native, { dead: false, ctl: new AbortController(), named }, sql.options?.prepare !== false) : undefined,
    query: (text, params) => autocommit(sql, text, params, named),
    ...(sql.listen
      ? {
        async listen(channel: string, onNotify: (payload: string) => void) {
          const l = await sql.listen!(channel, onNotify);
          return async () => void await l.unlisten();
        },
      }
      : {}),
    transaction,
    // The lead's statements on the reserved connection, written with BEGIN and fn's first statement (one round trip).
    transactionAfter: pairLead(transaction, <T>(lead: (exec: Executor) => unknown, fn: (tx: Executor) => Promise<T>) => open(fn, lead)),
  };
}
