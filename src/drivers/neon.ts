/**
 * `@neondatabase/serverless` adapters: the WebSocket `Pool` and `Client` (full
 * drivers) and the HTTP `neon()` function (no interactive transactions).
 * Typed structurally; this module imports nothing from the Neon package.
 *
 * @module
 */
import type { Driver, Row, SqlParam, TxDriver } from "../driver.ts";
import { fromPg, type PgClientLike, type PgPoolLike } from "./pg.ts";

/** The part of Neon's HTTP query function (`neon(url)`) the adapter uses. */
export interface NeonHttpLike {
  /** `sql.query(text, params, options)`; options force object rows. */
  query(text: string, params: SqlParam[], opts: { arrayMode: false; fullResults: false }): Promise<Row[]>;
}

/**
 * Wraps a Neon WebSocket `Pool` (node-postgres' `Pool` over WebSockets): each
 * transaction checks out one client, a broken one is discarded.
 *
 * @example
 * ```ts
 * import { Pool } from "@neondatabase/serverless";
 * import { fromNeonPool } from "@keyq/keyq/neon";
 * const pool = new Pool({ connectionString: process.env.DATABASE_URL });
 * const db = fromNeonPool(pool);
 * await db.transaction((tx) => tx.query("select 1::text as one"));
 * await pool.end();
 * ```
 */
export function fromNeonPool(pool: PgPoolLike): TxDriver {
  return { ...fromPg(pool), name: "neon-pool" };
}

/**
 * Wraps one connected Neon WebSocket `Client`. One connection: the driver
 * serialises its queries and transactions; inside `transaction(fn)` use `tx`.
 *
 * @example
 * ```ts
 * import { Client } from "@neondatabase/serverless";
 * import { fromNeonClient } from "@keyq/keyq/neon";
 * const client = new Client(process.env.DATABASE_URL);
 * await client.connect();
 * console.log(await fromNeonClient(client).query("select $1::text as hi", ["hello"]));
 * await client.end();
 * ```
 */
export function fromNeonClient(client: PgClientLike): TxDriver {
  return { ...fromPg(client), name: "neon-client" };
}

/**
 * Wraps Neon's HTTP query function. Every call is one stateless HTTP request,
 * so the driver has no `transaction`: it can produce and inspect, and keyq
 * refuses to consume through it (`TRANSACTIONS_UNSUPPORTED`); use
 * `fromNeonPool` for that. Neon runs each request as one prepared statement,
 * so text with several statements is rejected (run migrations over a Pool).
 * Errors carry the server's SQLSTATE in `code` and its `hint`.
 *
 * @example
 * ```ts
 * import { neon } from "@neondatabase/serverless";
 * import { fromNeonHttp } from "@keyq/keyq/neon";
 * const db = fromNeonHttp(neon(process.env.DATABASE_URL!));
 * console.log(await db.query("select $1::text as hi", ["hello"]));
 * ```
 */
export function fromNeonHttp(sql: NeonHttpLike): Driver {
  return {
    name: "neon-http",
    async query(text: string, params?: readonly SqlParam[]): Promise<Row[]> {
      try {
        return await sql.query(text, [...(params ?? [])], { arrayMode: false, fullResults: false });
      } catch (err) {
        const e = err as { code?: unknown; message?: unknown } | null;
        if (params === undefined && e?.code === "42601" && /multiple commands/.test(String(e.message))) {
          throw Object.assign(
            new Error(
              "Neon's HTTP endpoint runs each query as one prepared statement and cannot run several " +
                "statements in one call; use fromNeonPool or fromNeonClient (WebSocket) for this SQL.",
              { cause: err },
            ),
            { code: "42601" },
          );
        }
        throw err;
      }
    },
  };
}
