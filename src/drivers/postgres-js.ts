/**
 * postgres.js adapter: `fromPostgresJs(sql)`. Typed structurally; imports nothing from `postgres`.
 * @module
 */
import type { Driver, Executor, Row, SqlParam } from "../driver.ts";

/** A pending postgres.js query; `.simple()` sends it by the simple protocol (several statements). */
export interface PostgresJsQueryLike extends PromiseLike<unknown> {
  /** Sends the query by the simple protocol. */
  simple(): PromiseLike<unknown>;
}

/** The part of a postgres.js `sql` (or transaction `tx`) the adapter uses. */
export interface PostgresJsTxLike {
  /** `sql.unsafe(text, params)`. */
  unsafe(text: string, params?: unknown[]): PostgresJsQueryLike;
  /** `sql.typed(value, oid)`: a parameter with an explicit type. */
  typed(value: string, oid: number): unknown;
}

/** A postgres.js transaction `tx`: queries plus nested savepoint scopes. */
export interface PostgresJsTransactionLike extends PostgresJsTxLike {
  /** `tx.savepoint(name, fn)`: SAVEPOINT "s<n>_<name>", ROLLBACK TO it when `fn` throws. */
  savepoint(name: string, fn: (sp: PostgresJsTxLike) => Promise<unknown>): PromiseLike<unknown>;
}

/** The part of a postgres.js `sql` instance the adapter uses. */
export interface PostgresJsLike extends PostgresJsTxLike {
  /** `sql.begin(fn)`: BEGIN … COMMIT on one connection, ROLLBACK when `fn` throws. */
  begin(fn: (tx: PostgresJsTransactionLike) => Promise<unknown>): PromiseLike<unknown>;
}

async function run(sql: PostgresJsTxLike, text: string, params?: readonly SqlParam[]): Promise<Row[]> {
  // Params go as `text` (oid 25), else postgres.js serializes by the server-inferred type
  // (JSON.stringify for `$1::jsonb`). Several statements give one result per row-returning one.
  const res = (await (params === undefined
    ? sql.unsafe(text).simple()
    : sql.unsafe(text, params.map((p) => (p === null ? null : sql.typed(p, 25)))))) as Row[] | Row[][];
  return Array.from(Array.isArray(res[0]) ? (res.at(-1) as Row[]) : (res as Row[]));
}

const wrap = (sql: PostgresJsTxLike): Executor => ({ query: (text, params) => run(sql, text, params) });

/**
 * The transaction executor. postgres.js refuses to commit a transaction in
 * which any query failed unless that query ran in one of its savepoint
 * scopes, so `savepoint` uses them. postgres.js names them "s<n>_<name>" with
 * one counter per transaction and never releases them; counting here lets
 * the adapter release each one, so a long batch does not pile up
 * subtransactions.
 */
function wrapTransaction(tx: PostgresJsTransactionLike): Executor {
  let made = 0;
  return {
    query: (text, params) => run(tx, text, params),
    async savepoint<T>(fn: (sp: Executor) => Promise<T>): Promise<T> {
      const name = `s${made++}_keyq`;
      let failed = false;
      try {
        return (await tx.savepoint("keyq", async (sp) => {
          try {
            return await fn(wrap(sp));
          } catch (err) {
            failed = true;
            throw err;
          }
        })) as T;
      } finally {
        await Promise.resolve(tx.unsafe(`release savepoint "${name}"`)).catch(() => {
          if (!failed) throw new Error(`keyq: could not release savepoint ${name}`);
        });
      }
    },
  };
}

/**
 * Wraps a postgres.js `sql` instance. `query` without params uses the simple
 * protocol, so the text may hold several statements (the rows of the last
 * statement that returns rows come back); `transaction` uses `sql.begin`.
 *
 * @example
 * ```ts
 * import postgres from "postgres";
 * import { fromPostgresJs } from "keyq/postgres-js";
 * const sql = postgres("postgres://postgres@127.0.0.1:5432/test");
 * const db = fromPostgresJs(sql);
 * console.log(await db.query("select $1::text as hi", ["hello"]));
 * await sql.end();
 * ```
 */
export function fromPostgresJs(sql: PostgresJsLike): Driver {
  return {
    name: "postgres-js",
    query: (text, params) => run(sql, text, params),
    transaction: async <T>(fn: (tx: Executor) => Promise<T>): Promise<T> =>
      (await sql.begin((tx) => fn(wrapTransaction(tx)))) as T,
  };
}
