/**
 * Your ORM on a batch's transaction: a handler's `tx` is keyq's executor
 * (`query(text, params)`), and these helpers hand it to Kysely or Drizzle so
 * the handler's ORM writes commit or roll back with the batch (and with the
 * event's savepoint when it fails). No ORM is imported: you pass in what
 * keyq needs from yours.
 *
 * @module
 */

import { type Executor, ORM_STATEMENT, type Row, type SqlParam } from "../driver.ts";

/** The Kysely classes `kyselyDialect` needs: pass `import * as kysely from "kysely"`. */
export interface KyselyPostgresParts<A, I, C> {
  /** Kysely's `PostgresAdapter`. */
  PostgresAdapter: new () => A;
  /** Kysely's `PostgresIntrospector`. */
  PostgresIntrospector: new (db: never) => I;
  /** Kysely's `PostgresQueryCompiler`. */
  PostgresQueryCompiler: new () => C;
}

/** A Kysely `DatabaseConnection` (structural). */
export interface KyselyConnectionLike {
  /** Runs a compiled query on keyq's transaction. */
  executeQuery(q: { sql: string; parameters: readonly unknown[] }): Promise<{ rows: never[] }>;
  /** Not supported: throws. */
  streamQuery(): never;
}

/** A Kysely `Driver` whose one connection is keyq's transaction (structural). */
export interface KyselyDriverLike {
  /** Nothing to set up. */
  init(): Promise<void>;
  /** The one connection: keyq's transaction. */
  acquireConnection(): Promise<KyselyConnectionLike>;
  /** Refused: keyq owns the transaction. */
  beginTransaction(): Promise<void>;
  /** Refused: keyq owns the transaction. */
  commitTransaction(): Promise<void>;
  /** Refused: keyq owns the transaction. */
  rollbackTransaction(): Promise<void>;
  /** Nothing to release. */
  releaseConnection(): Promise<void>;
  /** Nothing to close. */
  destroy(): Promise<void>;
}

/** A Kysely `Dialect` (structural: Kysely's own interface is not imported). */
export interface KyselyDialectLike<A, I, C> {
  /** Kysely's Postgres adapter. */
  createAdapter(): A;
  /** A driver whose one connection is keyq's transaction. */
  createDriver(): KyselyDriverLike;
  /** Kysely's Postgres introspector. */
  createIntrospector(db: never): I;
  /** Kysely's Postgres query compiler. */
  createQueryCompiler(): C;
}

/**
 * A Kysely dialect whose only connection is keyq's transaction `tx` (the
 * `tx` of a handler, or of `q.transaction`). Kysely's own
 * `db.transaction()` is refused on it: the batch owns the transaction.
 *
 * @example
 * ```ts ignore
 * import * as kysely from "kysely";
 * import { kyselyDialect } from "keyq";
 * await consumer.run({
 *   handler: async (ev, tx) => {
 *     const db = new kysely.Kysely<DB>({ dialect: kyselyDialect(tx, kysely) });
 *     await db.insertInto("audit").values({ path: ev.payload.path }).execute();
 *   },
 * });
 * ```
 */
export function kyselyDialect<A, I, C>(tx: Executor, kysely: KyselyPostgresParts<A, I, C>): KyselyDialectLike<A, I, C> {
  const connection: KyselyConnectionLike = {
    async executeQuery(q) {
      return { rows: (await tx.query(ORM_STATEMENT + q.sql, q.parameters as readonly SqlParam[])) as Row[] as never[] };
    },
    streamQuery(): never {
      throw new Error("keyq's kyselyDialect does not stream; use execute()");
    },
  };
  const refuse = (): Promise<never> => {
    throw new Error("kyselyDialect runs on keyq's batch transaction: keyq begins and commits it, so Kysely's db.transaction() is not available there.");
  };
  const driver: KyselyDriverLike = {
    init: async () => {},
    acquireConnection: () => Promise.resolve(connection),
    beginTransaction: refuse,
    commitTransaction: refuse,
    rollbackTransaction: refuse,
    releaseConnection: async () => {},
    destroy: async () => {},
  };
  return {
    createAdapter: () => new kysely.PostgresAdapter(),
    createDriver: () => driver,
    createIntrospector: (db) => new kysely.PostgresIntrospector(db),
    createQueryCompiler: () => new kysely.PostgresQueryCompiler(),
  };
}

/** The callback `drizzle()` of `drizzle-orm/pg-proxy` takes. */
export type DrizzleProxyCallback = (sql: string, params: unknown[], method: "all" | "execute") => Promise<{ rows: unknown[] }>;

/**
 * A `drizzle-orm/pg-proxy` callback running on keyq's transaction `tx`:
 * `drizzle(drizzleProxy(tx), { schema })`. Drizzle's typed selects read rows
 * as arrays, made here from each row's columns in order; keyq's executor
 * returns rows keyed by column name, so a select whose list repeats a
 * column name (a join of two tables' `id`) is refused with an error rather
 * than read misaligned: select such columns with `sql<T>\`…\`.as("name")`.
 *
 * @example
 * ```ts ignore
 * import { drizzle } from "drizzle-orm/pg-proxy";
 * import { drizzleProxy } from "keyq";
 * await consumer.run({
 *   handler: async (ev, tx) => {
 *     const db = drizzle(drizzleProxy(tx));
 *     await db.insert(audit).values({ path: ev.payload.path });
 *   },
 * });
 * ```
 */
export function drizzleProxy(tx: Executor): DrizzleProxyCallback {
  return async (sql, params, method) => {
    if (method === "all") {
      const twice = repeatedColumn(sql);
      if (twice) {
        throw new Error(
          `drizzleProxy: this select returns two columns named "${twice}", which rows keyed by name cannot tell apart; select one of them with sql\`…\`.as("another_name").`,
        );
      }
    }
    const rows = await tx.query(ORM_STATEMENT + sql, params as SqlParam[]);
    return { rows: method === "all" ? rows.map((r) => Object.values(r)) : rows };
  };
}

/** The result column names of Drizzle's `select …` or `… returning …` list (top level), or undefined when it cannot tell. */
function resultNames(sql: string): string[] | undefined {
  const m = /^\s*select\s+(?:distinct\s+)?([\s\S]*?)\s+from\s/i.exec(sql) ?? /\sreturning\s+([\s\S]*)$/i.exec(sql);
  if (!m) return undefined;
  const items: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  const list = m[1]!;
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    if (c === '"') quoted = !quoted;
    else if (!quoted && c === "(") depth++;
    else if (!quoted && c === ")") depth--;
    else if (!quoted && depth === 0 && c === ",") (items.push(list.slice(start, i)), start = i + 1);
  }
  items.push(list.slice(start));
  // A column's name is its alias, or the last quoted identifier of a plain column reference.
  return items.map((it) => /"((?:[^"]|"")*)"\s*$/.exec(it.trim())?.[1] ?? it.trim());
}

/** A column name the result would carry twice, if any. */
function repeatedColumn(sql: string): string | undefined {
  const names = resultNames(sql);
  const seen = new Set<string>();
  for (const n of names ?? []) {
    if (seen.has(n)) return n;
    seen.add(n);
  }
  return undefined;
}
