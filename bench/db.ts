/**
 * Database plumbing of the benchmark: connections (postgres.js for keyq,
 * node-postgres inside pg-boss, both with default sockets), fresh schemas, and
 * the table statistics read amplification is computed from.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import process from "node:process";
import postgres from "postgres";
import { sleep } from "./util.ts";

/** The database every scenario runs against. */
export const DATABASE_URL: string = process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test";

/** A postgres.js client. */
export type Sql = postgres.Sql;

/**
 * A postgres.js client tagged with `application_name` (so the benchmark can
 * wait for its backends to exit), with the driver's default socket settings
 * (what a user gets). `url` defaults to `DATABASE_URL`; `fetchTypes: false`
 * skips postgres.js's read of every array type in pg_type at connection start.
 */
export function connect(app: string, opts: { max?: number; url?: string; fetchTypes?: boolean } = {}): Sql {
  return postgres(opts.url ?? DATABASE_URL, {
    max: opts.max ?? 1,
    fetch_types: opts.fetchTypes ?? true,
    idle_timeout: 30,
    connect_timeout: 10,
    onnotice: () => {},
    connection: { application_name: app },
  });
}

/** Schemas made by this run and not dropped yet (dropped on Ctrl-C too). */
export const liveSchemas: Set<string> = new Set();

/** A fresh schema name, unique to this process and call. */
export function freshSchema(prefix: string): string {
  const name = `${prefix}_${randomBytes(4).toString("hex")}`;
  liveSchemas.add(name);
  return name;
}

/** The application_name prefix of every connection this run opens. */
export const APP = `kqbench-${process.pid}`;

/** Drops a schema with everything in it. */
export async function dropSchema(admin: Sql, schema: string): Promise<void> {
  await admin.unsafe(`drop schema if exists "${schema}" cascade`);
  liveSchemas.delete(schema);
}

/** Waits until no backend with an application_name starting with `app` is left (their stats are flushed at exit). */
export async function waitBackendsGone(admin: Sql, app: string, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  for (;;) {
    const rows = await admin.unsafe(
      "select count(*)::int as n from pg_stat_activity where application_name like $1 and pid <> pg_backend_pid()",
      [`${app}%`],
    );
    if (Number(rows[0]!.n) === 0) return;
    if (Date.now() - started > timeoutMs) throw new Error(`Backends of ${app} did not exit within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/**
 * Rows read (`seq_tup_read + idx_tup_fetch`) from the tables of `schema`
 * whose names match `like` (keyq: `event\_%`, pg-boss: `job%`), summed.
 * Counters of live backends flush at most once a second and at exit: close
 * the connections and call `waitBackendsGone` first.
 */
export async function rowsRead(admin: Sql, schema: string, like: string): Promise<number> {
  await admin.unsafe("select pg_stat_clear_snapshot()");
  const rows = await admin.unsafe(
    `select coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::text as n
       from pg_stat_user_tables where schemaname = $1 and relname like $2`,
    [schema, like],
  );
  return Number(rows[0]!.n);
}

/** ANALYZE every table of a schema (pg-boss plans badly on stale statistics). */
export async function analyzeSchema(admin: Sql, schema: string): Promise<void> {
  const rows = await admin.unsafe(
    `select format('%I.%I', schemaname, relname) as t from pg_stat_user_tables where schemaname = $1`,
    [schema],
  );
  for (const r of rows) await admin.unsafe(`analyze ${r.t as string}`);
}
