/**
 * Sizes and result shapes shared by the two sides of the benchmark.
 *
 * @module
 */

/** How big each scenario is. Both systems get the same sizes. */
export interface Sizes {
  /** Single sends timed in the produce scenario. */
  sends: number;
  /** Events sent in batches of `batchSize` in the produce scenario. */
  batchEvents: number;
  /** Events per producer batch (keyq `sendBatch`, pg-boss `insert`). */
  batchSize: number;
  /** Events consumed by the plain consumer (1 worker). */
  plainEvents: number;
  /** Events consumed by 4 Tier A workers. */
  exclusiveEvents: number;
  /** Events per consumer batch (keyq `maxEvents`, pg-boss `batchSize`). */
  maxEvents: number;
  /** Concurrent workers of the Tier A, retry and Tier B scenarios, one connection each. */
  workers: number;
  /** Steady producer rate of the latency scenario (events/s). */
  rate: number;
  /** Seconds the latency scenario produces for. */
  seconds: number;
  /** Idle poll interval of every consumer loop (both systems), ms. */
  pollMs: number;
  /** Events that each fail once in the retry scenario. */
  retryEvents: number;
  /** Events consumed in the Tier B scenario. */
  orderedEvents: number;
  /**
   * Events of the second "Tier B vs one plain consumer" row: long enough that
   * each fresh connection's cold first batch (functions compiled, statements
   * prepared, ~20 ms) weighs little against the rate.
   */
  orderedLongEvents: number;
  /** Tier B slots. */
  slots: number;
  /** Tier A: how long a deferred (key held elsewhere) event waits, ms. */
  deferMs: number;
  /** keyq only: events of the smaller single `sendBatch` call with a dedup key each. */
  dedupSmall: number;
  /** keyq only: events of the larger single `sendBatch` call with a dedup key each. */
  dedupLarge: number;
  /** Events of the Tier A scenarios whose handler inserts one row through `tx`. */
  writeEvents: number;
  /** Distinct keys, drawn uniformly, of the writing Tier A scenarios. */
  writeKeys: number;
  /** Events of the hot-key Tier A scenario (pg-boss takes one hot job per fetch: keep it small). */
  hotEvents: number;
  /** Share of the events on one hot key in the hot-key Tier A scenario, in percent. */
  hotPercent: number;
  /** Backlog of the plain read-limit scenario (consumed with a no-op handler). */
  backlogEvents: number;
  /** Connections of the raw keyset read (the read-limit reference). */
  rawConns: number;
  /** Statements timed per driver in the round-trip scenario. */
  rtStatements: number;
  /** Queues in the schema of the many-queues scenario (its reference: the same with 10). */
  manyQueues: number;
  /** Timed runs per side of the many-queues scenario (medians). */
  queueSamples: number;
}

/** Defaults of a full run (its output header says how long it took). */
export const FULL: Sizes = {
  sends: 1_000,
  batchEvents: 20_000,
  batchSize: 1_000,
  plainEvents: 20_000,
  exclusiveEvents: 10_000,
  maxEvents: 100,
  workers: 4,
  rate: 400,
  seconds: 5,
  pollMs: 20,
  retryEvents: 3_000,
  orderedEvents: 10_000,
  orderedLongEvents: 50_000,
  slots: 8,
  deferMs: 20,
  dedupSmall: 10_000,
  dedupLarge: 100_000,
  writeEvents: 10_000,
  writeKeys: 1_000,
  hotEvents: 2_000,
  hotPercent: 50,
  backlogEvents: 100_000,
  rawConns: 4,
  rtStatements: 200,
  manyQueues: 1_000,
  queueSamples: 15,
};

/** `--quick`: a ~30 s smoke run. */
export const QUICK: Sizes = {
  ...FULL,
  sends: 300,
  batchEvents: 3_000,
  plainEvents: 3_000,
  exclusiveEvents: 3_000,
  rate: 200,
  seconds: 2,
  retryEvents: 1_000,
  orderedEvents: 3_000,
  orderedLongEvents: 10_000,
  dedupSmall: 2_000,
  dedupLarge: 20_000,
  writeEvents: 2_000,
  hotEvents: 400,
  backlogEvents: 10_000,
  rtStatements: 50,
  manyQueues: 100,
  queueSamples: 7,
};

/** What a throughput scenario measured on one side. */
export interface ConsumeResult {
  /** Events handled per second, wall clock, first batch to last. */
  eventsPerSec: number;
  /** Statements (keyq: RunReport.statements; pg-boss: pg queries) per non-empty batch. */
  roundTripsPerBatch: number;
  /** Average events per non-empty batch. */
  eventsPerBatch: number;
  /** Rows read from the log tables per handled event (keyq: event_*; pg-boss: job*). */
  readAmp: number;
  /** Handler deliveries (more than the events when some failed or were deferred). */
  deliveries: number;
  /** Tier A: events put back because another worker held their key (RunReport.deferred summed). */
  deferred?: number;
  /** Errors the consume loop met and retried (pg-boss fetch deadlocks), if any. */
  errors?: string;
}

/** What the latency scenario measured on one side. */
export interface LatencyResult {
  /** Milliseconds from the producer's send call to the handler, median. */
  p50: number;
  /** 95th percentile, ms. */
  p95: number;
  /** 99th percentile, ms. */
  p99?: number;
  /** Events measured. */
  count: number;
}
