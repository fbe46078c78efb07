/**
 * What `{ tx }` accepts: keyq's own executor (the `tx` of
 * `q.transaction`, or of a handler), or a native transaction object
 * the client's driver adapter recognises (`Driver.adopt`: the `tx` of a
 * postgres.js `sql.begin`, a `pg` client inside BEGIN). Anything else is
 * refused before a query runs: an event written outside the caller's
 * transaction would break the outbox pattern silently.
 *
 * ORM transactions are recognised by shape (no ORM is imported): Drizzle's
 * `tx` (its driver's transaction, `tx.session.client`), Kysely's `trx`
 * (`executeQuery` of a raw compiled query), Prisma's interactive `tx`
 * (`$queryRawUnsafe`) and Knex's `trx` (`raw`, with `?` placeholders). Their
 * database objects outside a transaction (a Drizzle `db`, a `Kysely`, a
 * `PrismaClient`, a `knex`) are refused like a pool.
 *
 * @module
 */

import type { Driver, Executor, Row, SqlParam } from "../driver.ts";
import { KeyqError } from "../errors.ts";
import { show } from "../text.ts";

const HOW = "pass the transaction itself: keyq's (q.transaction(async (tx) => …)), your driver's " +
  "(postgres.js sql.begin(async (tx) => …), a pg client after BEGIN) or your ORM's (the tx of Drizzle's db.transaction, " +
  "Kysely's db.transaction().execute, Prisma's $transaction(async (tx) => …), Knex's knex.transaction)";

type Obj = Record<string, unknown>;
const fn = (o: unknown, k: string): boolean => typeof (o as Obj | null)?.[k] === "function";
const refuse = (why: string): never => {
  throw new KeyqError("INVALID_INPUT", `Option "tx" ${why}; ${HOW}.`, { field: "tx" });
};

/** A driver's native transaction object that no adapter claimed: postgres.js-like (`unsafe`) or pg-like (`query`). */
function nativeExecutor(c: unknown): Executor | undefined {
  if (fn(c, "unsafe")) {
    const u = c as { unsafe(text: string, params?: unknown[]): PromiseLike<Iterable<Row>> };
    return { query: async (text, params) => [...(await u.unsafe(text, [...(params ?? [])]))] };
  }
  if (fn(c, "query")) {
    const q = c as { query(text: string, params?: unknown[]): PromiseLike<{ rows?: Row[] } | Row[]> };
    return {
      async query(text, params) {
        const r = await q.query(text, params ? [...params] : undefined);
        return Array.isArray(r) ? r : r.rows ?? [];
      },
    };
  }
  return undefined;
}

let kyselyQueries = 0;

/**
 * An ORM's transaction as an Executor, recognised by shape; undefined for
 * anything else. Refuses an ORM's database object outside a transaction.
 */
function ormExecutor(driver: Driver, tx: unknown): Executor | undefined {
  if ((typeof tx !== "object" && typeof tx !== "function") || tx === null) return undefined;
  const t = tx as Obj;
  // Kysely: `db.transaction().execute(async (trx) => …)`; trx.isTransaction is true.
  if (fn(t, "executeQuery") && typeof t.isTransaction === "boolean") {
    if (!t.isTransaction) refuse("is a Kysely instance, not a transaction: pass the trx of db.transaction().execute(async (trx) => …)");
    const k = t as { executeQuery(q: unknown): Promise<{ rows: Row[] }> };
    return {
      async query(text, params) {
        const query = { kind: "RawNode", sqlFragments: [text], parameters: [] };
        return (await k.executeQuery({ sql: text, query, parameters: [...(params ?? [])], queryId: { queryId: `keyq-${++kyselyQueries}` } })).rows;
      },
    };
  }
  // Knex: `knex.transaction(async (trx) => …)`; trx is a function with isTransaction true.
  if (typeof tx === "function" && fn(t, "raw") && fn(t, "transaction") && "client" in t) {
    if (t.isTransaction !== true) refuse("is a knex instance, not a transaction: pass the trx of knex.transaction(async (trx) => …)");
    const raw = (t as { raw(text: string, bindings: unknown[]): PromiseLike<{ rows?: Row[] }> }).raw.bind(t);
    return {
      async query(text, params) {
        // Knex binds "?" placeholders; keyq's statements use $1…$n and no "?".
        const bindings: SqlParam[] = [];
        const sql = text.replace(/\$(\d+)/g, (_, n: string) => (bindings.push(params?.[Number(n) - 1] ?? null), "?"));
        return (await raw(sql, bindings)).rows ?? [];
      },
    };
  }
  // Prisma: `prisma.$transaction(async (tx) => …)`; the tx client hides $connect and $disconnect.
  if (fn(t, "$queryRawUnsafe")) {
    if (fn(t, "$connect") || fn(t, "$disconnect")) {
      refuse("is a PrismaClient, not a transaction: pass the tx of prisma.$transaction(async (tx) => …) (an interactive transaction)");
    }
    const p = t as { $queryRawUnsafe(text: string, ...params: unknown[]): Promise<Row[]> };
    return { query: (text, params) => p.$queryRawUnsafe(text, ...(params ?? [])) };
  }
  // Drizzle: `db.transaction(async (tx) => …)`; tx.session.client is its driver's transaction.
  const session = t.session as Obj | undefined;
  if (fn(t, "execute") && typeof session === "object" && session !== null && "client" in session && "dialect" in t) {
    if (!fn(t, "rollback")) refuse("is a Drizzle database, not a transaction: pass the tx of db.transaction(async (tx) => …)");
    const native = session.client;
    const exec = driver.adopt?.(native) ?? nativeExecutor(native);
    if (!exec) refuse("is a Drizzle transaction over a driver keyq cannot reach (its session has no client with query or unsafe)");
    return exec;
  }
  return undefined;
}

/** Why `tx` is no transaction keyq can join, judged by its shape only. */
function problem(tx: unknown): string | undefined {
  if (tx === null || (typeof tx !== "object" && typeof tx !== "function")) return `is ${show(tx)}, not a transaction`;
  const t = tx as Record<string, unknown>;
  const has = (k: string) => typeof t[k] === "function";
  if (has("connect") && "totalCount" in t) return "is a connection pool: its queries run in autocommit, outside your transaction";
  if (has("begin")) return "is a database client, not a transaction: its queries run in autocommit";
  if (has("transaction")) return "is a driver or database instance, not a transaction";
  // Native objects whose transaction state the adapter could not confirm (a pg
  // client of another driver, an older pg or Neon Client without getTransactionStatus).
  if (has("unsafe") || has("getTransactionStatus") || has("exec") || has("connect") || has("escapeLiteral")) {
    return "is a native driver object this client's driver adapter does not recognise as an open transaction";
  }
  if (!has("query")) return "has no query(text, params) function";
  return undefined;
}

/** The executor for `{ tx }`, or a KeyqError INVALID_INPUT saying what to pass instead. */
export function txExecutor(driver: Driver, tx: unknown): Executor {
  const adopted = driver.adopt?.(tx);
  if (adopted) return adopted;
  const orm = ormExecutor(driver, tx);
  if (orm) return orm;
  const why = problem(tx);
  if (why) throw new KeyqError("INVALID_INPUT", `Option "tx" ${why}; ${HOW}.`, { field: "tx" });
  return tx as Executor;
}
