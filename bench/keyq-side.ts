/**
 * The keyq side of every scenario. Each call makes a fresh schema, migrates
 * it, measures, and drops it.
 *
 * @module
 */

import { type Consumer, type Executor, type Keyq, keyq, type KeyqEvent, type RunReport } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { analyzeSchema, APP, connect, dropSchema, freshSchema, rowsRead, type Sql, waitBackendsGone } from "./db.ts";
import type { ConsumeResult, LatencyResult, Sizes } from "./sizes.ts";
import { type BenchEvent, type FilePayload, type KeyMix, makeEvents, nowMs, produceSteadily, quantile, sleep, until } from "./util.ts";

/** The queue every keyq scenario uses. */
export const QUEUE = "files";
const EVENT_TABLES = "event\\_%";

/** Tier B as documented (`q.ordered(queue, name, { slots, onFailure })`), typed here until it lands. */
interface OrderedConsumer {
  subscribe?(): Promise<boolean>;
  run(options: {
    worker: number;
    workers: number;
    handler: (event: KeyqEvent<FilePayload>, tx: Executor) => void | Promise<void>;
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
  const q = keyq({ name: "probe", query: () => Promise.resolve([]) }) as Keyq;
  return orderedOf(q) !== undefined;
}

/** A client over its own connection. */
export interface Client {
  q: Keyq;
  sql: Sql;
}

function client(schema: string, app: string): Client {
  const sql = connect(app);
  return { q: keyq(fromPostgresJs(sql), { schema }), sql };
}

/** A fresh schema with the engine and one queue; the returned loader client is open. */
export async function setup(tag: string, retry?: { maxRetries: number; retryBase: number }): Promise<{ schema: string; loader: Client }> {
  const schema = freshSchema(`kqb_${tag}`);
  const loader = client(schema, `${APP}-load`);
  await loader.q.migrate();
  // A long rotation period: no rotation in the middle of a measurement.
  await loader.q.createQueue(QUEUE, { rotationPeriod: "1 hour", ...(retry ?? {}) });
  return { schema, loader };
}

/** Closes the clients and drops the schema. */
export async function teardown(admin: Sql, schema: string, ...clients: Client[]): Promise<void> {
  await Promise.all(clients.map((c) => c.sql.end({ timeout: 5 })));
  await dropSchema(admin, schema);
}

function toSend(e: BenchEvent, sentAt = 0) {
  return { type: e.type, key: e.key, payload: { ...e.payload, sentAt } };
}

/** Loads events with sendBatch (not timed). */
export async function load(q: Keyq, events: BenchEvent[], batchSize: number): Promise<void> {
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
 * (one set-based claim of `n` keys); milliseconds for the call.
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
type AnyConsumer = Consumer<FilePayload> | OrderedConsumer;

/** What a scenario varies: key mix, a writing handler, Tier A's deferDelay (default: the engine's), batch size. */
export interface ConsumeOptions {
  failFirst?: boolean;
  mix?: KeyMix;
  /** The handler inserts one row into `bench_sink` through `tx`. */
  insert?: boolean;
  /** Tier A deferDelay in ms; undefined leaves the engine's default. */
  deferMs?: number;
  /** maxEvents; undefined leaves the engine's default. */
  maxEvents?: number;
  /**
   * The workers first read the same events as a second consumer (not
   * measured), so the measured run meets connections whose backends already
   * compiled the engine's functions and planned its statements.
   */
  warm?: boolean;
}

/** RunReport's statement count, whatever this build calls it (`statements` or `roundTrips`). */
function statementsOf(r: RunReport): number {
  const rec = r as unknown as Record<string, number | undefined>;
  return rec.statements ?? rec.roundTrips ?? Number.NaN;
}

/** The table a writing handler inserts into (same shape on the pg-boss side). */
export function sinkDdl(schema: string): string {
  return `create table "${schema}".bench_sink (event_id text not null, key text not null, seq int not null)`;
}

/** The writing handler's one statement (keyq's handler and the no-queue ceiling). */
export function sinkInsert(schema: string): string {
  return `insert into "${schema}".bench_sink (event_id, key, seq) values ($1, $2, $3::int)`;
}

function makeConsumer(q: Keyq, kind: Kind, name: string, sizes: Sizes, o: ConsumeOptions): AnyConsumer | null {
  if (kind === "plain") return q.consumer<FilePayload>(QUEUE, name);
  if (kind === "exclusive") return q.exclusive<FilePayload>(QUEUE, name, o.deferMs === undefined ? {} : { deferDelay: o.deferMs });
  const ordered = orderedOf(q);
  return ordered ? ordered(QUEUE, name, { slots: sizes.slots }) : null;
}

/** What `drive` counted: seconds to the n-th handled event, and RunReport sums. */
export interface Drive {
  seconds: number;
  deliveries: number;
  batches: number;
  statements: number;
  deferred: number;
}

/**
 * `pool.length` workers (one connection each) call `run()` in a loop on
 * consumer `name` until `n` events were handled; seconds from the start to
 * the n-th handled event.
 */
export async function drive(pool: Client[], kind: Kind, name: string, n: number, sizes: Sizes, o: ConsumeOptions, schema: string): Promise<Drive> {
  let handled = 0;
  const d: Drive = { seconds: 0, deliveries: 0, batches: 0, statements: 0, deferred: 0 };
  let doneAt = 0;
  const insert = sinkInsert(schema);
  let broken: unknown;
  const handler = async (ev: KeyqEvent<FilePayload>, tx: Executor) => {
    d.deliveries++;
    if (o.failFirst && ev.retry === 0) throw new Error("first delivery fails");
    // A failing insert is a bench bug: stop every loop at once rather than retry until the timeout.
    if (o.insert) {
      await tx.query(insert, [ev.id, ev.key ?? "", String(ev.payload.seq)]).catch((err: unknown) => {
        broken ??= err;
        throw err;
      });
    }
    if (++handled === n) doneAt = performance.now();
  };
  const t0 = performance.now();
  let stopAll = false;
  await Promise.allSettled(
    pool.map(async (c, w) => {
      const consumer = makeConsumer(c.q, kind, name, sizes, o)!;
      const common = { handler, budgetMs: 30_000, ...(o.maxEvents === undefined ? {} : { maxEvents: o.maxEvents }) };
      while (handled < n && !stopAll) {
        if (broken) throw broken;
        const r: RunReport = kind === "ordered"
          ? await (consumer as OrderedConsumer).run({ ...common, worker: w, workers: pool.length })
          : await (consumer as Consumer<FilePayload>).run(common);
        d.batches += r.batches;
        d.statements += statementsOf(r);
        d.deferred += r.deferred ?? 0;
        if (r.batches === 0) await sleep(2);
        if (performance.now() - t0 > 300_000) throw new Error(`keyq ${kind}: not done after 300 s (${handled}/${n})`);
      }
    }).map((p) =>
      p.catch((err: unknown) => {
        stopAll = true; // stops the other loops; the first error is reported once all have ended
        throw err;
      })
    ),
  ).then((all) => {
    const bad = all.find((r) => r.status === "rejected");
    if (bad) throw bad.reason;
  });
  d.seconds = (doneAt - t0) / 1000;
  return d;
}

/** `workers` clients on `schema`, connected, tagged `${tag}-<i>`. */
export async function openPool(schema: string, tag: string, workers: number): Promise<Client[]> {
  const pool: Client[] = [];
  for (let i = 0; i < workers; i++) {
    const c = client(schema, `${tag}-${i}`);
    await c.sql.unsafe("select 1");
    pool.push(c);
  }
  return pool;
}

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
  o: ConsumeOptions = {},
): Promise<ConsumeResult | null> {
  const { schema, loader } = await setup(kind, o.failFirst ? { maxRetries: 5, retryBase: 1 } : undefined);
  const tag = `${APP}-w${kind}`;
  const pool: Client[] = [];
  try {
    const first = makeConsumer(loader.q, kind, "bench", sizes, o);
    if (!first) return null;
    await first.subscribe?.();
    if (o.warm) await makeConsumer(loader.q, kind, "warmup", sizes, o)!.subscribe?.();
    if (o.insert) await loader.sql.unsafe(sinkDdl(schema));
    await load(loader.q, makeEvents(n, seed, o.mix), sizes.batchSize);
    await analyzeSchema(admin, schema);
    await loader.sql.end({ timeout: 5 });
    await waitBackendsGone(admin, `${APP}-load`);
    pool.push(...await openPool(schema, tag, workers));
    if (o.warm) await drive(pool, kind, "warmup", n, sizes, o, schema);
    const before = await rowsRead(admin, schema, EVENT_TABLES);
    const d = await drive(pool, kind, "bench", n, sizes, o, schema);
    await Promise.all(pool.splice(0).map((c) => c.sql.end({ timeout: 5 })));
    await waitBackendsGone(admin, tag);
    const after = await rowsRead(admin, schema, EVENT_TABLES);
    return {
      eventsPerSec: n / d.seconds,
      roundTripsPerBatch: d.statements / d.batches,
      eventsPerBatch: d.deliveries / d.batches,
      readAmp: (after - before) / n,
      deliveries: d.deliveries,
      deferred: d.deferred,
    };
  } finally {
    await teardown(admin, schema, loader, ...pool);
  }
}

/** Plain consumer, one worker. */
export function consumePlain(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "plain", sizes.plainEvents, 1, { maxEvents: sizes.maxEvents });
}

/** Tier A, `workers` workers, handler no-op. */
export function consumeExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "exclusive", sizes.exclusiveEvents, sizes.workers, { deferMs: sizes.deferMs, maxEvents: sizes.maxEvents });
}

/**
 * Tier A, `workers` workers, `writeKeys` uniform keys (plus a hot key when
 * `hot`), the handler inserts one row through `tx`; engine defaults otherwise
 * (deferDelay, maxEvents).
 */
export function exclusiveWrite(admin: Sql, sizes: Sizes, seed: number, hot: boolean): Promise<ConsumeResult | null> {
  const mix: KeyMix = hot ? { keys: sizes.writeKeys, hotShare: sizes.hotPercent / 100 } : { keys: sizes.writeKeys };
  const n = hot ? sizes.hotEvents : sizes.writeEvents;
  return consume(admin, sizes, seed, "exclusive", n, sizes.workers, { mix, insert: true });
}

/** Tier A with a handler that fails every event's first delivery; events/s of retried events. */
export function retryExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "exclusive", sizes.retryEvents, sizes.workers, {
    failFirst: true,
    deferMs: sizes.deferMs,
    maxEvents: sizes.maxEvents,
  });
}

/** Tier B (ordered, `slots` slots, static assignment over `workers`); null while Tier B does not exist. */
export function consumeOrdered(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "ordered", sizes.orderedEvents, sizes.workers, { maxEvents: sizes.maxEvents });
}

/** Tier B as above with the engine's default maxEvents (what a user gets), over `n` events (default orderedEvents). */
export function consumeOrderedDefault(admin: Sql, sizes: Sizes, seed: number, n: number = sizes.orderedEvents): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "ordered", n, sizes.workers);
}

/**
 * Tier B as consumeOrderedDefault, measured on connections that have just
 * read the same events as another consumer: without each fresh backend's
 * cold first batches (functions compiled, statements planned, ~20-40 ms each).
 */
export function consumeOrderedWarm(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "ordered", sizes.orderedEvents, sizes.workers, { warm: true });
}

/** One plain consumer over Tier B's `n` events (default orderedEvents), default maxEvents: the rate Tier B should reach. */
export function consumePlainLikeOrdered(admin: Sql, sizes: Sizes, seed: number, n: number = sizes.orderedEvents): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "plain", n, 1);
}

/** One plain consumer over Tier B's events in batches of `maxEvents`: the engine's cost per batch of that size, without slots. */
export function consumePlainLikeOrderedSmall(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult | null> {
  return consume(admin, sizes, seed, "plain", sizes.orderedEvents, 1, { maxEvents: sizes.maxEvents });
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
    const { total } = await produceSteadily(sizes.rate, sizes.seconds, seed, 5, (evs, at) => loader.q.sendBatch(QUEUE, evs.map((e) => toSend(e, at))));
    await until(() => latencies.length >= total, 60_000, `keyq latency: ${total} events handled`);
    abort.abort();
    await Promise.all(working);
    return { p50: quantile(latencies, 0.5), p95: quantile(latencies, 0.95), count: latencies.length };
  } finally {
    abort.abort();
    await teardown(admin, schema, loader, ...pool);
  }
}
