/**
 * `npm run capacity`: the figures of docs/capacity.md — what one event costs
 * on disk and in WAL, what one queue costs in the catalog, events/s on one
 * connection (one server core) for sending and for each consumer kind; what
 * grows with the number of queues (10, 100, 1,000 queues × 3 consumers); and
 * a large backlog (send rate as the log grows, consume rate at its head).
 * WAL is read as the difference of `pg_current_wal_lsn()`, so run it on an
 * otherwise idle server; sizes come from `pg_total_relation_size` (a table's
 * figure includes its indexes and TOAST).
 *
 *   npm run capacity -- [--only event,queues,backlog] [--events N] [--queues 10,100,1000]
 *                       [--samples N] [--backlog N] [--slice N] [--json] [--write-docs]
 *
 * Progress goes to stderr; the tables (or `--json`) to stdout.
 * `--write-docs` replaces each measured section's table between its markers
 * in docs/capacity.md with this run's.
 *
 * @module
 */

import { readFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { type Keyq, keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, DATABASE_URL, dropSchema, freshSchema, type Sql } from "./db.ts";
import { type BacklogFigures, backlogFigures, scaleQueues, type ScaleRow } from "./capacity-scale.ts";
import { fmt, progress } from "./util.ts";

interface Figure {
  what: string;
  value: number;
  unit: string;
}

const argv = process.argv.slice(2);
const json = argv.includes("--json");
const opt = (name: string, fallback: string): string => {
  const at = argv.indexOf(name);
  return at >= 0 ? (argv[at + 1] ?? "") : fallback;
};
const int = (name: string, fallback: number, min: number): number => {
  const v = Number(opt(name, String(fallback)));
  if (!Number.isInteger(v) || v < min) throw new Error(`${name} needs an integer of at least ${min}, not "${opt(name, "")}"`);
  return v;
};
const N = int("--events", 50_000, 1000);
const SECTIONS = ["event", "queues", "backlog"] as const;
const only = opt("--only", SECTIONS.join(",")).split(",");
for (const o of only) if (!(SECTIONS as readonly string[]).includes(o)) throw new Error(`--only takes ${SECTIONS.join(", ")}, not "${o}"`);
const COUNTS = opt("--queues", "10,100,1000").split(",").map(Number);
if (COUNTS.some((c) => !Number.isInteger(c) || c < 1)) throw new Error(`--queues takes queue counts like 10,100,1000, not "${opt("--queues", "")}"`);
const SAMPLES = int("--samples", 12, 2);
const BACKLOG = int("--backlog", 1_000_000, 10_000);
const SLICE = int("--slice", 50_000, 1000);

const payload = (i: number) => ({ path: `/tenant-${i % 100}/files/${i}.bin`, size: i * 7, etag: "x".repeat(120) });
const events = (n: number, from = 0, dedup = false) =>
  Array.from(
    { length: n },
    (_, j) => ({ type: "FileCreated", key: `tenant-${(from + j) % 100}`, payload: payload(from + j), ...(dedup ? { dedupKey: `d-${from + j}` } : {}) }),
  );

const lsn = async (sql: Sql): Promise<bigint> => BigInt((await sql.unsafe("select (pg_current_wal_lsn() - '0/0'::pg_lsn)::text as b"))[0]!.b as string);
const relBytes = async (sql: Sql, schema: string, like: string): Promise<number> =>
  Number(
    (await sql.unsafe(
      `select coalesce(sum(pg_total_relation_size(c.oid)), 0)::text as b from pg_class c
      where c.relnamespace = $1::regnamespace and c.relkind in ('r', 'S') and c.relname like $2`,
      [schema, like],
    ))[0]!.b,
  );

/**
 * WAL per event of the windows around each call: `pg_current_wal_lsn()` is
 * server-wide, so whatever else writes WAL meanwhile lands in a window too;
 * the least window per event is the closest bound on this run's own WAL.
 */
class WalWindows {
  private least = Number.POSITIVE_INFINITY;
  windows = 0;
  constructor(private readonly sql: Sql) {}
  async around<T>(events: (out: T) => number, call: () => Promise<T>): Promise<T> {
    const w0 = await lsn(this.sql);
    const out = await call();
    const n = events(out);
    if (n > 0) {
      this.least = Math.min(this.least, Number((await lsn(this.sql)) - w0) / n);
      this.windows++;
    }
    return out;
  }
  get perEvent(): number {
    return this.least;
  }
}

async function withSchema<T>(admin: Sql, body: (q: Keyq, sql: Sql, schema: string) => Promise<T>): Promise<T> {
  const schema = freshSchema("kqb_cap");
  const sql = connect(`${APP}-cap`, { max: 1 });
  const q = keyq(fromPostgresJs(sql), { schema });
  try {
    await q.migrate();
    await q.createQueue("files", { rotationPeriod: "1 hour" });
    return await body(q, sql, schema);
  } finally {
    await sql.end({ timeout: 5 });
    await dropSchema(admin, schema);
  }
}

async function produce(admin: Sql, out: Figure[]): Promise<void> {
  await withSchema(admin, async (q, sql, schema) => {
    const wal = new WalWindows(sql);
    const t0 = performance.now();
    for (let i = 0; i < N; i += 1000) await wal.around(() => 1000, () => q.sendBatch("files", events(1000, i)));
    const secs = (performance.now() - t0) / 1000;
    out.push({ what: "sendBatch(1,000), 1 connection", value: N / secs, unit: "ev/s" });
    out.push({ what: "WAL per event, sendBatch(1,000)", value: wal.perEvent, unit: "bytes" });
    out.push({ what: "disk per event (log table with its indexes)", value: (await relBytes(sql, schema, "event\\_%")) / N, unit: "bytes" });
    const singles = Math.min(2000, N / 10);
    const wal1 = new WalWindows(sql);
    const t1 = performance.now();
    for (let i = 0; i < singles; i++) await wal1.around(() => 1, () => q.send("files", events(1, N + i)[0]!));
    const secs1 = (performance.now() - t1) / 1000;
    out.push({ what: "send (one event a call), 1 connection", value: singles / secs1, unit: "ev/s" });
    out.push({ what: "WAL per event, send (one a transaction)", value: wal1.perEvent, unit: "bytes" });
  });
  await withSchema(admin, async (q, sql, schema) => {
    const wal = new WalWindows(sql);
    for (let i = 0; i < N; i += 1000) await wal.around(() => 1000, () => q.sendBatch("files", events(1000, i, true)));
    out.push({ what: "WAL per event, sendBatch(1,000) with dedup keys", value: wal.perEvent, unit: "bytes" });
    out.push({ what: "disk per live dedup key", value: (await relBytes(sql, schema, "dedup%")) / N, unit: "bytes" });
  });
}

type Kind = "plain" | "exclusive" | "ordered";

async function consume(admin: Sql, kind: Kind, out: Figure[]): Promise<void> {
  await withSchema(admin, async (q, sql) => {
    const c = kind === "plain" ? q.consumer("files", "c") : kind === "exclusive" ? q.exclusive("files", "c") : q.ordered("files", "c", { slots: 8 });
    await c.subscribe();
    for (let i = 0; i < N; i += 1000) await q.sendBatch("files", events(1000, i));
    await q.tick("files", { force: true });
    const wal = new WalWindows(sql);
    const t0 = performance.now();
    let done = 0;
    while (done < N) {
      // One batch a call, so each batch is a WAL window of its own.
      const r = await wal.around(
        (r) => r.events,
        () =>
          kind === "ordered"
            ? (c as ReturnType<Keyq["ordered"]>).run({ worker: 0, workers: 1, maxEvents: 1000, maxBatches: 1, handler: () => {} })
            : (c as ReturnType<Keyq["consumer"]>).run({ maxEvents: 1000, maxBatches: 1, handler: () => {} }),
      );
      if (r.events === 0) throw new Error(`${kind}: ${N - done} events were not delivered`);
      done += r.events;
    }
    const secs = (performance.now() - t0) / 1000;
    const label = kind === "plain" ? "plain consumer" : kind === "exclusive" ? "Tier A consumer" : "Tier B consumer, 8 slots";
    out.push({ what: `${label}, 1 worker, maxEvents 1,000, no-op`, value: N / secs, unit: "ev/s" });
    out.push({ what: `WAL per event consumed, ${label} (batches of up to 1,000)`, value: wal.perEvent, unit: "bytes" });
  });
}

async function perQueue(admin: Sql, out: Figure[]): Promise<void> {
  await withSchema(admin, async (q, sql, schema) => {
    const count = async () => Number((await sql.unsafe(`select count(*)::int as n from pg_class where relnamespace = $1::regnamespace`, [schema]))[0]!.n);
    const bytes = () => relBytes(sql, schema, "%");
    const [r0, b0] = [await count(), await bytes()];
    for (let i = 0; i < 20; i++) await q.createQueue(`extra-${i}`);
    out.push({ what: "catalog relations per queue (tables, indexes, sequence, toast)", value: ((await count()) - r0) / 20, unit: "" });
    out.push({ what: "disk per empty queue", value: ((await bytes()) - b0) / 20, unit: "bytes" });
    for (let i = 0; i < 20; i++) await q.dropQueue(`extra-${i}`);
  });
}

const admin = connect(`${APP}-cap-admin`);
const figures: Figure[] = [];
let scale: ScaleRow[] = [];
let deep: BacklogFigures | null = null;
const started = performance.now();
try {
  const version = (await admin.unsafe("select current_setting('server_version') as v"))[0]!.v as string;
  progress(`capacity on ${DATABASE_URL.replace(/\/\/[^@]*@/, "//")} (PostgreSQL ${version}): ${only.join(", ")}`);
  if (only.includes("event")) {
    progress(`per event: ${N.toLocaleString("en-US")} events per measurement`);
    await produce(admin, figures);
    for (const kind of ["plain", "exclusive", "ordered"] as const) {
      progress(`  consuming with ${kind}…`);
      await consume(admin, kind, figures);
    }
    await perQueue(admin, figures);
  }
  if (only.includes("queues")) {
    progress(`queues: ${COUNTS.join(", ")} queues × 3 consumers, ${SAMPLES} samples each, interleaved`);
    scale = await scaleQueues(admin, COUNTS, SAMPLES);
  }
  if (only.includes("backlog")) {
    progress(`backlog: ${BACKLOG.toLocaleString("en-US")} events, slices of ${SLICE.toLocaleString("en-US")}`);
    deep = await backlogFigures(admin, BACKLOG, SLICE);
  }
  progress(`done in ${Math.round((performance.now() - started) / 1000)} s`);
  if (json) console.log(JSON.stringify({ server: version, events: N, figures, queues: scale, backlog: deep }, null, 2));
  else {
    const tables: Record<string, string> = {};
    if (figures.length) tables.capacity = eventTable(version, figures);
    if (scale.length) tables["capacity-queues"] = queuesTable(version, scale);
    if (deep) tables["capacity-backlog"] = backlogTable(version, deep);
    console.log(Object.values(tables).join("\n\n"));
    if (argv.includes("--write-docs")) writeDocs(tables);
  }
} finally {
  await admin.end({ timeout: 5 });
}

function eventTable(version: string, fs: Figure[]): string {
  return [
    `Measured with \`npm run capacity -- --only event --events ${N}\` on PostgreSQL ${version}, ${
      N.toLocaleString("en-US")
    } events of ~200-byte JSON per measurement; ` +
    "WAL rows: the least window (one call) per event, as `pg_current_wal_lsn()` also counts other sessions' WAL.",
    "",
    "| measure | value |",
    "| --- | --- |",
    ...fs.map((f) =>
      `| ${f.what} | ${f.value < 10 && !Number.isInteger(f.value) ? fmt(f.value) : Math.round(f.value).toLocaleString("en-US")}${f.unit ? ` ${f.unit}` : ""} |`
    ),
  ].join("\n");
}

function queuesTable(version: string, rows: ScaleRow[]): string {
  const base = rows[0]!;
  const x = (v: number, b: number) => `${fmt(v)} (${(v / b).toFixed(2)}×)`;
  return [
    `Measured with \`npm run capacity -- --only queues --queues ${
      COUNTS.join(",")
    } --samples ${SAMPLES}\` on PostgreSQL ${version}: every queue has a plain, a Tier A and a Tier B (4 slots) consumer; ` +
    `all schemas exist at once and each sample visits each in turn; medians in ms (status() and maintain() of every queue: ${
      Math.ceil(SAMPLES / 3)
    } or more samples), ` +
    `the factor against ${base.queues} queues in parentheses.`,
    "",
    "| queues | run() plain, 10 events | run() Tier A | run() Tier B | cold run() plain | the same, fetch_types off | tick() | status() per queue | maintain() per queue | createQueue + 3 subscribes, per queue |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.queues.toLocaleString("en-US")} | ${x(r.runs.plain!, base.runs.plain!)} | ${x(r.runs.exclusive!, base.runs.exclusive!)} | ${
        x(r.runs.ordered!, base.runs.ordered!)
      } | ` +
      `${x(r.cold, base.cold)} | ${x(r.coldNoTypes, base.coldNoTypes)} | ${x(r.tick, base.tick)} | ${x(r.statusPerQueue, base.statusPerQueue)} | ${
        x(r.maintainPerQueue, base.maintainPerQueue)
      } | ${fmt(r.createPerQueue)} |`
    ),
    "",
    "Rows of keyq's tables each call reads (sequential and index fetches, from `pg_stat_xact_user_tables`): counts, not timings, so the load does not move them.",
    "",
    "| queues | tick() of one queue | maintain() of one queue | status() of one queue | status() over 100 queues, per queue |",
    "| --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.queues.toLocaleString("en-US")} | ${r.rowsRead.tick} | ${r.rowsRead.maintain} | ${r.rowsRead.status} | ${fmt(r.rowsRead.statusPageQueue)} |`
    ),
  ].join("\n");
}

function backlogTable(version: string, b: BacklogFigures): string {
  const n = (v: number) => Math.round(v).toLocaleString("en-US");
  return [
    `Measured with \`npm run capacity -- --only backlog --backlog ${b.events} --slice ${b.slice}\` on PostgreSQL ${version}: one queue, ${
      n(b.events)
    } events waiting for a plain, a Tier A and a Tier B (8 slots) consumer; loaded in ${n(b.loadSeconds)} s.`,
    "",
    "| measure | value |",
    "| --- | --- |",
    `| sendBatch(1,000) on 2 connections, first tenth of the load | ${n(b.sendFirst)} ev/s |`,
    `| the same, last tenth (the log holding ${n(b.events * 0.9)} events) | ${n(b.sendLast)} ev/s (${(b.sendLast / b.sendFirst).toFixed(2)}×) |`,
    `| disk per event (ring tables with their indexes) | ${n(b.diskPerEvent)} bytes |`,
    `| WAL per event, sendBatch(1,000) (the least window of one batch) | ${n(b.walPerEvent)} bytes |`,
    ...b.consume.map((c) =>
      `| ${c.kind} consumer, 1 worker: ${n(b.slice)} events at the head of the backlog vs on a queue of ${n(b.slice)} | ${n(c.deep)} vs ${n(c.shallow)} ev/s (${
        (c.deep / c.shallow).toFixed(2)
      }×) |`
    ),
    `| blocks read from outside shared buffers per 1,000 events consumed, head of the backlog vs the small queue | ${fmt(b.readsDeep)} vs ${
      fmt(b.readsShallow)
    } |`,
    `| status() of the loaded queue (counts stop at 100,000) | ${fmt(b.statusMs)} ms |`,
    `| maintain() of the loaded queue (rotation held by the cursors) | ${fmt(b.maintainMs)} ms |`,
  ].join("\n");
}

function writeDocs(tables: Record<string, string>): void {
  const file = new URL("../docs/capacity.md", import.meta.url);
  let doc = readFileSync(file, "utf8");
  for (const [name, table] of Object.entries(tables)) {
    const [start, end] = [`<!-- ${name}:start -->`, `<!-- ${name}:end -->`];
    if (!doc.includes(start) || !doc.includes(end)) throw new Error(`docs/capacity.md has no ${start} … ${end} markers`);
    doc = `${doc.slice(0, doc.indexOf(start) + start.length)}\n${table}\n${doc.slice(doc.indexOf(end))}`;
    progress(`docs/capacity.md: ${name} table replaced`);
  }
  writeFileSync(file, doc);
}
