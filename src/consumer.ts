/**
 * Consumers: plain (one cursor, every event in order), exclusive (Tier A:
 * many workers, one per key at a time) and ordered (Tier B: N slots, FIFO per
 * key). Each batch is one transaction; `run` and `work` are shared.
 *
 * @module
 */

import { type BatchSettings, batchSettings, type ConsumerContext, runBatch, type Target } from "./batch.ts";
import { KeyqError } from "./errors.ts";
import { fenceHooks } from "./fence.ts";
import { runLoop, workLoop } from "./loop.ts";
import { call, fields, mapError } from "./sql.ts";
import type { BatchOptions, BatchReport, BlockedKey, RunOptions, RunReport, WorkOptions } from "./types.ts";
import { checkName, checkText, show } from "./validate.ts";

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
  /**
   * The slot count N of this handle. Every engine call of the handle
   * (`subscribe`, `batch`, `run`, `work`, `slotOf`) checks it against the
   * persisted N and refuses a mismatch with `SLOT_COUNT_MISMATCH`.
   */
  readonly slots: number;
  /**
   * The slot of `key`: `(hashtextextended(key, 0) % N + N) % N`; null goes to
   * slot 0. `SLOT_COUNT_MISMATCH` when the consumer exists with another N.
   */
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
  /** Refuses settings this kind cannot use, before anything is written. */
  check(s: BatchSettings): void;
  /** Ticks (and plans); true when a tick was written. */
  prepare(s: BatchSettings): Promise<boolean>;
  /** One batch; no event starts after `until` (epoch ms). */
  batch(s: BatchSettings, until?: number): Promise<BatchReport>;
}

/** The engine's answer to subscribe: done, or slot-index work to do first. */
interface SubscribeReply {
  created: boolean;
  /** CREATE/DROP INDEX CONCURRENTLY statements to run outside a transaction. */
  build?: string[];
  /** Another session is building a slot index of this queue. */
  wait?: boolean;
}

/**
 * Runs the engine's concurrent index statements one by one, outside any
 * transaction, so producers keep writing while they run. False when the
 * server cannot build concurrently (the engine then builds in place).
 */
async function buildConcurrently(ctx: ConsumerContext, statements: string[]): Promise<boolean> {
  for (const text of statements) {
    try {
      await ctx.driver.query(text);
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (code === "25001" || code === "0A000") return false; // inside a transaction block, or unsupported
      // Another subscriber's concurrent build of the same index (deadlock,
      // lock wait, a build that failed): the next round looks again.
      if (code !== "40P01" && code !== "55P03" && code !== "42P07" && code !== "XX000") throw mapError(err, ctx.schema);
    }
  }
  return true;
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
    let inline = false;
    for (let round = 1;; round++) {
      const r: SubscribeReply = await call<SubscribeReply>(ctx.driver, ctx.schema, "subscribe", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["kind", "text", k.kind],
        ["slots", "int", k.slots ?? 1],
        ["settings", "jsonb", k.settings],
        ["index_inline", "boolean", inline],
      ], fields({ created: "boolean", build: "array|undefined", wait: "boolean|undefined" }));
      if (!r.build && !r.wait) {
        subscribed = true;
        return r.created;
      }
      inline = !(await buildConcurrently(ctx, r.build ?? [])) || round >= 600;
      if (r.wait) await new Promise((res) => setTimeout(res, 100));
    }
  };
  const k = kind(subscribe);
  // Every refusal happens here, before the consumer row, a tick or a batch is written.
  const settings = (options: unknown, what: string): BatchSettings => {
    if (!ctx.driver.transaction) {
      throw new KeyqError(
        "TRANSACTIONS_UNSUPPORTED",
        `The ${ctx.driver.name} driver has no interactive transactions, so it cannot consume; use a Pool or Client driver (for Neon: fromNeonPool).`,
        { driver: ctx.driver.name },
      );
    }
    const s = batchSettings(options, what);
    k.check(s);
    return s;
  };
  const run = async (s: BatchSettings): Promise<RunReport> => {
    if (!subscribed) await subscribe();
    return await runLoop(s, () => k.prepare(s), () => ctx.maintain(queue), (until) => k.batch(s, until));
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
    batch: async (options) => await k.batch(settings(options, "batch options")),
    run: async (options) => await run(settings(options, "run options")),
    async work(options) {
      const s = settings(options, "work options");
      return await workLoop(s, () => run(s));
    },
  };
}

/** Static assignment (`worker`/`workers`) is a Tier B option; elsewhere it would be silently ignored. */
function noWorkers(s: BatchSettings, kind: string): void {
  if (s.worker !== undefined) {
    throw new KeyqError("INVALID_INPUT", `Options "worker" and "workers" assign the slots of an ordered consumer; a ${kind} consumer has none, so remove them.`, {
      field: "worker",
    });
  }
}

/** The plain kind: one cursor; a second worker finds it busy and skips. */
export function plainKind(ctx: ConsumerContext, queue: string, name: string, settings: Record<string, unknown>): ConsumerKind {
  const target: Target = { queue, consumer: name, slot: 0 };
  return {
    kind: "plain",
    settings,
    check: (s) => noWorkers(s, "plain"),
    prepare: () => ctx.tick(queue),
    batch: (s, until) =>
      runBatch(ctx, s, "receive", [["queue", "text", queue], ["consumer", "text", name], ["max_events", "int", s.maxEvents]], () => target, {
        until,
      }),
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
  fenced = false,
): ConsumerKind {
  const target: Target = { queue, consumer: name, slot: 0, contended: idempotent ? "drop" : "defer", deferDelay: deferDelayS };
  return {
    kind: "exclusive",
    settings,
    check: (s) => noWorkers(s, "exclusive"),
    async prepare(s) {
      const r = await call<{ tick: string | null }>(ctx.driver, ctx.schema, "prepare_exclusive", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["chunk_size", "int", s.maxEvents],
      ], fields({ tick: "string|null" }));
      return r.tick !== null;
    },
    batch: (s, until) =>
      runBatch(ctx, s, "receive_exclusive", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["max_events", "int", s.maxEvents],
      ], () => target, { until, hooks: fenced ? fenceHooks(ctx, queue, name, "keys") : undefined }),
  };
}

/** Settings of a Tier B kind, checked by the client. */
export interface OrderedSettings {
  slots: number;
  pause: boolean;
  /** Seconds after which a static worker helps on a slot nobody polled. */
  helpAfterS: number;
  /** Lease the slot past the batch's session (see fence.ts). */
  fenced?: boolean;
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
    check(s) {
      if (o.pause && s.handleBatch) {
        throw new KeyqError("INVALID_INPUT", 'The pause policy needs a per-event "handler" (events after a failed head are held back); use handler instead of handleBatch.', {
          field: "handleBatch",
        });
      }
      if (s.worker !== undefined && s.worker >= o.slots) {
        throw new KeyqError(
          "INVALID_INPUT",
          `Worker ${s.worker} of ${s.workers} would read no slot: the consumer has ${o.slots} slots (worker k reads slots k, k + workers, …); ` +
            `run at most ${o.slots} workers, or create the consumer with more slots.`,
          { field: "worker", value: s.worker },
        );
      }
    },
    prepare: () => ctx.tick(queue),
    batch(s, until) {
      const { slots, helpAfter } = order(s);
      return runBatch(ctx, s, "receive_ordered", [
        ["queue", "text", queue],
        ["consumer", "text", name],
        ["slots", "int[]", `{${slots.join(",")}}`],
        ["max_events", "int", s.maxEvents],
        ["help_after", "float8", helpAfter],
        ["slot_count", "int", o.slots],
      ], (r) => ({ queue, consumer: name, slot: r.slot ?? 0, pause: o.pause, ordered: true }), {
        until,
        hooks: o.fenced ? fenceHooks(ctx, queue, name, "slot") : undefined,
      });
    },
  };
}

/** Adds the Tier B extras to a consumer built by `makeConsumer`. */
export function withSlots<P>(ctx: ConsumerContext, c: Consumer<P>, slots: number): OrderedConsumer<P> {
  return Object.assign(c, {
    slots,
    async slotOf(key: string | null) {
      if (key !== null && typeof key !== "string") {
        throw new KeyqError("INVALID_INPUT", `slotOf takes a key (a string) or null, not ${show(key)}.`, { field: "key", value: key });
      }
      if (key !== null) checkText("key", key, "slotOf");
      return await call<number>(ctx.driver, ctx.schema, "consumer_slot_of", [
        ["queue", "text", c.queue],
        ["consumer", "text", c.name],
        ["key", "text", key],
        ["n", "int", slots],
      ]);
    },
    blockedKeys: () =>
      call<BlockedKey[]>(ctx.driver, ctx.schema, "blocked_keys", [["queue", "text", c.queue], ["consumer", "text", c.name]]),
  });
}
