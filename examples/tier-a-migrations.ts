/**
 * Tier A for per-tenant schema migrations, as a cron handler.
 *
 * Every invocation (a cron tick, an edge function, a Kubernetes CronJob…)
 * calls `handler()`: it enqueues "migrate tenant T to version V" for each
 * tenant that is behind, and consumes for a bounded time with an exclusive
 * consumer. Invocations may overlap: keyq's Tier A lets any number of them
 * work at once while at most one of them holds a given tenant, and the dedup
 * key `migrate:${tenant}:${version}` keeps overlapping producers from
 * enqueueing the same migration twice (it names the effect, not the tenant).
 *
 * Exactly-once for the database: the handler applies the migration DDL, bumps
 * the tenant's version and writes the log row through `tx`, the batch
 * transaction. They commit together with the event's ack, or not at all; a
 * crash replays the event, and the replay finds the version already applied.
 * The event is "bring T up to V", so order between events does not matter
 * (Tier A promises none): an older event that runs late is a no-op.
 *
 *   node --import tsx examples/tier-a-migrations.ts                # embedded PGlite
 *   DATABASE_URL=postgres://… node --import tsx examples/tier-a-migrations.ts
 *
 * In your own code the imports are `from "keyq"` and `from "keyq/postgres-js"`.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { type Executor, keyq, type KeyqEvent, type RunReport, type TxDriver } from "../mod.ts";
import { fromPGlite } from "../src/drivers/pglite.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";

/** The payload of a migration event. */
export interface MigrateTenant {
  tenant: string;
  /** Bring the tenant up to this version. */
  version: number;
}

/** Where things live; `main()` below picks fresh names for a throwaway run. */
export const config = {
  /** keyq's schema. */
  keyqSchema: process.env.KEYQ_SCHEMA ?? "keyq",
  /** The app's schema: the tenant registry and the migration log. Tenant T's tables live in `${app}_${T}`. */
  appSchema: process.env.APP_SCHEMA ?? "app",
  /** Stop starting batches after this long (leave headroom below the platform's timeout). */
  budgetMs: 20_000,
};

/** The tenants' migrations, in version order. Each runs inside the batch transaction. */
const MIGRATIONS: { version: number; name: string; sql: (schema: string) => string }[] = [
  { version: 1, name: "files table", sql: (s) => `create table ${s}.files (path text primary key, size bigint not null)` },
  { version: 2, name: "files.created_at", sql: (s) => `alter table ${s}.files add column created_at timestamptz not null default now()` },
  { version: 3, name: "files by size", sql: (s) => `create index on ${s}.files (size)` },
];
const TARGET = MIGRATIONS.at(-1)!.version;

const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * The Tier A handler: runs while no other worker holds this tenant. Every
 * write goes through `tx`, so the migration, the version bump and the log
 * row commit with the ack of this event, exactly once.
 */
async function migrateTenant(ev: KeyqEvent<MigrateTenant>, tx: Executor): Promise<void> {
  const app = ident(config.appSchema);
  const { tenant, version } = ev.payload;
  const [row] = await tx.query(`select version::int as v from ${app}.tenant where name = $1`, [tenant]);
  if (!row) throw new Error(`unknown tenant ${tenant}`);
  let current = Number(row.v);
  for (const m of MIGRATIONS) {
    if (m.version <= current || m.version > version) continue; // applied already (a replay, or a later event got here first)
    await tx.query(m.sql(ident(`${config.appSchema}_${tenant}`)));
    // The primary key (tenant, version) would reject a second application: it never happens.
    await tx.query(`insert into ${app}.migration_log (tenant, version, event_id) values ($1, $2::int, $3::bigint)`, [
      tenant,
      String(m.version),
      ev.id,
    ]);
    current = m.version;
  }
  await tx.query(`update ${app}.tenant set version = $2::int where name = $1`, [tenant, String(current)]);
}

/** The database of one invocation: its own connection, closed at the end. */
async function connect(): Promise<{ driver: TxDriver; close: () => Promise<void> }> {
  const url = process.env.DATABASE_URL;
  if (url) {
    const { default: postgres } = await import("postgres");
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    return { driver: fromPostgresJs(sql), close: () => sql.end({ timeout: 5 }) };
  }
  // No DATABASE_URL: one embedded PGlite for the whole process (it is in memory).
  pglite ??= import("@electric-sql/pglite").then(async ({ PGlite }) => {
    const db = new PGlite();
    await db.waitReady;
    return db;
  });
  return { driver: fromPGlite(await pglite), close: async () => {} };
}
let pglite: Promise<import("@electric-sql/pglite").PGlite> | undefined;

/** One cron invocation: enqueue what is behind, then migrate tenants for up to `budgetMs`. */
export async function handler(): Promise<RunReport> {
  const { driver, close } = await connect();
  try {
    const q = keyq(driver, { schema: config.keyqSchema });
    await q.migrate(); // idempotent and safe when invocations overlap
    await q.createQueue("migrations", { maxRetries: 3 });
    const migrator = q.exclusive<MigrateTenant>("migrations", "migrator"); // contended tenants are deferred, not dropped
    await migrator.subscribe();

    const behind = await q.driver.query(
      `select name from ${ident(config.appSchema)}.tenant where version < $1::int order by name`,
      [String(TARGET)],
    );
    const sent = await q.sendBatch<MigrateTenant>(
      "migrations",
      behind.map((t) => ({
        type: "MigrateTenant",
        key: String(t.name), // Tier A: one worker per tenant at a time
        payload: { tenant: String(t.name), version: TARGET },
        dedupKey: `migrate:${t.name}:${TARGET}`, // the effect: this tenant to this version
        ttl: "1 hour",
      })),
    );
    const deduped = sent.filter((s) => s.deduped).length;
    console.log(`  enqueued ${sent.length - deduped} migration(s), ${deduped} already enqueued (deduped)`);

    return await migrator.run({ budgetMs: config.budgetMs, maxEvents: 2, handler: migrateTenant });
  } finally {
    await close();
  }
}

/** Run directly: tenants at version 0, overlapping invocations, then one with nothing left to do. */
async function main(): Promise<void> {
  const real = Boolean(process.env.DATABASE_URL);
  if (real) {
    const id = randomBytes(3).toString("hex");
    config.keyqSchema = `mig_${id}_keyq`;
    config.appSchema = `mig_${id}`;
  }
  const tenants = ["acme", "globex", "initech", "umbrella"];
  const app = ident(config.appSchema);
  const { driver, close } = await connect();
  try {
    await driver.query(
      `create schema ${app};
       create table ${app}.tenant (name text primary key, version int not null default 0);
       create table ${app}.migration_log (tenant text, version int, event_id bigint not null,
                                          applied_at timestamptz not null default now(), primary key (tenant, version));
       insert into ${app}.tenant (name) values ${tenants.map((t) => `('${t}')`).join(", ")};
       ${tenants.map((t) => `create schema ${ident(`${config.appSchema}_${t}`)};`).join("\n")}`,
    );
    console.log(`${tenants.length} tenants at version 0, target version ${TARGET}; ${real ? "PostgreSQL at DATABASE_URL" : "embedded PGlite"}`);

    // Two overlapping cron invocations (on PGlite, one connection: one after the other).
    const invocations = real ? await Promise.all([handler(), handler()]) : [await handler(), await handler()];
    invocations.forEach((r, i) =>
      console.log(`invocation ${i + 1}: ${r.events} tenant(s) migrated, ${r.deferred} deferred (tenant held by the other), ${r.batches} batch(es), ${r.ms} ms`)
    );
    // Deferred events come back after deferDelay (1 s): a later tick picks them up.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const last = await handler();
    console.log(`invocation 3: ${last.events} more, nothing left to enqueue`);

    console.table(await driver.query(`select name as tenant, version from ${app}.tenant order by name`));
    console.table(
      await driver.query(
        `select tenant, string_agg(version::text, ', ' order by version) as versions, count(*)::int as applied,
              count(distinct event_id)::int as events
         from ${app}.migration_log group by tenant order by tenant`,
      ),
    );
  } finally {
    if (real) {
      await driver.query(
        `drop schema if exists ${app} cascade; drop schema if exists ${ident(config.keyqSchema)} cascade;
         ${tenants.map((t) => `drop schema if exists ${ident(`${config.appSchema}_${t}`)} cascade;`).join("\n")}`,
      );
    }
    await close();
    if (pglite) await (await pglite).close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
