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
import { eventScope } from "./savepoint.ts";
import type {
  BatchContext,
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
  handler: v.optional(v.function("expected a function (event, tx) => …")),
  handleBatch: v.optional(v.function("expected a function (events, { tx, fail }) => …")),
  onError: v.optional(v.function("expected a function (error, event) => …")),
  maxEvents: v.optional(int(1, 10_000)),
  statementTimeout: v.optional(duration),
  idleTimeout: v.optional(duration),
  budgetMs: v.optional(int(1, 86_400_000)),
  maxBatches: v.optional(int(1, Number.MAX_SAFE_INTEGER)),
  signal: v.optional(v.instance(AbortSignal, "expected an AbortSignal")),
  minPollMs: v.optional(int(1, 3_600_000)),
  maxPollMs: v.optional(int(1, 3_600_000)),
});

type AnyEvent = KeyqEvent<never>;

/** Checked batch settings with defaults applied. */
export interface BatchSettings {
  handler: ((event: AnyEvent, tx: Executor) => Promise<void> | void) | undefined;
  handleBatch: ((events: AnyEvent[], ctx: BatchContext) => Promise<void> | void) | undefined;
  onError: ((error: unknown, event: AnyEvent) => void) | undefined;
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
  if ((o.handler === undefined) === (o.handleBatch === undefined)) {
    throw new KeyqError("INVALID_INPUT", `Give ${what} exactly one of "handler" (per event) or "handleBatch" (per batch).`, {
      field: "handler",
    });
  }
  return {
    handler: o.handler as BatchSettings["handler"],
    handleBatch: o.handleBatch as BatchSettings["handleBatch"],
    onError: o.onError as BatchSettings["onError"],
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
  txid: string;
  type: string;
  key: string | null;
  payload: unknown;
  time: string;
  retry: number;
  /** True when it came from the consumer's retry rows (a retry or a replay). */
  redelivered?: boolean;
}

function toEvent(w: WireEvent, payload: unknown): AnyEvent {
  return { id: w.id, type: w.type, key: w.key, payload: payload as never, time: new Date(w.time), retry: w.retry };
}

/** An error as the engine stores it. */
function describe(err: unknown): { message: string; code?: string; name?: string } {
  const e = err as { message?: unknown; code?: unknown; name?: unknown } | null;
  const out: { message: string; code?: string; name?: string } = {
    message: typeof e?.message === "string" ? e.message : String(err),
  };
  if (typeof e?.code === "string") out.code = e.code;
  if (typeof e?.name === "string") out.name = e.name;
  return out;
}

/** What a consumer slot is, for recording outcomes. */
export interface Target {
  queue: string;
  consumer: string;
  slot: number;
}

/**
 * Runs the handler over a received batch inside `tx` and records failures
 * (retry or dead letter) in the same transaction. A payload that fails the
 * queue's schema is a failure of that event, not a crash.
 */
export async function handleEvents(
  ctx: ConsumerContext,
  s: BatchSettings,
  target: Target,
  wire: WireEvent[],
  tx: Executor,
): Promise<{ retried: number; deadLettered: number }> {
  const failed = new Map<string, { id: string; txid: string; error: unknown }>();
  const fail = (w: WireEvent, ev: AnyEvent | undefined, err: unknown) => {
    failed.set(w.id, { id: w.id, txid: w.txid, error: describe(err) });
    if (s.onError && ev) {
      try {
        s.onError(err, ev);
      } catch { /* logging must not break the batch */ }
    }
  };
  const events: { w: WireEvent; ev: AnyEvent }[] = [];
  for (const w of wire) {
    try {
      const payload = await checkPayload(ctx.payloadSchema, w.payload, `event ${w.id} (queue "${target.queue}")`);
      events.push({ w, ev: toEvent(w, payload) });
    } catch (err) {
      fail(w, toEvent(w, w.payload), err);
    }
  }
  if (s.handler) {
    const scope = eventScope(tx);
    for (const { w, ev } of events) {
      scope.next();
      try {
        await s.handler(ev, scope.exec);
      } catch (err) {
        await scope.rollback();
        fail(w, ev, err);
      }
    }
  } else {
    const byEvent = new Map(events.map(({ w, ev }) => [ev, w] as const));
    await s.handleBatch!(events.map((e) => e.ev), {
      tx,
      fail: (ev, err) => {
        const w = byEvent.get(ev as AnyEvent);
        if (!w) throw new KeyqError("INVALID_INPUT", "fail() takes one of the events of this batch.", { field: "event" });
        fail(w, ev as AnyEvent, err);
      },
    });
  }
  const retried = wire.filter((w) => w.redelivered).map((w) => w.id);
  if (failed.size === 0 && retried.length === 0) return { retried: 0, deadLettered: 0 };
  return await call(tx, ctx.schema, "ack", [
    ["queue", "text", target.queue],
    ["consumer", "text", target.consumer],
    ["s", "int", target.slot],
    ["outcome", "jsonb", { retried, failed: [...failed.values()] }],
  ]);
}

/**
 * Runs `fn` in one transaction whose first statement also sets the batch's
 * local timeouts, so a hung worker cannot hold its locks forever.
 */
export async function inBatch<T, R>(
  ctx: ConsumerContext,
  s: BatchSettings,
  fn: string,
  args: readonly (readonly [string, string, unknown])[],
  body: (result: T, tx: Executor) => Promise<R>,
): Promise<{ result: T; out: R }> {
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
      return { result, out: await body(result, tx) };
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
  const report: RunReport = { batches: 0, events: 0, retried: 0, deadLettered: 0, ticked, ms: 0 };
  while (report.batches < s.maxBatches && Date.now() - started < s.budgetMs && !s.signal?.aborted) {
    const b = await batch();
    if (b.busy || b.events === 0) break;
    report.batches++;
    report.events += b.events;
    report.retried += b.retried;
    report.deadLettered += b.deadLettered;
  }
  report.ms = Date.now() - started;
  return report;
}

/** Loops `run` until the signal aborts, backing off while idle. */
export async function workLoop(s: BatchSettings, run: () => Promise<RunReport>): Promise<RunReport> {
  const total: RunReport = { batches: 0, events: 0, retried: 0, deadLettered: 0, ticked: false, ms: 0 };
  const started = Date.now();
  let wait = s.minPollMs;
  while (!s.signal?.aborted) {
    const r = await run();
    total.batches += r.batches;
    total.events += r.events;
    total.retried += r.retried;
    total.deadLettered += r.deadLettered;
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
export function plainConsumer<P>(
  ctx: ConsumerContext,
  queue: string,
  name: string,
  settings: Record<string, number> = {},
): Consumer<P> {
  checkName("queue", queue);
  checkName("consumer", name);
  let subscribed = false;
  const subscribe = async (): Promise<boolean> => {
    const r = await call<{ created: boolean }>(ctx.driver, ctx.schema, "subscribe", [
      ["queue", "text", queue],
      ["consumer", "text", name],
      ["settings", "jsonb", settings],
    ]);
    subscribed = true;
    return r.created;
  };
  const batchWith = async (s: BatchSettings): Promise<BatchReport> => {
    const { result, out } = await inBatch<{ busy: boolean; events: WireEvent[] }, { retried: number; deadLettered: number }>(
      ctx,
      s,
      "receive",
      [["queue", "text", queue], ["consumer", "text", name], ["max_events", "int", s.maxEvents]],
      (res, tx) => handleEvents(ctx, s, { queue, consumer: name, slot: 0 }, res.events, tx),
    );
    return { events: result.events.length, busy: result.busy, ...out };
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
