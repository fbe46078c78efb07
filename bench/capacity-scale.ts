/**
 * The scale half of `npm run capacity`: what grows with the number of
 * queues (1,000 queues × 3 consumers beside 10 and 100: a run, a tick, and
 * status()/maintain() per queue), and what one event costs behind a large
 * backlog (send rate as the log grows, disk and WAL per event, consume rate
 * of each consumer kind at the head of the backlog against the same on a
 * small one, status() and maintain() of the loaded queue).
 *
 * @module
 */

import { type Keyq, keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, dropSchema, freshSchema, type Sql } from "./db.ts";
import { buildQueues, dropQueues, noSamples, type QueuesResult, type QueuesSchema, sampleQueues, summarizeQueues } from "./queues.ts";
import { progress } from "./util.ts";

/** One row of the queues table: the schema's queue count and what was measured there. */
export interface ScaleRow extends QueuesResult {
  queues: number;
  /** Rows of keyq's tables read (sequential + index fetches) by one engine call, a count the machine's load does not change. */
  rowsRead: { tick: number; maintain: number; status: number; statusPageQueue: number };
}

/**
 * Rows of the schema's tables one statement reads (`seq_tup_read +
 * idx_tup_fetch` of the transaction).
 */
async function rowsRead(s: QueuesSchema, statement: string): Promise<number> {
  // What earlier transactions left pending is flushed first (PostgreSQL 15+),
  // so the view holds this statement's counts only.
  await s.sql.unsafe("select pg_catalog.pg_stat_force_next_flush()");
  await new Promise((r) => setTimeout(r, 100));
  return await s.sql.begin(async (tx) => {
    await tx.unsafe(statement);
    const [r] = await tx.unsafe(
      `select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::int as n from pg_catalog.pg_stat_xact_user_tables where schemaname = $1`,
      [s.schema],
    );
    return Number(r!.n);
  });
}

/** The rows-read counts of one schema: tick, maintain and status of queue q0, and a status page (up to 100 queues) per queue. */
async function countRows(s: QueuesSchema): Promise<ScaleRow["rowsRead"]> {
  const f = `"${s.schema}"`;
  const page = Math.min(100, s.queues);
  return {
    tick: await rowsRead(s, `select ${f}.tick('q0', true)`),
    maintain: await rowsRead(s, `select ${f}.maintain('q0', false)`),
    status: await rowsRead(s, `select ${f}.status('q0')`),
    statusPageQueue: (await rowsRead(s, `select ${f}.status(null, 300, null, ${page})`)) / page,
  };
}

/** The queue counts in an interleaved order (largest second), so a drift in load does not line up with the count. */
export function interleave(counts: readonly number[]): number[] {
  const sorted = [...counts].sort((a, b) => a - b);
  return sorted.length < 3 ? sorted : [sorted[0]!, sorted.at(-1)!, ...sorted.slice(1, -1)];
}

/**
 * Every queue count's schema at once, each queue with a plain, a Tier A and
 * a Tier B consumer (4 slots); then `samples` rounds, each sampling every
 * schema in turn (the order alternating), so a change in the machine's load
 * reaches every count alike; medians.
 */
export async function scaleQueues(admin: Sql, counts: readonly number[], samples: number): Promise<ScaleRow[]> {
  const kinds = ["plain", "exclusive", "ordered"] as const;
  const built: QueuesSchema[] = [];
  try {
    for (const n of interleave(counts)) {
      progress(`  ${n.toLocaleString("en-US")} queues × 3 consumers…`);
      built.push(await buildQueues(n, kinds));
    }
    const got = built.map(() => noSamples(kinds));
    for (let i = 0; i < samples; i++) {
      progress(`  sample ${i + 1} of ${samples}`);
      const order = built.map((_, k) => k);
      for (const k of i % 2 ? order.reverse() : order) await sampleQueues(built[k]!, got[k]!, i, i % 3 === 0 || i === samples - 1);
    }
    progress("  rows read per call…");
    const rows: ScaleRow["rowsRead"][] = [];
    for (const s of built) rows.push(await countRows(s));
    return built.map((s, k) => ({ queues: s.queues, ...summarizeQueues(s, got[k]!), rowsRead: rows[k]! })).sort((a, b) => a.queues - b.queues);
  } finally {
    for (const s of built) await dropQueues(admin, s);
  }
}

/** What the backlog measurement found. */
export interface BacklogFigures {
  events: number;
  /** Events/s of sendBatch(1,000) over the first and the last tenth of the load. */
  sendFirst: number;
  sendLast: number;
  diskPerEvent: number;
  walPerEvent: number;
  /** Events/s of each kind over `slice` events at the head of the backlog, and over the same on a queue holding only `slice`. */
  consume: { kind: string; deep: number; shallow: number }[];
  /** Blocks read from outside shared buffers per 1,000 events consumed (all three kinds): at the head of the backlog, and on the small queue. */
  readsDeep: number;
  readsShallow: number;
  slice: number;
  statusMs: number;
  maintainMs: number;
  loadSeconds: number;
}

type Kind = "plain" | "exclusive" | "ordered";
const KINDS: readonly Kind[] = ["plain", "exclusive", "ordered"];
const payload = (i: number) => ({ path: `/tenant-${i % 100}/files/${i}.bin`, size: i * 7, etag: "x".repeat(120) });
const batch = (from: number) =>
  Array.from({ length: 1000 }, (_, j) => ({ type: "FileCreated", key: `tenant-${(from + j) % 1000}`, payload: payload(from + j) }));

const lsn = async (sql: Sql): Promise<bigint> => BigInt((await sql.unsafe("select (pg_current_wal_lsn() - '0/0'::pg_lsn)::text as b"))[0]!.b as string);
const consumerOf = (q: Keyq, kind: Kind) =>
  kind === "plain" ? q.consumer("files", "c") : kind === "exclusive" ? q.exclusive("files", "x") : q.ordered("files", "o", { slots: 8 });

/** Blocks of the schema's tables and indexes read from outside shared buffers, and found in them (flushed statistics). */
async function blocks(sql: Sql, schema: string): Promise<{ read: number; hit: number }> {
  const [r] = await sql.unsafe(
    `select coalesce(sum(heap_blks_read + coalesce(idx_blks_read, 0)), 0)::text as read, coalesce(sum(heap_blks_hit + coalesce(idx_blks_hit, 0)), 0)::text as hit
       from pg_catalog.pg_statio_user_tables where schemaname = $1`,
    [schema],
  );
  return { read: Number(r!.read), hit: Number(r!.hit) };
}

/** Events/s of one worker of `kind` consuming `n` events (maxEvents 1,000, no-op). */
async function consumeRate(q: Keyq, kind: Kind, n: number): Promise<number> {
  const c = consumerOf(q, kind);
  const t0 = performance.now();
  let done = 0;
  while (done < n) {
    const left = Math.min(1000, n - done);
    const r = kind === "ordered"
      ? await (c as ReturnType<Keyq["ordered"]>).run({ worker: 0, workers: 1, maxEvents: left, maxBatches: 1, handler: () => {} })
      : await (c as ReturnType<Keyq["consumer"]>).run({ maxEvents: left, maxBatches: 1, handler: () => {} });
    if (r.events === 0) throw new Error(`${kind}: ${n - done} of ${n} events were not delivered`);
    done += r.events;
  }
  return n / ((performance.now() - t0) / 1000);
}

/** Sends `n` events into queue "files" in batches of 1,000 over `conns` connections; the rate of the first and last tenth. */
async function load(q: Keyq, sql: Sql, n: number, conns: number): Promise<{ first: number; last: number; seconds: number; walPerEvent: number }> {
  const tenth = Math.max(1000, Math.floor(n / 10 / 1000) * 1000);
  let next = 0;
  let sent = 0;
  let wal = Number.POSITIVE_INFINITY;
  const marks: { at: number; t: number }[] = [{ at: 0, t: performance.now() }];
  const t0 = performance.now();
  const worker = async () => {
    for (let i = (next += 1000) - 1000; i < n; i = (next += 1000) - 1000) {
      // WAL of the window around each batch: the least is the closest bound
      // on a batch's own (the LSN is server-wide, and the other connection's
      // batch may overlap the window).
      const w0 = await lsn(sql);
      await q.sendBatch("files", batch(i));
      wal = Math.min(wal, Number((await lsn(sql)) - w0) / 1000);
      sent += 1000;
      if (sent % tenth === 0) {
        marks.push({ at: sent, t: performance.now() });
        const [a, b] = marks.slice(-2);
        const secs = (performance.now() - t0) / 1000;
        progress(
          `    ${sent.toLocaleString("en-US")} of ${n.toLocaleString("en-US")} sent, ${Math.round((b!.at - a!.at) / ((b!.t - a!.t) / 1000))} ev/s now, ${
            Math.round(secs)
          } s`,
        );
      }
    }
  };
  await Promise.all(Array.from({ length: conns }, worker));
  const rate = (a: { at: number; t: number }, b: { at: number; t: number }) => (b.at - a.at) / ((b.t - a.t) / 1000);
  return {
    first: rate(marks[0]!, marks[1] ?? marks[0]!),
    last: rate(marks.at(-2)!, marks.at(-1)!),
    seconds: (performance.now() - t0) / 1000,
    walPerEvent: wal,
  };
}

async function withQueue<T>(admin: Sql, conns: number, body: (q: Keyq, sql: Sql, schema: string) => Promise<T>): Promise<T> {
  const schema = freshSchema("kqb_backlog");
  const sql = connect(`${APP}-backlog`, { max: conns });
  const q = keyq(fromPostgresJs(sql), { schema });
  try {
    await q.migrate();
    await q.createQueue("files", { rotationPeriod: "1 hour" });
    for (const kind of KINDS) await consumerOf(q, kind).subscribe();
    return await body(q, sql, schema);
  } finally {
    await sql.end({ timeout: 5 });
    await dropSchema(admin, schema);
  }
}

/**
 * A queue with `events` waiting for three consumers (plain, Tier A, Tier B 8
 * slots); `slice` events consumed by each at its head, in two halves, each
 * followed by a half of the same on a queue that holds only `slice` events
 * (so a change in the machine's load reaches both alike).
 */
export async function backlogFigures(admin: Sql, events: number, slice: number): Promise<BacklogFigures> {
  progress(`  backlog: ${events.toLocaleString("en-US")} events, sendBatch(1,000) on 2 connections…`);
  return await withQueue(admin, 2, async (q, sql, schema) => {
    const l = await load(q, sql, events, 2);
    const bytes = Number((await sql.unsafe(
      `select pg_total_relation_size(c.oid)::text as b from pg_class c
      where c.relnamespace = $1::regnamespace and c.relkind = 'r' and c.relname like 'event\\_%\\_%'`,
      [schema],
    )).reduce((a, r) => a + Number(r.b), 0));
    await q.tick("files", { force: true });
    progress("  status() and maintain() of the loaded queue…");
    let t = performance.now();
    await q.status();
    const statusMs = performance.now() - t;
    t = performance.now();
    await q.maintain();
    const maintainMs = performance.now() - t;
    progress(`  the reference: a queue of ${slice.toLocaleString("en-US")} events…`);
    let reads = { deep: 0, shallow: 0 };
    const consume = await withQueue(admin, 1, async (small, smallSql, smallSchema) => {
      for (let i = 0; i < slice; i += 1000) await small.sendBatch("files", batch(i));
      await small.tick("files", { force: true });
      const out: BacklogFigures["consume"] = [];
      const half = Math.floor(slice / 2000) * 1000;
      // Statistics reach the views when a backend is idle, at most once a second.
      const settle = () => new Promise((r) => setTimeout(r, 1500));
      await settle();
      const [d0, s0] = [await blocks(sql, schema), await blocks(smallSql, smallSchema)];
      for (const kind of KINDS) {
        progress(`  ${kind}: ${slice.toLocaleString("en-US")} events at the head of the backlog, and on the small queue…`);
        const deep = [await consumeRate(q, kind, half), 0];
        const shallow = [await consumeRate(small, kind, half), 0];
        deep[1] = await consumeRate(q, kind, slice - half);
        shallow[1] = await consumeRate(small, kind, slice - half);
        const both = (r: number[]) => slice / (half / r[0]! + (slice - half) / r[1]!);
        out.push({ kind, deep: both(deep), shallow: both(shallow) });
      }
      await settle();
      const [d1, s1] = [await blocks(sql, schema), await blocks(smallSql, smallSchema)];
      reads = { deep: (1000 * (d1.read - d0.read)) / (3 * slice), shallow: (1000 * (s1.read - s0.read)) / (3 * slice) };
      return out;
    });
    return {
      readsDeep: reads.deep,
      readsShallow: reads.shallow,
      events,
      sendFirst: l.first,
      sendLast: l.last,
      diskPerEvent: bytes / events,
      walPerEvent: l.walPerEvent,
      consume,
      slice,
      statusMs,
      maintainMs,
      loadSeconds: l.seconds,
    };
  });
}
