/**
 * `npm run capacity`: the figures of docs/capacity.md — what one event costs
 * on disk and in WAL, what one queue costs in the catalog, and events/s on
 * one connection (one server core) for sending and for each consumer kind.
 * WAL is read as the difference of `pg_current_wal_lsn()`, so run it on an
 * otherwise idle server; sizes come from `pg_total_relation_size`.
 *
 *   npm run capacity -- [--events N] [--json] [--write-docs]
 *
 * `--write-docs` replaces the table between the capacity markers of
 * docs/capacity.md with this run's.
 *
 * @module
 */

import { readFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { type Keyq, keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, DATABASE_URL, dropSchema, freshSchema, type Sql } from "./db.ts";
import { progress } from "./util.ts";

interface Figure {
  what: string;
  value: number;
  unit: string;
}

const argv = process.argv.slice(2);
const json = argv.includes("--json");
const at = argv.indexOf("--events");
const N = at >= 0 ? Number(argv[at + 1]) : 50_000;
if (!Number.isInteger(N) || N < 1000) throw new Error(`--events needs an integer of at least 1000, not "${argv[at + 1]}"`);

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
      where c.relnamespace = $1::regnamespace and c.relkind in ('r', 'i', 'S', 't') and c.relname like $2`,
      [schema, like],
    ))[0]!.b,
  );

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
    const w0 = await lsn(sql);
    const t0 = performance.now();
    for (let i = 0; i < N; i += 1000) await q.sendBatch("files", events(1000, i));
    const secs = (performance.now() - t0) / 1000;
    const w1 = await lsn(sql);
    out.push({ what: "sendBatch(1,000), 1 connection", value: N / secs, unit: "ev/s" });
    out.push({ what: "WAL per event, sendBatch(1,000)", value: Number(w1 - w0) / N, unit: "bytes" });
    out.push({ what: "disk per event (log table + its indexes)", value: (await relBytes(sql, schema, "event\\_%")) / N, unit: "bytes" });
    const singles = Math.min(2000, N / 10);
    const w2 = await lsn(sql);
    const t1 = performance.now();
    for (let i = 0; i < singles; i++) await q.send("files", events(1, N + i)[0]!);
    const secs1 = (performance.now() - t1) / 1000;
    out.push({ what: "send (one event a call), 1 connection", value: singles / secs1, unit: "ev/s" });
    out.push({ what: "WAL per event, send (one a transaction)", value: Number((await lsn(sql)) - w2) / singles, unit: "bytes" });
  });
  await withSchema(admin, async (q, sql, schema) => {
    const w0 = await lsn(sql);
    for (let i = 0; i < N; i += 1000) await q.sendBatch("files", events(1000, i, true));
    out.push({ what: "WAL per event, sendBatch(1,000) with dedup keys", value: Number((await lsn(sql)) - w0) / N, unit: "bytes" });
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
    const w0 = await lsn(sql);
    const t0 = performance.now();
    let done = 0;
    while (done < N) {
      const r = kind === "ordered"
        ? await (c as ReturnType<Keyq["ordered"]>).run({ worker: 0, workers: 1, maxEvents: 1000, handler: () => {} })
        : await (c as ReturnType<Keyq["consumer"]>).run({ maxEvents: 1000, handler: () => {} });
      if (r.events === 0) throw new Error(`${kind}: ${N - done} events were not delivered`);
      done += r.events;
    }
    const secs = (performance.now() - t0) / 1000;
    const label = kind === "plain" ? "plain consumer" : kind === "exclusive" ? "Tier A consumer" : "Tier B consumer, 8 slots";
    out.push({ what: `${label}, 1 worker, maxEvents 1,000, no-op`, value: N / secs, unit: "ev/s" });
    out.push({ what: `WAL per event consumed, ${label}`, value: Number((await lsn(sql)) - w0) / N, unit: "bytes" });
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
try {
  progress(`capacity on ${DATABASE_URL.replace(/\/\/[^@]*@/, "//")}, ${N.toLocaleString("en-US")} events per measurement`);
  await produce(admin, figures);
  for (const kind of ["plain", "exclusive", "ordered"] as const) {
    progress(`  consuming with ${kind}…`);
    await consume(admin, kind, figures);
  }
  await perQueue(admin, figures);
  const version = (await admin.unsafe("select current_setting('server_version') as v"))[0]!.v as string;
  if (json) console.log(JSON.stringify({ server: version, events: N, figures }, null, 2));
  else {
    const table = [
      `Measured with \`npm run capacity -- --events ${N}\` on PostgreSQL ${version}, ${N.toLocaleString("en-US")} events of ~200-byte JSON per measurement.`,
      "",
      "| measure | value |",
      "| --- | --- |",
      ...figures.map((f) => `| ${f.what} | ${Math.round(f.value).toLocaleString("en-US")}${f.unit ? ` ${f.unit}` : ""} |`),
    ].join("\n");
    console.log(table);
    if (argv.includes("--write-docs")) {
      const file = new URL("../docs/capacity.md", import.meta.url);
      const doc = readFileSync(file, "utf8");
      const [start, end] = ["<!-- capacity:start -->", "<!-- capacity:end -->"];
      if (!doc.includes(start) || !doc.includes(end)) throw new Error(`docs/capacity.md has no ${start} … ${end} markers`);
      writeFileSync(file, `${doc.slice(0, doc.indexOf(start) + start.length)}\n${table}\n${doc.slice(doc.indexOf(end))}`);
      progress("docs/capacity.md: table replaced");
    }
  }
} finally {
  await admin.end({ timeout: 5 });
}
