/**
 * Consumers: plain (one cursor, every event in order), exclusive (Tier A:
 * many workers, one per key at a time) and ordered (Tier B: N slots, FIFO per
 * key). Each batch is one transaction; `run` and `work` are shared.
 *
 * @module
 */

import { type BatchSettings, batchSettings, type ConsumerContext, runBatch, type Target } from "./batch.ts";
import { KeyqError } from "./errors.ts";
import { runLoop, workLoop } from "./loop.ts";
import { call } from "./sql.ts";
import type { BatchOptions, BatchReport, BlockedKey, RunOptions, RunReport, WorkOptions } from "./types.ts";
import { checkName } from "./validate.ts";

/**
 * A consumer of a queue. Every kind has the same calls; what a batch reads
 * and who may run it at once depends on the kind.
 */
export interface Consumer<P = unknown> {
  /** The queue it reads. */
  readonly queue: string;
  /** The consumer's name. */
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

/** A Tier B ordered consumer: the shared calls plus its slots. */
export interface OrderedConsumer<P = unknown> extends Consumer<P> {
  /** The persisted slot count N. */
  readonly slots: number;
  /** The slot of `key`: `(hashtextextended(key, 0) % N + N) % N`; null goes to slot 0. */
  slotOf(key: string | null): Promise<number>;
  /** Keys blocked behind a failed head (pause policy), with their held events. */
  blockedKeys(): Promise<BlockedKey[]>;
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

/** Settings of a Tier B kind, checked by the client. */
export interface OrderedSettings {
  slots: number;
  pause: boolean;
  /** Seconds after which a static worker helps on a slot nobody polled. */
  helpAfterS: number;
}

/**
 * Tier B: slot k of N is read by one worker at a time, in order. With
 * `worker`/`workers` a worker takes slots worker, worker + workers, … and
 * helps on any slot not polled for `helpAfter`; without them it claims slots
 * in turn from a random start. No leader, no rebalance.
 */
export function orderedKind(
  ctx: ConsumerContext,
  queue: string,
  name: string,
  settings: Record<string, unknown>,
  o: OrderedSettings,
): ConsumerKind {
  let turn = Math.floor(Math.random() * o.slots);
  const order = (s: BatchSettings): { slots: number[]; helpAfter: number | null } => {
    turn++;
    if (s.worker === undefined) {
      return { slots: Array.from({ length: o.slots }, (_, i) => (turn + i) % o.slots), helpAfter: null };
    }
    const mine: number[] = [];
    for (let k = s.worker; k < o.slots; k += s.workers!) mine.push(k);
    const start = turn % Math.max(mine.length, 1);
    return { slots: [...mine.slice(start), ...mine.slice(0, start)], helpAfter: o.helpAfterS };
  };
  return {
    kind: "ordered",
    slots: o.slots,
    settings,
    prepare: () => ctx.tick(queue),
    batch(s) {
      if (o.pause && s.handleBatch) {
        throw new KeyqError("INVALID_INPUT", 'The pause policy needs a per-event "handler" (events after a failed head are held back); use handler instead of handleBatch.', {
          field: "handleBatch",
        });
      }
      const { slots, helpAfter } = order(s);
      return runBatch(ctx, s, "receive_ordered", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["slots", "int[]", `{${slots.join(",")}}`],
        ["max_events", "int", s.maxEvents],
        ["help_after", "float8", helpAfter],
      ], (r) => ({ queue, consumer: name, slot: r.slot ?? 0, pause: o.pause, ordered: true }));
    },
  };
}

/** Adds the Tier B extras to a consumer built by `makeConsumer`. */
export function withSlots<P>(ctx: ConsumerContext, c: Consumer<P>, slots: number): OrderedConsumer<P> {
  return Object.assign(c, {
    slots,
    slotOf: (key: string | null) =>
      call<number>(ctx.driver, ctx.schema, "slot_of", [["key", "text", key], ["n", "int", slots]]),
    blockedKeys: () =>
      call<BlockedKey[]>(ctx.driver, ctx.schema, "blocked_keys", [["queue", "text", c.queue], ["consumer", "text", c.name]]),
  });
}
