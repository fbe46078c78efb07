/**
 * Tier B: file lifecycle events (FileCreated / FileOverwritten / FileDeleted)
 * must be applied in order per tenant, in parallel across tenants. An ordered
 * consumer with N = 8 slots; each cron job has a stable index and takes the
 * slots index, index + workers, … (static assignment). A job that stops
 * showing up is covered: the others also read any slot nobody polled for
 * `helpAfter`, so no slot pins the log.
 *
 * The handler keeps a `file_state` table through the batch transaction `tx`:
 * the row changes commit together with the ack, so each event is applied
 * exactly once even when a run crashes midway.
 *
 *   node --import tsx examples/tier-b-lifecycle.ts              # embedded PGlite
 *   DATABASE_URL=postgres://… WORKER_INDEX=0 WORKERS=3 node --import tsx examples/tier-b-lifecycle.ts
 *
 * Run directly, it works in a throwaway schema of its own (`lifecycle_<random>`,
 * printed at the start) and drops only that schema at the end (KEYQ_KEEP=1
 * keeps it). It never touches KEYQ_SCHEMA or any schema it did not create.
 */
import { type Executor, type Keyq, keyq, type KeyqEvent, type RunReport } from "keyq";
import { fromPGlite } from "keyq/pglite";
import { fromPostgresJs } from "keyq/postgres-js";

interface FileEvent {
  path: string;
  size?: number;
}

const env = (name: string): string | undefined => (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env[name];

/** Applies one lifecycle event to the tenant's file table, inside the batch transaction. */
async function apply(ev: KeyqEvent<FileEvent>, tx: Executor, schema: string): Promise<void> {
  const tenant = ev.key!;
  const { path, size } = ev.payload;
  if (ev.type === "FileDeleted") {
    await tx.query(`delete from "${schema}".file_state where tenant = $1 and path = $2`, [tenant, path]);
    return;
  }
  // FileCreated and FileOverwritten: the last write in send order wins — which is
  // only right because Tier B delivers a tenant's events in order.
  await tx.query(
    `insert into "${schema}".file_state (tenant, path, size, version) values ($1, $2, $3::int, 1)
     on conflict (tenant, path) do update set size = excluded.size, version = file_state.version + 1`,
    [tenant, path, String(size ?? 0)],
  );
}

/** One cron run of worker `index` of `workers`. */
export async function handler(q: Keyq, index: number, workers: number): Promise<RunReport> {
  return await q.ordered<FileEvent>("files", "file-state", { slots: 8, helpAfter: "2m" }).run({
    worker: index,
    workers,
    budgetMs: 20_000,
    handler: (ev, tx) => apply(ev, tx, q.schema),
  });
}

async function main(): Promise<void> {
  const url = env("DATABASE_URL");
  // Its own throwaway schema: dropping it at the end cannot hurt anything else.
  const schema = `lifecycle_${[...crypto.getRandomValues(new Uint8Array(4))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  console.log(`schema ${schema} (${url ? "PostgreSQL at DATABASE_URL" : "embedded PGlite"})`);
  let close: () => Promise<void>;
  let q: Keyq;
  if (url) {
    const { default: postgres } = await import("postgres");
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    q = keyq(fromPostgresJs(sql), { schema });
    close = () => sql.end();
  } else {
    const { PGlite } = await import("@electric-sql/pglite");
    const db = new PGlite();
    q = keyq(fromPGlite(db), { schema });
    close = () => db.close();
  }
  try {
    await q.migrate();
    await q.createQueue("files");
    await q.driver.query(
      `create table if not exists "${schema}".file_state (tenant text, path text, size int, version int, primary key (tenant, path))`,
    );
    // A producer: three tenants, each with a create → overwrite → delete story.
    const events = ["acme", "globex", "initech"].flatMap((tenant) => [
      { type: "FileCreated", key: tenant, payload: { path: "/a.txt", size: 10 } },
      { type: "FileCreated", key: tenant, payload: { path: "/b.txt", size: 20 } },
      { type: "FileOverwritten", key: tenant, payload: { path: "/a.txt", size: 11 } },
      { type: "FileDeleted", key: tenant, payload: { path: "/b.txt" } },
    ]);
    await q.ordered("files", "file-state", { slots: 8 }).subscribe();
    await q.sendBatch<FileEvent>("files", events);
    const workers = Number(env("WORKERS") ?? 3);
    const only = env("WORKER_INDEX");
    // Locally: every cron index in turn. In production each job runs its own index.
    for (const index of only === undefined ? Array.from({ length: workers }, (_, i) => i) : [Number(only)]) {
      const r = await handler(q, index, workers);
      console.log(`worker ${index}/${workers}: ${r.events} events in ${r.batches} batches (${r.statements} statements)`);
    }
    const rows = await q.driver.query(
      `select tenant, path, size::text, version::text from "${schema}".file_state order by tenant, path`,
    );
    console.table(rows);
  } finally {
    if (!env("KEYQ_KEEP")) await q.driver.query(`drop schema if exists "${schema}" cascade`);
    await close();
  }
}

const isMain = (globalThis as { process?: { argv: string[] } }).process?.argv[1]?.endsWith("tier-b-lifecycle.ts");
if (isMain) await main();
