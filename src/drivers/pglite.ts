/**
 * PGlite adapter: `fromPGlite(db)`. Typed structurally; this module imports
 * nothing from `@electric-sql/pglite`.
 *
 * @module
 */
import type { Executor, Row, SqlParam, TxDriver } from "../driver.ts";

/** The part of a PGlite instance (or transaction) the adapter uses. */
export interface PGliteTxLike {
  /** `db.query(text, params)`: one statement with bind parameters. */
  query(text: string, params?: SqlParam[]): Promise<{ rows: Row[] }>;
  /** `db.exec(text)`: several statements, one result each. */
  exec(text: string): Promise<{ rows: Row[] }[]>;
}

/** The part of a `PGlite` instance the adapter uses. */
export interface PGliteLike extends PGliteTxLike {
  /** `db.transaction(fn)`: BEGIN … COMMIT, ROLLBACK when `fn` throws. */
  transaction<T>(fn: (tx: PGliteTxLike) => Promise<T>): Promise<T>;
  /** `db.listen(channel, fn)`: resolves to the function that unlistens. */
  listen?(channel: string, fn: (payload: string) => void): Promise<() => Promise<void>>;
}

async function run(db: PGliteTxLike, text: string, params?: readonly SqlParam[]): Promise<Row[]> {
  if (params !== undefined) return (await db.query(text, [...params])).rows;
  return (await db.exec(text)).at(-1)?.rows ?? []; // several statements: the last one's rows
}

/**
 * Wraps a PGlite instance (Postgres in WebAssembly, one connection). `query`
 * without params may hold several statements; `transaction` uses
 * `db.transaction`, which PGlite runs one at a time.
 *
 * @example
 * ```ts
 * import { PGlite } from "@electric-sql/pglite";
 * import { fromPGlite } from "@keyq/keyq/pglite";
 * const pg = new PGlite();
 * const db = fromPGlite(pg);
 * console.log(await db.query("select $1::text as hi", ["hello"]));
 * await pg.close();
 * ```
 */
export function fromPGlite(db: PGliteLike): TxDriver {
  return {
    name: "pglite",
    connections: 1,
    query: (text, params) => run(db, text, params),
    ...(db.listen ? { listen: (channel: string, fn: (payload: string) => void) => db.listen!(channel, fn) } : {}),
    transaction: <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => db.transaction((tx) => fn({ query: (text, params) => run(tx, text, params) })),
    // The `tx` of db.transaction has query, exec and rollback; the instance has `transaction`.
    adopt: (native) => {
      const t = native as Record<string, unknown> | null;
      return t && typeof t === "object" && typeof t.query === "function" && typeof t.exec === "function" &&
          typeof t.rollback === "function" && t.transaction === undefined
        ? { query: (text, params) => run(native as PGliteTxLike, text, params) }
        : undefined;
    },
  };
}
