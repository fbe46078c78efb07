/**
 * The keyq side of every scenario. Each call makes a fresh schema, migrates
 * it, measures, and drops it.
 *
 * @module
 */

import { type Consumer, type Keyq, keyq, type KeyqEvent, type RunReport } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, analyzeSchema, connect, dropSchema, freshSchema, rowsRead, type Sql, waitBackendsGone } from "./db.ts";
import type { ConsumeResult, LatencyResult, Sizes } from "./sizes.ts";
import { type BenchEvent, type FilePayload, makeEvents, nowMs, quantile, sleep, until } from "./util.ts";

const QUEUE = "files";
const EVENT_TABLES = "event\\_%";

/** Tier B as documented (`q.ordered(queue, name, { slots, onFailure })`), typed here until it lands. */
interface OrderedConsumer {
  subscribe?(): Promise<boolean>;
  run(options: {
    worker: number;
    workers: number;
    handler: (event: KeyqEvent<FilePayload>) => void | Promise<void>;
    budgetMs?: number;
    maxEvents?: number;
  }): Promise<RunReport>;
}
type OrderedFn = (queue: string, name: string, options: { slots: number; onFailure?: "skip" | "pause" }) => OrderedConsumer;

/** `q.ordered` when this build of keyq has Tier B, else undefined. */
export function orderedOf(q: Keyq): OrderedFn | undefined {
  const fn = (q as unknown as { ordered?: unknown }).ordered;
  return typeof fn === "function" ? (fn.bind(q) as OrderedFn) : undefined;
}

/** True when this build of keyq has Tier B (`q.ordered`). */
export function hasTierB(): boolean {
  const q = keyq({ name: "probe", query: () => Promise.resolve([]) });
  return orderedOf(q) !== undefined;
}

/** A client over its own connection. */
interface Client {
  q: Keyq;
  sql: Sql;
}

function client(schema: string, app: string): Client {
  const sql = connect(app);
  return { q: keyq(fromPostgresJs(sql), { schema }), sql };
}

/** A fresh schema with the engine and one queue; the returned loader client is open. */
async function setup(tag: string, retry?: { maxRetries: number; retryBase: number }): Promise<{ schema: string; loader: Client }> {
  const schema = freshSchema(`kqb_${tag}`);
  const loader = client(schema, `${APP}-load`);
  await loader.q.migrate();
  // A long rotation period: no rotation in the middle of a measurement.
  await loader.q.createQueue(QUEUE, { rotationPeriod: "1 hour", ...(retry ?? {}) });
  return { schema, loader };
}

async function teardown(admin: Sql, schema: string, ...clients: Client[]): Promise<void> {
  await Promise.all(clients.map((c) => c.sql.end({ timeout: 5 })));
  await dropSchema(admin, schema);
}

function toSend(e: BenchEvent, sentAt = 0) {
  return { type: e.type, key: e.key, payload: { ...e.payload, sentAt } };
}

/** Loads events with sendBatch (not timed). */
async function load(q: Keyq, events: BenchEvent[], batchSize: number): Promise<void> {
  for (let i = 0; i < events.length; i += batchSize) {
    await q.sendBatch(QUEUE, events.slice(i, i + batchSize).map((e) => toSend(e)));
  }
}

/** Produce: `send` one event at a time on one connection; events/s. */
export async function produceSingle(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const { schema, loader } = await setup("send");
  try {
    const events = makeEvents(sizes.sends + 20, seed);
    for (const e of events.slice(0, 20)) await loader.q.send(QUEUE, toSend(e)); // warm-up
    const t0 = performance.now();
    for (const e of events.slice(20)) await loader.q.send(QUEUE, toSend(e));
    return sizes.sends / ((performance.now() - t0) / 1000);
  } finally {
    await teardown(admin, schema, loader);
  }
}

/** Produce: `sendBatch` of `batchSize` events on one connection; events/s. */
export async function produceBatch(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const { schema, loader } = await setup("batch");
  try {
    const events = makeEvents(sizes.batchEvents, seed).map((e) => toSend(e));
    await loader.q.sendBatch(QUEUE, events.slice(0, sizes.batchSize)); // warm-up
    const t0 = performance.now();
    for (let i = 0; i < events.length; i += sizes.batchSize) {
      await loader.q.sendBatch(QUEUE, events.slice(i, i + sizes.batchSize));
    }
    return sizes.batchEvents / ((performance.now() - t0) / 1000);
  } finally {
    await teardown(admin, schema, loader);
  }
}

/**
 * Produce: one `sendBatch` call of `n` events, each with its own dedup key
 * (the engine's per-event claim path); milliseconds for the call.
 */
export async function produceDedup(admin: Sql, n: number, seed: number): Promise<number> {
  const { schema, loader } = await setup("dedup");
  try {
    const events = makeEvents(n, seed).map((e, i) => ({ ...toSend(e), dedupKey: `d-${seed}-${i}` }));
    await loader.q.sendBatch(QUEUE, events.slice(0, 10).map((e) => ({ ...e, dedupKey: `warm-${e.dedupKey}` })));
    const t0 = performance.now();
    await loader.q.sendBatch(QUEUE, events);
    return performance.now() - t0;
  } finally {
    await teardown(admin, schema, loader);
  }
}

type Kind = "plain" | "exclusive" | "ordered";

/**
 * Throughput of one consumer kind: `n` events loaded up front (then ANALYZE),
 * `workers` workers on their own connections consume until every event was
 * handled. Read amplification comes from pg_stat_user_tables deltas over
 * the event tables around the consume phase.
 */
async function consume(
  admin: Sql,
  sizes: Sizes,
  seed: number,
  kind: Kind,
  n: number,
  workers: number,
  opts: { failFirst?: boolean } = {},
): Promise<ConsumeResult | null> {
  const { schema, loader } = await setup(kind, opts.failFirst ? { maxRetries: 5, retryBase: 1 } : undefined);
  const tag = `${APP}-w${kind}`;
  const pool: Client[] = [];
  try {
    const make = (q: Keyq) => {
      if (kind === "plain") return q.consumer<FilePayload>(QUEUE, "bench");
      if (kind === "exclusive") return q.exclusive<FilePayload>(QUEUE, "bench", { deferDelay: sizes.deferMs });
      const ordered = orderedOf(q);
      if (!ordered) return null;
      return ordered(QUEUE, "bench", { slots: sizes.slots });
    };
    const first = make(loader.q);
    if (!first) return null;
    await first.subscribe?.();
    await load(loader.q, makeEvents(n, seed), sizes.batchSize);
    await analyzeSchema(admin, schema);
    await loader.sql.end({ timeout: 5 });
    await waitBackendsGone(admin, `${APP}-load`);
    const before = await rowsRead(admin, schema, EVENT_TABLES);

    for (let i = 0; i < workers; i++) {
      const c = client(schema, `${tag}-${i}`);
      await c.sql.unsafe("select 1");
      pool.push(c);
    }
    let handled = 0;
    let deliveries = 0;
    let batches = 0;
    let roundTrips = 0;
    let doneAt = 0;
    const handler = (ev: KeyqEvent<FilePayload>) => {
      deliveries++;
      if (opts.failFirst && ev.retry === 0) throw new Error("first delivery fails");
      if (++handled === n) doneAt = performance.now();
    };
    const t0 = performance.now();
    let stopAll = false;
    await Promise.allSettled(pool.map(async (c, w) => {
      const consumer = make(c.q)!;
      const common = { handler, budgetMs: 30_000, maxEvents: sizes.maxEvents };
      while (handled < n && !stopAll) {
        const r: RunReport = kind === "ordered"
          ? await (consumer as OrderedConsumer).run({ ...common, worker: w, workers })
          : await (consumer as Consumer<FilePayload>).run(common);
        batches += r.batches;
        roundTrips += r.roundTrips;
        if (r.batches === 0) await sleep(2);
        if (performance.now() - t0 > 300_000) throw new Error(`keyq ${kind}: not done after 300 s (${handled}/${n})`);
      }
    }).map((p) => p.catch((err: unknown) => {
      stopAll = true; // stops the other loops; the first error is reported once all have ended
      throw err;
    }))).then((all) => {
      const bad = all.find((r) => r.status === "rejected");
      if (bad) throw bad.reason;
    });
    const seconds = (doneAt - t0) / 1000;
    await Promise.all(pool.splice(0).map((c) => c.sql.end({ timeout: 5 })));
    await waitBackendsGone(admin, tag);
    const after = await rowsRead(admin, schema, EVENT_TABLES);
    return {
      eventsPerSec: n / seconds,
      roundTripsPerBatch: roundTrips / batches,
      eventsPerBatch: deliveries / batches,
      readAmp: (after - before) / n,
      deliveries,
    };
  } finally {
    await teardown(admin, schema, loader, ...pool);
  }
}

/** Plain consumer, one worker. */
export function consumePlain(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "plain", sizes.plainEvents, 1);
}

/** Tier A, `workers` workers, handler no-op. */
export function consumeExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "exclusive", sizes.exclusiveEvents, sizes.workers);
}

/** Tier A with a handler that fails every event's first delivery; events/s of retried events. */
export function retryExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "exclusive", sizes.retryEvents, sizes.workers, { failFirst: true });
}

/** Tier B (ordered, `slots` slots, static assignment over `workers`); null while Tier B does not exist. */
export function consumeOrdered(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "ordered", sizes.orderedEvents, sizes.workers);
}

/**
 * Latency of Tier A: `workers` workers run `work()` (idle poll `pollMs`)
 * while one producer sends at a steady `rate` for `seconds`; each payload
 * carries its send time, and the handler records now − sentAt.
 */
export async function latencyExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<LatencyResult> {
  const { schema, loader } = await setup("lat");
  const tag = `${APP}-wlat`;
  const pool: Client[] = [];
  const abort = new AbortController();
  try {
    await loader.q.exclusive(QUEUE, "bench").subscribe();
    for (let i = 0; i < sizes.workers; i++) {
      const c = client(schema, `${tag}-${i}`);
      await c.sql.unsafe("select 1");
      pool.push(c);
    }
    const latencies: number[] = [];
    const working = pool.map((c) =>
      c.q.exclusive<FilePayload>(QUEUE, "bench", { deferDelay: sizes.deferMs }).work({
        signal: abort.signal,
        minPollMs: sizes.pollMs,
        maxPollMs: sizes.pollMs,
        maxEvents: sizes.maxEvents,
        budgetMs: 30_000,
        handler: (ev) => void latencies.push(nowMs() - ev.payload.sentAt),
      })
    );
    const total = Math.round(sizes.rate * sizes.seconds);
    const events = makeEvents(total, seed);
    let sent = 0;
    const t0 = performance.now();
    while (sent < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * sizes.rate));
      if (due > sent) {
        const at = nowMs();
        await loader.q.sendBatch(QUEUE, events.slice(sent, due).map((e) => toSend(e, at)));
        sent = due;
      }
      await sleep(5);
    }
    await until(() => latencies.length >= total, 60_000, `keyq latency: ${total} events handled`);
    abort.abort();
    await Promise.all(working);
    return { p50: quantile(latencies, 0.5), p95: quantile(latencies, 0.95), count: latencies.length };
  } finally {
    abort.abort();
    await teardown(admin, schema, loader, ...pool);
  }
}
