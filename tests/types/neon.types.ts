// Type proof: real @neondatabase/serverless objects fit the structural parameter
// types of src/drivers/neon.ts. Checked by `npx tsc -p tests/types/tsconfig.json`; never run.
import { type Client, neon, type Pool, type PoolClient } from "@neondatabase/serverless";
import { fromNeonClient, fromNeonHttp, fromNeonPool, type NeonHttpLike } from "../../src/drivers/neon.ts";
import type { PgClientLike, PgPoolClientLike, PgPoolLike } from "../../src/drivers/pg.ts";
import type { Driver } from "../../src/driver.ts";

declare const pool: Pool;
declare const client: Client;
declare const poolClient: PoolClient;
const sql = neon("postgres://user:pw@example.invalid/db");
const fullSql = neon("postgres://user:pw@example.invalid/db", { fullResults: true, arrayMode: true });

export const poolLike: PgPoolLike = pool;
export const clientLike: PgClientLike = client;
export const poolClientLike: PgPoolClientLike = poolClient;
export const httpLike: NeonHttpLike = sql;
// The adapter passes `{ arrayMode: false, fullResults: false }` per call, so any neon() options fit.
export const fullHttpLike: NeonHttpLike = fullSql;

export const drivers: Driver[] = [fromNeonPool(pool), fromNeonClient(client), fromNeonHttp(sql)];
