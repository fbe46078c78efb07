/**
 * Test fixtures: a migrated keyq client in a fresh schema on real Postgres
 * (postgres.js) or on PGlite, with cleanup.
 */
import type { PGlite } from "@electric-sql/pglite";
import { type Keyq, keyq, type KeyqOptions } from "../../mod.ts";
import { fromPGlite } from "../../src/drivers/pglite.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import { connect, databaseUrl, dropSchema, freshSchema, type Sql, startPGlite } from "./db.ts";

/** A migrated client in its own schema, plus a raw connection for checks. */
export interface Fixture {
  q: Keyq;
  schema: string;
  /** Runs raw SQL for assertions (same database, any connection). */
  raw(text: string, params?: (string | null)[]): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

/** On real Postgres: a postgres.js pool of `max` connections. */
export async function pgFixture(options: Omit<KeyqOptions, "schema"> & { max?: number } = {}): Promise<Fixture & { sql: Sql; url: string }> {
  const url = (await databaseUrl())!;
  const schema = freshSchema();
  const sql = connect(url, { max: options.max ?? 4 });
  const { max: _max, ...rest } = options;
  const q = keyq(fromPostgresJs(sql), { ...rest, schema });
  await q.migrate();
  return {
    q,
    schema,
    sql,
    url,
    raw: async (text, params) => [...(await sql.unsafe(text, params ?? []))].map((r) => ({ ...r })),
    async close() {
      await sql.end({ timeout: 2 });
      await dropSchema(url, schema);
    },
  };
}

let shared: Promise<PGlite> | undefined;

/** On PGlite (one connection, in memory, shared by a test file). */
export async function pgliteFixture(options: Omit<KeyqOptions, "schema"> = {}): Promise<Fixture> {
  shared ??= startPGlite();
  const db = await shared;
  const schema = freshSchema();
  const q = keyq(fromPGlite(db), { ...options, schema });
  await q.migrate();
  return {
    q,
    schema,
    raw: async (text, params) => (await db.query(text, params ?? [])).rows as Record<string, unknown>[],
    async close() {
      await db.exec(`drop schema if exists "${schema}" cascade`);
    },
  };
}

/** Closes the shared PGlite, if one was started. */
export async function closePGlite(): Promise<void> {
  if (shared) await (await shared).close();
  shared = undefined;
}

/** Drains a consumer with `run`, returning what the handler saw. */
export async function drain(
  q: Keyq,
  queue: string,
  consumer: string,
  maxEvents = 100,
): Promise<{ id: string; type: string; key: string | null; payload: unknown }[]> {
  const seen: { id: string; type: string; key: string | null; payload: unknown }[] = [];
  await q.consumer(queue, consumer).run({
    maxEvents,
    budgetMs: 60_000,
    handler: (ev) => {
      seen.push({ id: ev.id, type: ev.type, key: ev.key, payload: ev.payload });
    },
  });
  return seen;
}

/** The number of rows of `table` in the fixture's schema. */
export const count = async (f: Fixture, table: string): Promise<number> => Number((await f.raw(`select count(*)::int as n from "${f.schema}".${table}`))[0]!.n);

/**
 * The first column of `sql`'s first row, as text, read in a transaction
 * that is then rolled back: a read that moves a cursor can be made twice
 * and see the same events.
 */
export async function readRolledBack(q: Keyq, sql: string): Promise<string> {
  let r = "";
  const done = new Error("roll back");
  await q.transaction(async (tx) => {
    r = String(Object.values((await tx.query(sql))[0]!)[0]);
    throw done;
  }).catch((err: unknown) => {
    if (err !== done) throw err;
  });
  return r;
}
