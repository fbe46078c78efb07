/**
 * The pg-boss 12.38 side of every scenario: the same payloads, keys, batch
 * sizes, worker counts and poll interval as the keyq side, each call in a
 * fresh pg-boss schema that is dropped afterwards.
 *
 * Per-key exclusion is pg-boss's `singleton` queue policy with
 * `singletonKey = tenant`: at most one *active* job per key, enforced by a
 * unique partial index (job_i2) and skipped at fetch time by a NOT EXISTS
 * probe, while other keys proceed. That is Tier A's guarantee (one worker per key, no order).
 * `groupConcurrency: 1` is only a fetch-time filter with no database
 * backstop, `exclusive` allows one queued-or-active job per key (it refuses
 * the backlog at send time), and `key_strict_fifo` adds per-key order: it is
 * the peer of Tier B, not Tier A.
 *
 * @module
 */

import pg from "pg";
import { PgBoss, type QueuePolicy } from "pg-boss";
import { analyzeSchema, APP, DATABASE_URL, dropSchema, freshSchema, rowsRead, type Sql, waitBackendsGone } from "./db.ts";
import type { ConsumeResult, LatencyResult, Sizes } from "./sizes.ts";
import { sinkDdl } from "./keyq-side.ts";
import { type BenchEvent, type FilePayload, type KeyMix, makeEvents, nowMs, produceSteadily, quantile, sleep, untilAll } from "./util.ts";

const QUEUE = "files";
const JOB_TABLES = "job%";

/** Every query pg-boss sends goes through pg's Client.query (keyq uses postgres.js here): count them. */
let queries = 0;
const originalQuery = pg.Client.prototype.query;
(pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (this: unknown, ...args: unknown[]) {
  queries++;
  return (originalQuery as unknown as (...a: unknown[]) => unknown).apply(this, args);
};

/** A pg-boss instance on its own pool of `max` connections, with every background activity off. */
async function boss(schema: string, app: string, max: number, migrate: boolean): Promise<PgBoss> {
  const b = new PgBoss({
    connectionString: DATABASE_URL,
    application_name: app,
    schema,
    max,
    migrate,
    supervise: false,
    schedule: false,
    registerInstance: false,
  });
  b.on("error", (err) => console.error(`pg-boss error (${app}):`, err));
  await b.start();
  return b;
}

async function stop(b: PgBoss): Promise<void> {
  await b.stop({ graceful: false, close: true, timeout: 5_000 });
}

/** A fresh schema with pg-boss installed and one queue of `policy`. */
async function setup(
  tag: string,
  policy: QueuePolicy,
  retry?: { retryLimit: number; retryDelay: number },
): Promise<{ schema: string; loader: PgBoss }> {
  const schema = freshSchema(`pgb_${tag}`);
  const loader = await boss(schema, `${APP}-load`, 1, true);
  await loader.createQueue(QUEUE, { policy, retryLimit: retry?.retryLimit ?? 0, retryDelay: retry?.retryDelay ?? 0 });
  return { schema, loader };
}

function toJob(e: BenchEvent, sentAt = 0) {
  return { data: { ...e.payload, sentAt }, singletonKey: e.key };
}

/** Produce: `send` one job at a time; jobs/s. */
export async function produceSingle(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const { schema, loader } = await setup("send", "singleton");
  try {
    const events = makeEvents(sizes.sends + 20, seed);
    for (const e of events.slice(0, 20)) await loader.send(QUEUE, { ...e.payload }, { singletonKey: e.key });
    const t0 = performance.now();
    for (const e of events.slice(20)) await loader.send(QUEUE, { ...e.payload }, { singletonKey: e.key });
    return sizes.sends / ((performance.now() - t0) / 1000);
  } finally {
    await stop(loader);
    await dropSchema(admin, schema);
  }
}

/** Produce: `insert` of `batchSize` jobs; jobs/s. */
export async function produceBatch(admin: Sql, sizes: Sizes, seed: number): Promise<number> {
  const { schema, loader } = await setup("batch", "singleton");
  try {
    const jobs = makeEvents(sizes.batchEvents, seed).map((e) => toJob(e));
    await loader.insert(QUEUE, jobs.slice(0, sizes.batchSize));
    const t0 = performance.now();
    for (let i = 0; i < jobs.length; i += sizes.batchSize) await loader.insert(QUEUE, jobs.slice(i, i + sizes.batchSize));
    return sizes.batchEvents / ((performance.now() - t0) / 1000);
  } finally {
    await stop(loader);
    await dropSchema(admin, schema);
  }
}

/**
 * Throughput with `workers` pg-boss instances (one connection each) looping
 * fetch → handle → complete (or fail, for first deliveries when `failFirst`),
 * the loop keyq's `run()` does; idle fetches sleep 2 ms, as on the keyq side.
 */
async function consume(
  admin: Sql,
  sizes: Sizes,
  seed: number,
  policy: QueuePolicy,
  n: number,
  workers: number,
  opts: { failFirst?: boolean; mix?: KeyMix; insert?: boolean } = {},
): Promise<ConsumeResult> {
  const { schema, loader } = await setup(policy, policy, opts.failFirst ? { retryLimit: 5, retryDelay: 0 } : undefined);
  const tag = `${APP}-w${policy}`;
  const pool: PgBoss[] = [];
  try {
    const events = makeEvents(n, seed, opts.mix);
    if (opts.insert) await loader.getDb().executeSql(sinkDdl(schema));
    for (let i = 0; i < n; i += sizes.batchSize) await loader.insert(QUEUE, events.slice(i, i + sizes.batchSize).map((e) => toJob(e)));
    await stop(loader);
    await analyzeSchema(admin, schema);
    await waitBackendsGone(admin, `${APP}-load`);
    const before = await rowsRead(admin, schema, JOB_TABLES);
    for (let i = 0; i < workers; i++) pool.push(await boss(schema, `${tag}-${i}`, 1, false));

    let handled = 0;
    let deliveries = 0;
    let batches = 0;
    let doneAt = 0;
    let retries = 0;
    let lastError = "";
    const retrying = async <T>(fn: () => Promise<T>): Promise<T> => {
      for (let attempt = 1;; attempt++) {
        try {
          return await fn();
        } catch (err) {
          if (attempt >= 20) throw err;
          retries++;
          lastError = (err as Error).message;
          await sleep(2);
        }
      }
    };
    const insert = `insert into "${schema}".bench_sink (event_id, key, seq) values ($1, $2, $3)`;
    const q0 = queries;
    const t0 = performance.now();
    let stopAll = false;
    await Promise.allSettled(
      pool.map(async (b) => {
        while (handled < n && !stopAll) {
          // Concurrent batch fetches and completes on a singleton queue can deadlock
          // (its unique index job_i2, rows updated in different orders); the
          // statement rolls back, and the loop sends it again.
          const jobs = await retrying(() => b.fetch<FilePayload>(QUEUE, { batchSize: sizes.maxEvents }));
          if (jobs.length === 0) {
            await sleep(2);
            continue;
          }
          batches++;
          deliveries += jobs.length;
          const first = opts.failFirst ? jobs.filter((j) => j.retryCount === 0) : [];
          const done = opts.failFirst ? jobs.filter((j) => j.retryCount > 0) : jobs;
          // The same one-row insert as keyq's handler, on the worker's connection
          // (pg-boss has no transaction spanning the job and the handler's writes).
          if (opts.insert) { for (const j of done) await b.getDb().executeSql(insert, [j.id, j.data.tenant, j.data.seq]); }
          if (first.length) await retrying(() => b.fail(QUEUE, first.map((j) => j.id)));
          if (done.length) await retrying(() => b.complete(QUEUE, done.map((j) => j.id)));
          handled += done.length;
          if (handled >= n && doneAt === 0) doneAt = performance.now();
          if (performance.now() - t0 > 300_000) throw new Error(`pg-boss ${policy}: not done after 300 s (${handled}/${n})`);
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
    const trips = queries - q0;
    const seconds = (doneAt - t0) / 1000;
    await Promise.all(pool.splice(0).map(stop));
    await waitBackendsGone(admin, tag);
    const after = await rowsRead(admin, schema, JOB_TABLES);
    return {
      eventsPerSec: n / seconds,
      roundTripsPerBatch: trips / batches,
      eventsPerBatch: deliveries / batches,
      readAmp: (after - before) / n,
      deliveries,
      ...(retries ? { errors: `${retries} statement error(s) retried, e.g. "${lastError}"` } : {}),
    };
  } finally {
    await Promise.all([loader, ...pool].map(stop));
    await dropSchema(admin, schema);
  }
}

/** One worker on a `standard` queue: the peer of keyq's plain consumer. */
export function consumePlain(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult> {
  return consume(admin, sizes, seed, "standard", sizes.plainEvents, 1);
}

/** `workers` workers on a `singleton` queue keyed by tenant: the peer of Tier A. */
export function consumeExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult> {
  return consume(admin, sizes, seed, "singleton", sizes.exclusiveEvents, sizes.workers);
}

/** Tier A's writing scenario on a `singleton` queue: the same keys and one-row insert per job as keyq's. */
export function exclusiveWrite(admin: Sql, sizes: Sizes, seed: number, hot: boolean): Promise<ConsumeResult> {
  const mix: KeyMix = hot ? { keys: sizes.writeKeys, hotShare: sizes.hotPercent / 100 } : { keys: sizes.writeKeys };
  const n = hot ? sizes.hotEvents : sizes.writeEvents;
  return consume(admin, sizes, seed, "singleton", n, sizes.workers, { mix, insert: true });
}

/** Tier A's retry scenario on pg-boss: retryLimit 5, retryDelay 0, every first attempt fails. */
export function retryExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult> {
  return consume(admin, sizes, seed, "singleton", sizes.retryEvents, sizes.workers, { failFirst: true });
}

/** `workers` workers on a `key_strict_fifo` queue: FIFO per key, the peer of Tier B. */
export function consumeOrdered(admin: Sql, sizes: Sizes, seed: number): Promise<ConsumeResult> {
  return consume(admin, sizes, seed, "key_strict_fifo", sizes.orderedEvents, sizes.workers);
}

/** Latency on the `singleton` queue: `workers` fetch loops sleeping `pollMs` when idle; a steady producer. */
export async function latencyExclusive(admin: Sql, sizes: Sizes, seed: number): Promise<LatencyResult> {
  const { schema, loader } = await setup("lat", "singleton");
  const tag = `${APP}-wlat`;
  const pool: PgBoss[] = [];
  let stopped = false;
  try {
    for (let i = 0; i < sizes.workers; i++) pool.push(await boss(schema, `${tag}-${i}`, 1, false));
    const latencies: number[] = [];
    const working = pool.map(async (b) => {
      while (!stopped) {
        try {
          const jobs = await b.fetch<FilePayload>(QUEUE, { batchSize: sizes.maxEvents });
          if (jobs.length === 0) {
            await sleep(sizes.pollMs);
            continue;
          }
          for (const j of jobs) latencies.push(nowMs() - j.data.sentAt);
          await b.complete(QUEUE, jobs.map((j) => j.id));
        } catch (err) {
          // pg-boss's fetch of a singleton queue can deadlock with another fetch: retried, as its consume loops do.
          if ((err as { code?: string }).code !== "40P01") throw err;
        }
      }
    });
    const died: string[] = [];
    // Awaited below; a failure must not crash the run before that, and ends the wait with its reason.
    working.forEach((w) => w.catch((err: unknown) => died.push(err instanceof Error ? err.message : String(err))));
    const { total, ms } = await produceSteadily(sizes.rate, sizes.seconds, seed, 5, (evs, at) => loader.insert(QUEUE, evs.map((e) => toJob(e, at))));
    await untilAll(`pg-boss latency (${sizes.workers} fetch loops)`, () => latencies.length, total, {
      produceMs: ms,
      failed: () => (died.length > 0 ? `${died.length} fetch loop(s) failed: ${died[0]}` : undefined),
    });
    stopped = true;
    await Promise.all(working);
    return { p50: quantile(latencies, 0.5), p95: quantile(latencies, 0.95), p99: quantile(latencies, 0.99), count: latencies.length };
  } finally {
    stopped = true;
    await Promise.all([loader, ...pool].map(stop));
    await dropSchema(admin, schema);
  }
}
