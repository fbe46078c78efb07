/**
 * The plain consumer: one cursor, every event, one batch per transaction.
 * The tiers build on the same run/work loop.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver, Executor } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { checkPayload, type PayloadSchema } from "./payload.ts";
import { call, callText, mapError, param } from "./sql.ts";
import type {
  BatchOptions,
  BatchReport,
  KeyqEvent,
  RunOptions,
  RunReport,
  WorkOptions,
} from "./types.ts";
import { checkName, duration, durationMs, int, parse } from "./validate.ts";

/** What a consumer needs from its client. */
export interface ConsumerContext {
  readonly driver: Driver;
  readonly schema: string;
  readonly payloadSchema: PayloadSchema | undefined;
  /** Advances the queue's ticker in its own transaction; true when it ticked. */
  tick(queue: string): Promise<boolean>;
  /** Runs due maintenance of the queue (skips when another caller is on it). */
  maintain(queue: string): Promise<unknown>;
}

/**
 * A plain consumer of a queue: a named cursor that reads every event in
 * order, one batch per transaction.
 */
export interface Consumer<P = unknown> {
  readonly queue: string;
  readonly name: string;
  /** Creates the cursor at the queue's newest tick; true when it was new. */
  subscribe(): Promise<boolean>;
  /** Removes the cursor; true when it existed. */
  unsubscribe(): Promise<boolean>;
  /** Consumes one batch in one transaction. */
  batch(options: BatchOptions<P>): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: RunOptions<P>): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: WorkOptions<P>): Promise<RunReport>;
}

const batchSchema = v.object({
  handler: v.function("expected a function (event, tx) => …"),
  maxEvents: v.optional(int(1, 10_000)),
  statementTimeout: v.optional(duration),
  idleTimeout: v.optional(duration),
  budgetMs: v.optional(int(1, 86_400_000)),
  maxBatches: v.optional(int(1, Number.MAX_SAFE_INTEGER)),
  signal: v.optional(v.instance(AbortSignal, "expected an AbortSignal")),
  minPollMs: v.optional(int(1, 3_600_000)),
  maxPollMs: v.optional(int(1, 3_600_000)),
});

/** Checked batch settings with defaults applied. */
export interface BatchSettings {
  handler: (event: KeyqEvent<never>, tx: Executor) => Promise<void> | void;
  maxEvents: number;
  statementTimeoutMs: number;
  idleTimeoutMs: number;
  budgetMs: number;
  maxBatches: number;
  signal: AbortSignal | undefined;
  minPollMs: number;
  maxPollMs: number;
}

/** Validates batch/run/work options and applies defaults. */
export function batchSettings(options: unknown, what: string): BatchSettings {
  const o = parse(batchSchema, options, what);
  return {
    handler: o.handler as BatchSettings["handler"],
    maxEvents: o.maxEvents ?? 100,
    statementTimeoutMs: durationMs("statementTimeout", o.statementTimeout, 1) ?? 30_000,
    idleTimeoutMs: durationMs("idleTimeout", o.idleTimeout, 1) ?? 60_000,
    budgetMs: o.budgetMs ?? 10_000,
    maxBatches: o.maxBatches ?? Number.MAX_SAFE_INTEGER,
    signal: o.signal,
    minPollMs: o.minPollMs ?? 100,
    maxPollMs: o.maxPollMs ?? 5_000,
  };
}

/** The engine's JSON form of an event. */
export interface WireEvent {
  id: string;
  type: string;
  key: string | null;
  payload: unknown;
  time: string;
  retry: number;
}

/** Turns an engine event into a handler event, checking the payload schema. */
export async function toEvent(
  w: WireEvent,
  schema: PayloadSchema | undefined,
  queue: string,
): Promise<KeyqEvent<never>> {
  const payload = await checkPayload(schema, w.payload, `event ${w.id} (queue "${queue}")`);
  return { id: w.id, type: w.type, key: w.key, payload: payload as never, time: new Date(w.time), retry: w.retry };
}

/**
 * Runs `fn` in one transaction whose first statement also sets the batch's
 * local timeouts, so a hung worker cannot hold its locks forever.
 */
export async function inBatch<T>(
  ctx: ConsumerContext,
  s: BatchSettings,
  fn: string,
  args: readonly (readonly [string, string, unknown])[],
  body: (result: T, tx: Executor) => Promise<void>,
): Promise<T> {
  const driver = ctx.driver;
  if (!driver.transaction) {
    throw new KeyqError(
      "TRANSACTIONS_UNSUPPORTED",
      `The ${driver.name} driver has no interactive transactions, so it cannot consume; use a Pool or Client driver (for Neon: fromNeonPool).`,
    );
  }
  const text = callText(ctx.schema, fn, args).replace(
    /^select /,
    "select set_config('statement_timeout', $" + (args.length + 1) + "::text, true), " +
      "set_config('idle_in_transaction_session_timeout', $" + (args.length + 2) + "::text, true), ",
  );
  const params = [...args.map((a) => param(a[2])), `${Math.ceil(s.statementTimeoutMs)}ms`, `${Math.ceil(s.idleTimeoutMs)}ms`];
  try {
    return await driver.transaction(async (tx) => {
      const rows = await tx.query(text, params);
      const raw = rows[0]?.r;
      const result = (typeof raw === "string" ? JSON.parse(raw) : raw) as T;
      await body(result, tx);
      return result;
    });
  } catch (err) {
    throw mapError(err, ctx.schema);
  }
}

/** Sleeps `ms`, waking early when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** The shared run loop: tick, maintain, then batches until budget, limit or backlog end. */
export async function runLoop(
  ctx: ConsumerContext,
  queue: string,
  s: BatchSettings,
  batch: () => Promise<BatchReport>,
): Promise<RunReport> {
  const started = Date.now();
  const ticked = await ctx.tick(queue);
  await ctx.maintain(queue);
  const report: RunReport = { batches: 0, events: 0, ticked, ms: 0 };
  while (report.batches < s.maxBatches && Date.now() - started < s.budgetMs && !s.signal?.aborted) {
    const b = await batch();
    if (b.busy || b.events === 0) break;
    report.batches++;
    report.events += b.events;
  }
  report.ms = Date.now() - started;
  return report;
}

/** Loops `run` until the signal aborts, backing off while idle. */
export async function workLoop(s: BatchSettings, run: () => Promise<RunReport>): Promise<RunReport> {
  const total: RunReport = { batches: 0, events: 0, ticked: false, ms: 0 };
  const started = Date.now();
  let wait = s.minPollMs;
  while (!s.signal?.aborted) {
    const r = await run();
    total.batches += r.batches;
    total.events += r.events;
    total.ticked ||= r.ticked;
    if (r.events > 0) wait = s.minPollMs;
    else {
      await sleep(wait, s.signal);
      wait = Math.min(wait * 2, s.maxPollMs);
    }
  }
  total.ms = Date.now() - started;
  return total;
}

/** Creates the plain consumer `name` of `queue`. */
export function plainConsumer<P>(ctx: ConsumerContext, queue: string, name: string): Consumer<P> {
  checkName("queue", queue);
  checkName("consumer", name);
  let subscribed = false;
  const subscribe = async (): Promise<boolean> => {
    const r = await call<{ created: boolean }>(ctx.driver, ctx.schema, "subscribe", [
      ["queue", "text", queue],
      ["consumer", "text", name],
    ]);
    subscribed = true;
    return r.created;
  };
  const batchWith = async (s: BatchSettings): Promise<BatchReport> => {
    const r = await inBatch<{ busy: boolean; events: WireEvent[] }>(
      ctx,
      s,
      "receive",
      [["queue", "text", queue], ["consumer", "text", name], ["max_events", "int", s.maxEvents]],
      async (res, tx) => {
        for (const w of res.events) {
          const ev = await toEvent(w, ctx.payloadSchema, queue);
          await s.handler(ev, tx);
        }
      },
    );
    return { events: r.events.length, busy: r.busy };
  };
  const run = async (s: BatchSettings): Promise<RunReport> => {
    if (!subscribed) await subscribe();
    return await runLoop(ctx, queue, s, () => batchWith(s));
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
    batch: async (options) => await batchWith(batchSettings(options, "batch options")),
    run: async (options) => await run(batchSettings(options, "run options")),
    async work(options) {
      const s = batchSettings(options, "work options");
      return await workLoop(s, () => run(s));
    },
  };
}
