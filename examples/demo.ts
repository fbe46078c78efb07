/**
 * `npm run demo`: keyq end to end, printed as tables.
 *
 * - DATABASE_URL unset: embedded PGlite (Postgres in WebAssembly, in memory,
 *   one connection, so Tier A shows one worker). Needs no network.
 * - DATABASE_URL set: that database through postgres.js, in a fresh schema
 *   that is dropped at the end; Tier A runs two workers on two connections.
 *
 * It migrates, creates a queue, sends keyed file events for a few tenants
 * (one of them inside a business transaction: the outbox pattern), shows
 * producer dedup, consumes with a plain consumer and with a Tier A exclusive
 * consumer whose handler writes through the batch transaction, retries a
 * failing event until it is dead-lettered, then replays it. Tier B (ordered
 * slots) is shown when this build has `q.ordered`.
 *
 * In your own code the imports are `from "keyq"` and `from "keyq/pglite"`
 * (or `"keyq/postgres-js"`).
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import process from "node:process";
import { type Keyq, keyq, type KeyqEvent, type RunReport, type TxDriver } from "../mod.ts";
import { fromPGlite } from "../src/drivers/pglite.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";

/** What a file lifecycle event carries. */
interface FileEvent {
  path: string;
  size?: number;
}

const QUEUE = "files";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// Output helpers

function heading(title: string): void {
  console.log(`\n== ${title} ${"=".repeat(Math.max(0, 74 - title.length))}`);
}

/** Prints rows as an aligned text table. */
function table(rows: Record<string, unknown>[]): void {
  if (rows.length === 0) {
    console.log("  (none)");
    return;
  }
  const cols = Object.keys(rows[0]!);
  const text = (v: unknown) => (v === null || v === undefined ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v));
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => text(r[c]).length)));
  const line = (cells: string[]) => `  ${cells.map((c, i) => c.padEnd(widths[i]!)).join("  ")}`;
  console.log(line(cols));
  console.log(line(widths.map((w) => "-".repeat(w))));
  for (const r of rows) console.log(line(cols.map((c) => text(r[c]))));
}

const brief = (r: RunReport) => `${r.events} events in ${r.batches} batch(es), ${r.statements} statements, ${r.ms} ms`;

// ---------------------------------------------------------------------------
// The database: PGlite in memory, or DATABASE_URL through postgres.js

interface Db {
  label: string;
  schema: string;
  driver: TxDriver;
  /** More clients on their own connections (real Postgres only), for concurrent workers. */
  extraClient?: () => { driver: TxDriver; close: () => Promise<void> };
  close(): Promise<void>;
}

async function open(): Promise<Db> {
  const url = process.env.DATABASE_URL;
  if (!url) {
    const { PGlite } = await import("@electric-sql/pglite");
    const pg = new PGlite(); // in memory
    await pg.waitReady;
    return { label: "embedded PGlite (in memory)", schema: "keyq", driver: fromPGlite(pg), close: () => pg.close() };
  }
  const { default: postgres } = await import("postgres");
  const connect = () => postgres(url, { max: 1, onnotice: () => {} });
  const sql = connect();
  const schema = `keyq_demo_${randomBytes(3).toString("hex")}`;
  const shown = new URL(url);
  if (shown.password) shown.password = "***";
  return {
    label: `${shown.href} (postgres.js), fresh schema "${schema}"`,
    schema,
    driver: fromPostgresJs(sql),
    extraClient() {
      const s = connect();
      return { driver: fromPostgresJs(s), close: () => s.end({ timeout: 5 }) };
    },
    async close() {
      await sql.unsafe(`drop schema if exists "${schema}" cascade`);
      await sql.end({ timeout: 5 });
    },
  };
}

// ---------------------------------------------------------------------------
// Tier B, typed structurally so the demo runs with or without it in this build

interface OrderedLike {
  subscribe(): Promise<boolean>;
  run(options: {
    worker?: number;
    workers?: number;
    maxEvents?: number;
    handler: (event: KeyqEvent<FileEvent> & { slot?: number }) => void | Promise<void>;
  }): Promise<RunReport>;
}

function orderedOf(q: Keyq): ((queue: string, name: string, options: { slots: number }) => OrderedLike) | undefined {
  const fn = (q as unknown as { ordered?: unknown }).ordered;
  return typeof fn === "function" ? (fn.bind(q) as (queue: string, name: string, options: { slots: number }) => OrderedLike) : undefined;
}

// ---------------------------------------------------------------------------

async function main(): Promise<void> {
  const db = await open();
  const q = keyq(db.driver, { schema: db.schema });
  const extra: { close: () => Promise<void> }[] = [];
  try {
    heading("Setup");
    console.log(`  database: ${db.label}`);
    const m = await q.migrate();
    console.log(`  migrate(): schema "${q.schema}" from version ${m.from} to ${m.to}`);
    // Small backoff so the failure story below fits in a second.
    const { queue } = await q.createQueue(QUEUE, { maxRetries: 2, retryBase: "20ms", retryCap: "200ms" });
    console.log(`  createQueue("${QUEUE}"): ${queue.tables} ring tables, maxRetries ${queue.maxRetries}, retryBase ${queue.retryBase} ms`);
    // A consumer sees the events sent after it subscribed: subscribe them all first.
    await q.consumer(QUEUE, "audit").subscribe();
    await q.exclusive(QUEUE, "indexer").subscribe();
    await q.consumer(QUEUE, "thumbnailer").subscribe();
    const ordered = orderedOf(q);
    if (ordered) await ordered(QUEUE, "lifecycle", { slots: 4 }).subscribe();
    console.log(`  consumers: audit (plain), indexer (Tier A exclusive), thumbnailer (plain)${ordered ? ", lifecycle (Tier B, 4 slots)" : ""}`);
    await q.driver.query(
      `create table "${q.schema}".upload (tenant text, path text, primary key (tenant, path));
       create table "${q.schema}".tenant_stats (tenant text primary key, events int not null, files int not null)`,
    );

    heading("Produce: keyed events (key = tenant)");
    const sent = [];
    const one = await q.send<FileEvent>(QUEUE, { type: "FileCreated", key: "acme", payload: { path: "/logo.png", size: 1200 } });
    sent.push({ via: "send", id: one.id, type: "FileCreated", key: "acme", path: "/logo.png" });
    const batch: { type: string; key: string; payload: FileEvent }[] = [
      { type: "FileCreated", key: "globex", payload: { path: "/plan.pdf", size: 50_000 } },
      { type: "FileCreated", key: "initech", payload: { path: "/tps.xlsx", size: 8_000 } },
      { type: "FileOverwritten", key: "acme", payload: { path: "/logo.png", size: 1400 } },
      { type: "FileCreated", key: "globex", payload: { path: "/draft.pdf", size: 20_000 } },
      { type: "FileDeleted", key: "globex", payload: { path: "/draft.pdf" } },
      { type: "FileOverwritten", key: "initech", payload: { path: "/tps.xlsx", size: 9_000 } },
      { type: "FileOverwritten", key: "acme", payload: { path: "/avatar.raw", size: 666 } }, // the thumbnailer chokes on this one
    ];
    const ids = await q.sendBatch<FileEvent>(QUEUE, batch);
    batch.forEach((e, i) => sent.push({ via: "sendBatch", id: ids[i]!.id, type: e.type, key: e.key, path: e.payload.path }));
    // Outbox: the event commits or rolls back with the business write.
    await q.transaction(async (tx) => {
      await tx.query(`insert into "${q.schema}".upload values ($1, $2)`, ["initech", "/memo.txt"]);
      const r = await q.send<FileEvent>(QUEUE, { type: "FileCreated", key: "initech", payload: { path: "/memo.txt", size: 300 } }, { tx });
      sent.push({ via: "send { tx }", id: r.id, type: "FileCreated", key: "initech", path: "/memo.txt" });
    });
    await q.transaction(async (tx) => {
      await q.send<FileEvent>(QUEUE, { type: "FileCreated", key: "initech", payload: { path: "/lost.txt" } }, { tx });
      throw new Error("business write failed");
    }).catch(() => sent.push({ via: "send { tx }, rolled back", id: "—", type: "FileCreated", key: "initech", path: "/lost.txt (never visible)" }));
    table(sent);

    heading("Producer dedup: dedupKey names the effect, live for its ttl");
    const dedup = [];
    for (const attempt of [1, 2]) {
      const r = await q.send<FileEvent>(QUEUE, {
        type: "FileCreated",
        key: "globex",
        payload: { path: "/report.csv", size: 4_000 },
        dedupKey: "created:globex:/report.csv",
        ttl: "10 minutes",
      });
      dedup.push({ attempt, dedupKey: "created:globex:/report.csv", id: r.id, deduped: r.deduped });
    }
    table(dedup);

    heading('Plain consumer "audit": every event once, in order');
    const audit: Record<string, unknown>[] = [];
    const ra = await q.consumer<FileEvent>(QUEUE, "audit").run({
      handler: (ev) => void audit.push({ id: ev.id, type: ev.type, key: ev.key, path: ev.payload.path }),
    });
    table(audit);
    console.log(`  run(): ${brief(ra)}`);

    const workers = db.extraClient ? 2 : 1;
    heading(`Tier A exclusive consumer "indexer": ${workers} worker(s), one per key at a time`);
    if (!db.extraClient) console.log("  PGlite is one connection, so one worker here; with DATABASE_URL two workers run at once.");
    const clients = Array.from({ length: workers }, () => {
      if (!db.extraClient) return { driver: db.driver, close: async () => {} };
      const c = db.extraClient();
      extra.push(c);
      return c;
    });
    const log: { worker: number; key: string; start: number; end: number; event: string }[] = [];
    const reports = await Promise.all(clients.map(async (c, w) => {
      const indexer = keyq(c.driver, { schema: q.schema }).exclusive<FileEvent>(QUEUE, "indexer", { deferDelay: "30ms" });
      const total: RunReport[] = [];
      // Small batches and a slow handler, so the two workers overlap and meet on keys.
      for (let i = 0; i < 20; i++) {
        const r = await indexer.run({
          maxEvents: 3,
          handler: async (ev, tx) => {
            const start = performance.now();
            await sleep(15);
            // Exactly-once for database effects: this write commits with the ack, or not at all.
            const files = ev.type === "FileDeleted" ? -1 : ev.type === "FileCreated" ? 1 : 0;
            await tx.query(
              `insert into "${q.schema}".tenant_stats as s (tenant, events, files) values ($1, 1, $2::int)
               on conflict (tenant) do update set events = s.events + 1, files = s.files + excluded.files`,
              [ev.key!, String(files)],
            );
            log.push({ worker: w, key: ev.key!, start, end: performance.now(), event: `${ev.type} ${ev.payload.path}` });
          },
        });
        total.push(r);
        if (r.events === 0 && r.deferred === 0) {
          if (i > 2) break;
          await sleep(40); // deferred events come back after deferDelay
        }
      }
      return total;
    }));
    log.sort((a, b) => a.start - b.start);
    table(log.map((l) => ({ "at ms": Math.round(l.start - log[0]!.start), worker: l.worker, key: l.key, event: l.event })));
    const overlaps = log.filter((a) => log.some((b) => a !== b && a.key === b.key && a.worker !== b.worker && a.start < b.end && b.start < a.end));
    table(reports.map((rs, w) => ({
      worker: w,
      events: rs.reduce((n, r) => n + r.events, 0),
      "deferred (key busy elsewhere)": rs.reduce((n, r) => n + r.deferred, 0),
      batches: rs.reduce((n, r) => n + r.batches, 0),
    })));
    console.log(`  overlapping handlers of one key on two workers: ${overlaps.length}`);
    console.log("  tenant_stats, written through the handler's tx:");
    table(await q.driver.query(`select tenant, events::int, files::int from "${q.schema}".tenant_stats order by tenant`));

    heading("Failure: retried with backoff, then dead-lettered, then replayed");
    let fixed = false;
    const attempts: Record<string, unknown>[] = [];
    const thumbnailer = q.consumer<FileEvent>(QUEUE, "thumbnailer");
    const thumbnail = (ev: KeyqEvent<FileEvent>) => {
      if (ev.payload.path !== "/avatar.raw") return;
      if (!fixed) {
        attempts.push({ event: ev.id, key: ev.key, path: ev.payload.path, retry: ev.retry, outcome: "threw: unsupported format" });
        throw new Error("unsupported format: raw");
      }
      attempts.push({ event: ev.id, key: ev.key, path: ev.payload.path, retry: ev.retry, outcome: "thumbnail written" });
    };
    for (let i = 0; i < 50 && (await q.dlq.count({ consumer: "thumbnailer" })) === 0; i++) {
      await thumbnailer.run({ handler: thumbnail });
      await sleep(50); // the backoff: 20 ms, then 40 ms, with jitter
    }
    table(attempts);
    const dead = await q.dlq.list<FileEvent>({ queue: QUEUE, consumer: "thumbnailer" });
    console.log("  dlq.list():");
    table(dead.map((d) => ({ id: d.id, consumer: d.consumer, event: d.eventId, key: d.key, attempts: d.attempts, error: d.error?.message })));
    fixed = true; // deploy the fix, then replay the key's dead letters in their original order
    const replayed = await q.dlq.replayKey(QUEUE, "thumbnailer", "acme");
    console.log(`  fixed the handler; dlq.replayKey("${QUEUE}", "thumbnailer", "acme") → ${replayed} replayed`);
    const rr = await thumbnailer.run({ handler: thumbnail });
    table(attempts.slice(-1));
    console.log(`  run(): ${brief(rr)}; dead letters left: ${await q.dlq.count({ consumer: "thumbnailer" })}`);

    // ---- Tier B ------------------------------------------------------------
    // Shown when this build has q.ordered (the ordered consumer, N slots, FIFO per key).
    heading('Tier B ordered consumer "lifecycle": 4 slots, FIFO per key');
    if (!ordered) {
      console.log("  Tier B is not in this build yet (q.ordered is not a function): skipped.");
    } else {
      const seen: Record<string, unknown>[] = [];
      const lifecycle = ordered(QUEUE, "lifecycle", { slots: 4 });
      const runs = [];
      for (let w = 0; w < 2; w++) {
        runs.push(
          await lifecycle.run({
            worker: w,
            workers: 2,
            handler: (ev) => void seen.push({ worker: w, slot: ev.slot ?? "?", key: ev.key, type: ev.type, path: ev.payload.path }),
          }),
        );
      }
      table(seen);
      const perKey = new Map<string, string[]>();
      for (const s of seen) perKey.set(String(s.key), [...(perKey.get(String(s.key)) ?? []), `${s.type} ${s.path}`]);
      console.log("  per key, in delivery order (= send order):");
      table([...perKey].map(([key, evs]) => ({ key, events: evs.join(" → ") })));
      console.log(`  worker 0: ${brief(runs[0]!)}; worker 1: ${brief(runs[1]!)}`);
    }
    // ---- end of Tier B -------------------------------------------------------

    heading("Queue");
    const [info] = await q.listQueues();
    table([{ queue: info!.name, tables: info!.tables, currentTable: info!.currentTable, maxRetries: info!.maxRetries }]);
    const mr = await q.maintain(QUEUE);
    console.log(
      `  maintain(): rotation ${mr[0]?.rotation?.rotated ? "done" : `not needed (${mr[0]?.rotation?.reason ?? "skipped"})`}, ` +
        `${mr[0]?.ticksPruned ?? 0} ticks pruned, ${mr[0]?.dedupExpired ?? 0} dedup keys expired`,
    );
  } finally {
    await Promise.all(extra.map((c) => c.close()));
    await db.close();
  }
}

await main();
