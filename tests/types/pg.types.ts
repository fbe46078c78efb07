// Type proof: real node-postgres objects fit the structural parameter types of
// src/drivers/pg.ts. Checked by `npx tsc -p tests/types/tsconfig.json`; never run.
import type { Client, Pool, PoolClient } from "pg";
import { fromPg, type PgClientLike, type PgPoolClientLike, type PgPoolLike } from "../../src/drivers/pg.ts";
import type { Driver } from "../../src/driver.ts";

declare const pool: Pool;
declare const client: Client;
declare const poolClient: PoolClient;

export const poolLike: PgPoolLike = pool;
export const clientLike: PgClientLike = client;
export const poolClientLike: PgPoolClientLike = poolClient;
export const fromPool: Driver = fromPg(pool);
export const fromClient: Driver = fromPg(client);

// @ts-expect-error a Client is not a Pool (no connect() returning a client, no totalCount)
export const notAPool: PgPoolLike = client;
