/**
 * Consumers: plain (one cursor, every event in order) and exclusive (Tier A:
 * many workers, one per key at a time). Each batch is one transaction; `run`
 * and `work` are shared.
 *
 * @module
 */

import { type BatchSettings, batchSettings, type ConsumerContext, runBatch, type Target } from "./batch.ts";
import { runLoop, workLoop } from "./loop.ts";
import { call } from "./sql.ts";
import type { BatchOptions, BatchReport, RunOptions, RunReport, WorkOptions } from "./types.ts";
import { checkName } from "./validate.ts";

/**
 * A consumer of a queue. Every kind has the same calls; what a batch reads
 * and who may run it at once depends on the kind.
 */
export interface Consumer<P = unknown> {
  readonly queue: string;
  readonly name: string;
  /** Creates the consumer at the queue's newest tick (idempotent); true when it was new. */
  subscribe(): Promise<boolean>;
  /** Removes the consumer with its cursor, retries and dead letters; true when it existed. */
  unsubscribe(): Promise<boolean>;
  /** Consumes one batch in one transaction. */
  batch(options: BatchOptions<P>): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: RunOptions<P>): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: WorkOptions<P>): Promise<RunReport>;
}

/** How one kind of consumer prepares a run and reads a batch. */
export interface ConsumerKind {
  kind: "plain" | "exclusive" | "ordered";
  slots?: number;
  /** Engine-side settings persisted with the consumer (retry overrides…). */
  settings: Record<string, unknown>;
  /** Ticks (and plans); true when a tick was written. */
  prepare(s: BatchSettings): Promise<boolean>;
  /** One batch. */
  batch(s: BatchSettings): Promise<BatchReport>;
}

/** Builds the shared consumer surface around one kind. */
export function makeConsumer<P>(
  ctx: ConsumerContext,
  queue: string,
  name: string,
  kind: (subscribe: () => Promise<boolean>) => ConsumerKind,
): Consumer<P> {
  checkName("queue", queue);
  checkName("consumer", name);
  let subscribed = false;
  const subscribe = async (): Promise<boolean> => {
    const r = await call<{ created: boolean }>(ctx.driver, ctx.schema, "subscribe", [
      ["queue", "text", queue],
      ["consumer", "text", name],
      ["kind", "text", k.kind],
      ["slots", "int", k.slots ?? 1],
      ["settings", "jsonb", k.settings],
    ]);
    subscribed = true;
    return r.created;
  };
  const k = kind(subscribe);
  const run = async (s: BatchSettings): Promise<RunReport> => {
    if (!subscribed) await subscribe();
    return await runLoop(s, () => k.prepare(s), () => ctx.maintain(queue), () => k.batch(s));
  };
  return {
    queue,
    name,
    subscribe,
    async unsubscribe() {
      const r = await call<{ removed: boolean }>(ctx.driver, ctx.schema, "unsubscribe", [
        ["queue", "text", queue],
        ["consumer", "text", name],
      ]);
      subscribed = false;
      return r.removed;
    },
    batch: async (options) => await k.batch(batchSettings(options, "batch options")),
    run: async (options) => await run(batchSettings(options, "run options")),
    async work(options) {
      const s = batchSettings(options, "work options");
      return await workLoop(s, () => run(s));
    },
  };
}

/** The plain kind: one cursor; a second worker finds it busy and skips. */
export function plainKind(ctx: ConsumerContext, queue: string, name: string, settings: Record<string, unknown>): ConsumerKind {
  const target: Target = { queue, consumer: name, slot: 0 };
  return {
    kind: "plain",
    settings,
    prepare: () => ctx.tick(queue),
    batch: (s) =>
      runBatch(ctx, s, "receive", [["queue", "text", queue], ["consumer", "text", name], ["max_events", "int", s.maxEvents]], () => target),
  };
}

/**
 * Tier A: any worker takes any chunk of any window, at most one worker holds
 * a key at a time. Contended keys are dropped (`idempotent`) or deferred
 * without spending a retry.
 */
export function exclusiveKind(
  ctx: ConsumerContext,
  queue: string,
  name: string,
  settings: Record<string, unknown>,
  idempotent: boolean,
  deferDelayS: number,
): ConsumerKind {
  const target: Target = { queue, consumer: name, slot: 0, contended: idempotent ? "drop" : "defer", deferDelay: deferDelayS };
  return {
    kind: "exclusive",
    settings,
    async prepare(s) {
      const r = await call<{ tick: string | null }>(ctx.driver, ctx.schema, "prepare_exclusive", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["chunk_size", "int", s.maxEvents],
      ]);
      return r.tick !== null;
    },
    batch: (s) =>
      runBatch(ctx, s, "receive_exclusive", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["max_events", "int", s.maxEvents],
      ], () => target),
  };
}
