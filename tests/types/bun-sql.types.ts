/// <reference types="bun-types" />
// Type proof: a real `Bun.SQL` instance fits the structural parameter type of
// src/drivers/bun-sql.ts. Checked by `npx tsc -p tests/types/tsconfig.json`; never run.
import { type BunSqlLike, fromBunSql } from "../../src/drivers/bun-sql.ts";
import type { Driver } from "../../src/driver.ts";

declare const sql: Bun.SQL;

export const sqlLike: BunSqlLike = sql;
export const driver: Driver = fromBunSql(sql);
export const fromNew: Driver = fromBunSql(new Bun.SQL("postgres://postgres@127.0.0.1:5432/test"));
