/**
 * The many-queues scenario: what one consumer's `run()` and one queue's
 * `tick()` cost while the schema holds few or many queues, and what
 * `status()` and `maintain()` over all of them cost per queue. An app with a
 * queue per tenant pays this on every cron tick, so a run must not grow with
 * the number of queues (each statement touches its own queue's partitions),
 * and the all-queue calls must grow no faster than the queues they report on.
 *
 * @module
 */

import { type Keyq, keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, dropSchema, freshSchema, type Sql } from "./db.ts";
import { progress } from "./util.ts";

/** A consumer kind of the scenario: plain, Tier A (exclusive) or Tier B (ordered, 4 slots). */
export type QueueKind = "plain" | "exclusive" | "ordered";

/**
 * Median milliseconds: one warm `run()` (10 events, no-op) per kind, one cold
 * `run()` of the first kind (fresh connection), one forced `tick()`, and
 * `status()` / `maintain()` over every queue divided by the queues.
 */
export interface QueuesResult {
  run: number;
  runs: Record<QueueKind, number | undefined>;
  cold: number;
  /** The cold run() on a connection that skips postgres.js's array type fetch (`fetch_types: false`). */
  coldNoTypes: number;
  tick: number;
  statusPerQueue: number;
  maintainPerQueue: number;
  /** Milliseconds to create one queue and subscribe its consumers, the mean over all. */
  createPerQueue: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ten = Array.from({ length: 10 }, (_, j) => ({ type: "T", key: `k${j}`, payload: { j } }));

const consumerOf = (q: Keyq, queue: string, kind: QueueKind) =>
  kind === "plain" ? q.consumer(queue, "c") : kind === "exclusive" ? q.exclusive(queue, "x") : q.ordered(queue, "o", { slots: 4 });

async function runOnce(q: Keyq, kind: QueueKind): Promise<number> {
  const c = consumerOf(q, "q0", kind);
  const r = kind === "ordered"
    ? await (c as ReturnType<Keyq["ordered"]>).run({ worker: 0, workers: 1, handler: () => {} })
    : await (c as ReturnType<Keyq["consumer"]>).run({ handler: () => {} });
  return r.events;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** A schema holding `queues` queues, each with a consumer of every kind in `kinds`, ready to be sampled on queue q0. */
export interface QueuesSchema {
  queues: number;
  kinds: readonly QueueKind[];
  schema: string;
  sql: Sql;
  q: Keyq;
  createPerQueue: number;
}

/** The samples of one schema, each list in milliseconds (status and maintain per queue). */
export interface QueuesSamples {
  runs: Map<QueueKind, number[]>;
  ticks: number[];
  statuses: number[];
  maintains: number[];
  colds: number[];
  coldsNoTypes: number[];
}

/** Makes the schema with its queues (progress on stderr every 200). */
export async function buildQueues(n: number, kinds: readonly QueueKind[]): Promise<QueuesSchema> {
  const schema = freshSchema("kqb_queues");
  const sql = connect(`${APP}-queues`, { max: 1 });
  const q = keyq(fromPostgresJs(sql), { schema });
  await q.migrate();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await q.createQueue(`q${i}`, { rotationPeriod: "1 hour" });
    for (const kind of kinds) await consumerOf(q, `q${i}`, kind).subscribe();
    if (i % 200 === 199) progress(`    ${i + 1} of ${n} queues made`);
  }
  const createPerQueue = (performance.now() - t0) / n;
  await q.sendBatch("q0", ten);
  for (const kind of kinds) await runOnce(q, kind); // warm the session's caches
  return { queues: n, kinds, schema, sql, q, createPerQueue };
}

/** Empty samples to fill with `sampleQueues`. */
export function noSamples(kinds: readonly QueueKind[]): QueuesSamples {
  return { runs: new Map(kinds.map((k) => [k, []])), ticks: [], statuses: [], maintains: [], colds: [], coldsNoTypes: [] };
}

/**
 * One sample of each measure on schema `s`: a warm run() per kind (10
 * events), a forced tick(), a cold run() of the first kind (every other
 * sample without postgres.js's type fetch), and with `all` set, status()
 * and maintain() over every queue.
 */
export async function sampleQueues(s: QueuesSchema, out: QueuesSamples, i: number, all: boolean): Promise<void> {
  const { q, kinds } = s;
  await q.sendBatch("q0", ten);
  for (const kind of kinds) {
    let got = 0;
    out.runs.get(kind)!.push(await timed(async () => void (got = await runOnce(q, kind))));
    if (got !== 10) throw new Error(`${kind} run() delivered ${got} events, not 10`);
  }
  out.ticks.push(await timed(() => q.tick("q0", { force: true })));
  if (all) {
    out.statuses.push(await timed(() => q.status()) / s.queues);
    out.maintains.push(await timed(() => q.maintain()) / s.queues);
  }
  await q.sendBatch("q0", ten);
  // A fresh postgres.js connection first reads every array type of the
  // database (fetch_types), and each table adds one: timed apart.
  const fresh = connect(`${APP}-queues-cold`, { max: 1, fetchTypes: i % 2 === 0 });
  let got = 0;
  (i % 2 === 0 ? out.colds : out.coldsNoTypes).push(
    await timed(async () => void (got = await runOnce(keyq(fromPostgresJs(fresh), { schema: s.schema }), kinds[0]!))),
  );
  await fresh.end({ timeout: 5 });
  if (got !== 10) throw new Error(`a cold run() delivered ${got} events, not 10`);
  for (const kind of kinds.slice(1)) await runOnce(q, kind); // the other kinds' cursors catch up
}

/** Medians of the samples. */
export function summarizeQueues(s: QueuesSchema, x: QueuesSamples): QueuesResult {
  const runs = Object.fromEntries(["plain", "exclusive", "ordered"].map((k) => {
    const xs = x.runs.get(k as QueueKind);
    return [k, xs ? median(xs) : undefined];
  })) as Record<QueueKind, number | undefined>;
  return {
    run: median(x.runs.get(s.kinds[0]!)!),
    runs,
    cold: median(x.colds),
    coldNoTypes: median(x.coldsNoTypes),
    tick: median(x.ticks),
    statusPerQueue: median(x.statuses),
    maintainPerQueue: median(x.maintains),
    createPerQueue: s.createPerQueue,
  };
}

/** Drops the schema's queues one a transaction (one statement over 1,000 queues takes a lock per table and can fill the shared lock table), then the schema. */
export async function dropQueues(admin: Sql, s: QueuesSchema): Promise<void> {
  try {
    for (let i = 0; i < s.queues; i++) await s.q.dropQueue(`q${i}`).catch(() => false);
  } finally {
    await s.sql.end({ timeout: 5 });
    await dropSchema(admin, s.schema);
  }
}

/**
 * `many` and `few` queues side by side: both schemas are built first, then
 * every sample measures one and then the other (the order alternating), so
 * the background work of building 1,000 queues (autovacuum, checkpoints)
 * and any change in the machine's load reach both sides alike.
 */
export async function queuesPair(admin: Sql, many: number, few: number, samples: number): Promise<[QueuesResult, QueuesResult]> {
  const built: QueuesSchema[] = [];
  try {
    built.push(await buildQueues(many, ["plain"]), await buildQueues(few, ["plain"]));
    const got = [noSamples(["plain"]), noSamples(["plain"])];
    for (let i = 0; i < samples; i++) {
      for (const k of i % 2 ? [1, 0] : [0, 1]) await sampleQueues(built[k]!, got[k]!, i, i % 3 === 0);
    }
    return [summarizeQueues(built[0]!, got[0]!), summarizeQueues(built[1]!, got[1]!)];
  } finally {
    for (const s of built) await dropQueues(admin, s);
  }
}
