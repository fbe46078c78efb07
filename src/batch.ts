/**
 * One batch = one transaction: receive (claim + fetch + key locks in one
 * statement), run the handler with per-event savepoints, record failures and
 * deferrals, commit. Shared by every consumer kind.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver, Executor } from "./driver.ts";
import { describeError } from "./error-text.ts";
import { KeyqError } from "./errors.ts";
import { classify } from "./faults.ts";
import { checkPayload, type PayloadSchema } from "./payload.ts";
import { type BatchLife, batchLife, timer } from "./life.ts";
import { eventScope } from "./savepoint.ts";
import { type Arg, call, callText, fields, mapError, param, reply } from "./sql.ts";
import type { BatchContext, BatchReport, HandlerContext, KeyqEvent } from "./types.ts";
import { duration, durationMs, int, MAX_TIMEOUT_MS, parse } from "./validate.ts";

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

const batchSchema = v.strictObject({
  handler: v.optional(v.function("expected a function (event, tx, { signal, deadline }) => …")),
  handleBatch: v.optional(v.function("expected a function (events, { tx, fail, signal, deadline }) => …")),
  onError: v.optional(v.function("expected a function (error, event) => …")),
  maxEvents: v.optional(int(1, 10_000)),
  statementTimeout: v.optional(duration),
  idleTimeout: v.optional(duration),
  budgetMs: v.optional(int(1, 86_400_000)),
  maxBatches: v.optional(int(1, Number.MAX_SAFE_INTEGER)),
  signal: v.optional(v.custom<AbortSignal>(isSignal, "expected an AbortSignal")),
  minPollMs: v.optional(int(1, 3_600_000)),
  maxPollMs: v.optional(int(1, 3_600_000)),
  worker: v.optional(int(0, 1023)),
  workers: v.optional(int(1, 1024)),
  batchTimeout: v.optional(duration),
  eventTimeout: v.optional(duration),
  onRetry: v.optional(v.function("expected a function ({ error, attempt, delayMs }) => …")),
  retryBackoff: v.optional(v.strictObject({
    baseMs: v.optional(int(1, MAX_TIMEOUT_MS)),
    capMs: v.optional(int(1, MAX_TIMEOUT_MS)),
  })),
});

/** Duck-typed, so a signal from another realm or polyfill is accepted too. */
function isSignal(x: unknown): boolean {
  return x instanceof AbortSignal ||
    (typeof x === "object" && x !== null && typeof (x as AbortSignal).aborted === "boolean" &&
      typeof (x as AbortSignal).addEventListener === "function");
}

/** An event as handlers get it, before the caller's payload type is applied. */
export type AnyEvent = KeyqEvent<never>;

/** Checked batch settings with defaults applied. */
export interface BatchSettings {
  handler: ((event: AnyEvent, tx: Executor, ctx: HandlerContext) => Promise<void> | void) | undefined;
  handleBatch: ((events: AnyEvent[], ctx: BatchContext) => Promise<void> | void) | undefined;
  onError: ((error: unknown, event: AnyEvent) => void) | undefined;
  maxEvents: number;
  statementTimeoutMs: number;
  /** The user's idle timeout: a floor; keyq keeps the server's idle timeout past the deadline. */
  idleTimeoutMs: number;
  batchTimeoutMs: number;
  eventTimeoutMs: number;
  onRetry: ((info: { error: unknown; attempt: number; delayMs: number }) => void) | undefined;
  retryBackoff: { baseMs: number; capMs: number };
  budgetMs: number;
  maxBatches: number;
  signal: AbortSignal | undefined;
  minPollMs: number;
  maxPollMs: number;
  worker: number | undefined;
  workers: number | undefined;
}

/** Options that only some calls use; elsewhere they would be ignored without a word. */
const ONLY: Record<string, string> = {
  budgetMs: "run() and work()",
  maxBatches: "run() and work()",
  minPollMs: "work()",
  maxPollMs: "work()",
  onRetry: "work()",
  retryBackoff: "work()",
};

/** Validates batch/run/work options and applies defaults; `what` is "batch options", "run options"… */
export function batchSettings(options: unknown, what: string): BatchSettings {
  const o = parse(batchSchema, options, what);
  const call = `${what.split(" ")[0]}()`;
  for (const [key, where] of Object.entries(ONLY)) {
    if ((o as Record<string, unknown>)[key] !== undefined && !where.includes(call)) {
      throw new KeyqError("INVALID_INPUT", `Option "${key}" applies to ${where}, not ${call}; remove it or call ${where.split(" ")[0]}.`, {
        field: key,
      });
    }
  }
  if (o.minPollMs !== undefined && o.maxPollMs !== undefined && o.minPollMs > o.maxPollMs) {
    throw new KeyqError("INVALID_INPUT", `Option "minPollMs" (${o.minPollMs}) is above "maxPollMs" (${o.maxPollMs}); give minPollMs <= maxPollMs.`, {
      field: "minPollMs",
    });
  }
  if ((o.handler === undefined) === (o.handleBatch === undefined)) {
    throw new KeyqError("INVALID_INPUT", `Give ${what} exactly one of "handler" (per event) or "handleBatch" (per batch).`, {
      field: "handler",
    });
  }
  if ((o.worker === undefined) !== (o.workers === undefined) || (o.worker ?? 0) >= (o.workers ?? 1)) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Options "worker" and "workers" go together, with 0 <= worker < workers (got worker ${o.worker}, workers ${o.workers}).`,
      { field: "worker" },
    );
  }
  return {
    handler: o.handler as BatchSettings["handler"],
    handleBatch: o.handleBatch as BatchSettings["handleBatch"],
    onError: o.onError as BatchSettings["onError"],
    maxEvents: o.maxEvents ?? 100,
    statementTimeoutMs: durationMs("statementTimeout", o.statementTimeout, 1, MAX_TIMEOUT_MS) ?? 30_000,
    idleTimeoutMs: durationMs("idleTimeout", o.idleTimeout, 1, MAX_TIMEOUT_MS) ?? 0,
    batchTimeoutMs: durationMs("batchTimeout", o.batchTimeout, 1, MAX_TIMEOUT_MS) ?? 60_000,
    eventTimeoutMs: durationMs("eventTimeout", o.eventTimeout, 1, MAX_TIMEOUT_MS) ?? Number.POSITIVE_INFINITY,
    onRetry: o.onRetry as BatchSettings["onRetry"],
    retryBackoff: { baseMs: o.retryBackoff?.baseMs ?? 200, capMs: o.retryBackoff?.capMs ?? 10_000 },
    budgetMs: o.budgetMs ?? 10_000,
    maxBatches: o.maxBatches ?? Number.MAX_SAFE_INTEGER,
    signal: o.signal,
    minPollMs: o.minPollMs ?? 100,
    maxPollMs: o.maxPollMs ?? 5_000,
    worker: o.worker,
    workers: o.workers,
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
  /** Tier A: false when another worker holds the key. */
  locked?: boolean;
  /** Set by a fenced batch: another batch's lease still fences the key (always deferred). */
  fenced?: boolean;
}

function toEvent(w: WireEvent, payload: unknown, slot?: number): AnyEvent {
  const ev: AnyEvent = { id: w.id, type: w.type, key: w.key, payload: payload as never, time: new Date(w.time), retry: w.retry };
  if (slot !== undefined) ev.slot = slot;
  return ev;
}

/** Where outcomes are recorded, and what to do with contended keys. */
export interface Target {
  queue: string;
  consumer: string;
  slot: number;
  /** Tier A: drop (idempotent) or defer events whose key another worker holds. */
  contended?: "drop" | "defer";
  /** Seconds a deferred event waits. */
  deferDelay?: number;
  /** Tier B pause policy: after a key's event fails, its later events are held. */
  pause?: boolean;
  /** Tier B: events carry the slot that delivered them. */
  ordered?: boolean;
}

/** What handling a received batch did, before the receive itself is counted. */
type Outcome = Omit<BatchReport, "busy" | "events"> & { events: number };

/** Where a batch stands while it runs: its life, and when it should stop starting events. */
export interface BatchRun {
  life: BatchLife;
  /** Epoch ms after which no further event starts (the run's budget); Infinity for none. */
  until: number;
  /** The handler call in progress (settled when none). */
  inflight: Promise<unknown>;
}

/** A handler call that ran past eventTimeout. */
function eventTimedOut(ms: number): Error {
  const e = new Error(`The handler ran past eventTimeout (${ms} ms); the event fails and the batch ends early.`);
  e.name = "TimeoutError";
  return e;
}

/**
 * Calls one handler with its own signal (the batch's, plus eventTimeout).
 * Resolves to the handler's error (undefined when it succeeded), or
 * "timeout"; rejects with BATCH_ABORTED when the batch dies meanwhile. A
 * handler still running then is left behind, its rejection observed.
 */
async function callHandler(
  s: BatchSettings,
  br: BatchRun,
  fn: (ctx: HandlerContext) => Promise<void> | void,
): Promise<{ error?: unknown; timedOut?: boolean }> {
  const life = br.life;
  const ctl = new AbortController();
  const relay = () => ctl.abort(life.signal.reason);
  if (life.signal.aborted) relay();
  else life.signal.addEventListener("abort", relay, { once: true });
  const limit = Math.min(life.deadline.getTime(), Date.now() + s.eventTimeoutMs);
  const t = timer(Number.isFinite(s.eventTimeoutMs) ? s.eventTimeoutMs : Number.POSITIVE_INFINITY);
  try {
    const run = Promise.resolve().then(() => fn({ signal: ctl.signal, deadline: new Date(limit) }));
    br.inflight = run.catch(() => {}); // a handler left behind must not become an unhandled rejection
    return await Promise.race([
      run.then(() => ({}), (error) => ({ error })),
      t.done.then(() => {
        ctl.abort(eventTimedOut(s.eventTimeoutMs));
        return { timedOut: true, error: eventTimedOut(s.eventTimeoutMs) };
      }),
      life.died,
    ]);
  } finally {
    t.cancel();
    life.signal.removeEventListener("abort", relay);
  }
}

/**
 * Runs the handler over a received batch inside `tx` and records failures
 * (retry or dead letter), deferrals and events it did not start (released:
 * they come again, in order) in the same transaction. A payload that fails
 * the queue's schema is a failure of that event, not a crash. Once the batch
 * is stopped, out of budget or past an event timeout, no further event
 * starts and what finished commits; once it is dead it throws BATCH_ABORTED.
 */
async function handleEvents(
  ctx: ConsumerContext,
  s: BatchSettings,
  target: Target,
  wire: WireEvent[],
  tx: Executor,
  br: BatchRun,
): Promise<Outcome> {
  const { life } = br;
  const failed = new Map<string, { id: string; txid: string; error: unknown }>();
  const fail = (w: WireEvent, ev: AnyEvent, err: unknown) => {
    failed.set(w.id, { id: w.id, txid: w.txid, error: describeError(err) });
    try {
      s.onError?.(err, ev);
    } catch { /* logging must not break the batch */ }
  };
  const contended = wire.filter((w) => w.locked === false);
  const deferred = contended.filter((w) => target.contended === "defer" || w.fenced).map((w) => ({ id: w.id, txid: w.txid }));
  const events: { w: WireEvent; ev: AnyEvent }[] = [];
  const slot = target.ordered ? target.slot : undefined;
  const failedKeys = new Set<string>(); // pause: keys whose head failed in this batch
  for (const w of wire) {
    if (w.locked === false) continue;
    try {
      const payload = await checkPayload(ctx.payloadSchema, w.payload, `event ${w.id} (queue "${target.queue}")`);
      events.push({ w, ev: toEvent(w, payload, slot) });
    } catch (err) {
      fail(w, toEvent(w, w.payload, slot), err);
      if (w.key !== null) failedKeys.add(w.key);
    }
  }
  const scope = eventScope(tx);
  const held: { id: string; txid: string }[] = [];
  const released: { id: string; txid: string }[] = [];
  let handled = 0;
  if (s.handler) {
    let ended = false; // stopped, out of budget, or an event timed out: start nothing more
    for (const { w, ev } of events) {
      if (target.pause && w.key !== null && failedKeys.has(w.key)) {
        held.push({ id: w.id, txid: w.txid }); // nothing of a failed key may overtake its head
        continue;
      }
      if (life.dead()) throw life.error();
      // Out of budget: stop, but only after one call, so a run slowed down
      // before its first event still makes progress.
      ended ||= life.signal.aborted || (handled > 0 && Date.now() >= br.until);
      if (ended) {
        released.push({ id: w.id, txid: w.txid });
        continue;
      }
      scope.next();
      let current = true; // a call left behind (eventTimeout) must not write into later events
      const exec: Executor = {
        query: (text, params) =>
          current ? scope.exec.query(text, params) : Promise.reject(eventTimedOut(s.eventTimeoutMs)),
      };
      const r = await callHandler(s, br, (hc) => s.handler!(ev, exec, hc));
      current = false;
      if (life.dead()) throw life.error();
      handled++;
      if (!("error" in r)) {
        await scope.commit();
      } else if (!r.timedOut && life.reason() === "stopped") {
        // It gave up because the worker is stopping: not a failure, it comes again.
        await scope.rollback(r.error);
        handled--;
        released.push({ id: w.id, txid: w.txid });
      } else {
        await scope.rollback(r.error);
        fail(w, ev, r.error);
        if (w.key !== null) failedKeys.add(w.key);
        ended ||= r.timedOut === true;
      }
    }
  } else if (events.length > 0) { // an empty look (or only contended keys) is not a batch
    const byEvent = new Map(events.map(({ w, ev }) => [ev, w] as const));
    if (life.signal.aborted) throw life.error(); // stopped before it began: nothing done, nothing lost
    const r = await callHandler(s, br, (hc) =>
      s.handleBatch!(events.map((e) => e.ev), {
        tx,
        signal: hc.signal,
        deadline: hc.deadline,
        fail: (ev, err) => {
          const w = byEvent.get(ev as AnyEvent);
          if (!w) throw new KeyqError("INVALID_INPUT", "fail() takes one of the events of this batch.", { field: "event" });
          fail(w, ev as AnyEvent, err);
        },
      }));
    if (life.dead()) throw life.error();
    if ("error" in r) {
      if (r.timedOut) life.abort("deadline", r.error); // one call is the whole batch
      if (r.timedOut || life.reason() === "stopped") throw life.error();
      throw r.error; // the whole batch rolls back; the same events come again
    }
    handled = events.length;
  }
  if (life.dead()) throw life.error();
  const keep = new Set([...failed.keys(), ...deferred.map((d) => d.id), ...held.map((h) => h.id), ...released.map((r) => r.id)]);
  const retried = wire.filter((w) => w.redelivered && !keep.has(w.id)).map((w) => w.id);
  const outcome: Outcome = {
    events: s.handler ? handled : events.length - held.length,
    retried: 0,
    deadLettered: 0,
    dropped: target.contended === "drop" ? contended.length - deferred.length : 0,
    deferred: 0,
    roundTrips: scope.statements(),
  };
  if (failed.size === 0 && retried.length === 0 && deferred.length === 0 && held.length === 0 && released.length === 0) {
    return outcome;
  }
  const r = await call<{ retried: number; deadLettered: number; deferred: number }>(tx, ctx.schema, "ack", [
    ["queue", "text", target.queue],
    ["consumer", "text", target.consumer],
    ["s", "int", target.slot],
    ["outcome", "jsonb", {
      retried,
      failed: [...failed.values()],
      deferred,
      deferDelay: target.deferDelay ?? 1,
      pause: target.pause ?? false,
      held,
      released,
    }],
  ], fields({ retried: "number", deadLettered: "number", deferred: "number" }));
  return { ...outcome, ...r, roundTrips: outcome.roundTrips + 1 };
}

/** The engine's answer to a receive call. */
export interface Received {
  busy: boolean;
  events: WireEvent[];
  /** Tier B: the slot this batch read. */
  slot?: number;
}

const receivedShape = fields({ busy: "boolean", events: "array" });

/** Extra work a consumer kind does around the batch (fenced leases). */
export interface BatchHooks {
  /**
   * After the receive, inside the batch: may mark events contended or end
   * the batch as busy (return false); runs before any handler.
   */
  afterReceive?(received: Received, tx: Executor, life: BatchLife): Promise<boolean>;
  /** Inside the batch, after the handlers and the ack, before COMMIT. */
  beforeCommit?(tx: Executor): Promise<void>;
}

/** Margin past the deadline for the server-side backstops. */
const MARGIN_MS = 2_000;

/**
 * One batch in one transaction. The receive statement also sets the batch's
 * local timeouts from its deadline (the server's idle and statement timeouts
 * stay backstops that fire only after keyq's deadline). Round trips: BEGIN,
 * receive, [ack], COMMIT, plus one per event whose handler uses the database.
 */
export async function runBatch(
  ctx: ConsumerContext,
  s: BatchSettings,
  fn: string,
  args: readonly Arg[],
  target: (r: Received) => Target,
  opts: { until?: number; hooks?: BatchHooks } = {},
): Promise<BatchReport> {
  const driver = ctx.driver;
  if (!driver.transaction) {
    throw new KeyqError(
      "TRANSACTIONS_UNSUPPORTED",
      `The ${driver.name} driver has no interactive transactions, so it cannot consume; use a Pool or Client driver (for Neon: fromNeonPool).`,
    );
  }
  const n = args.length;
  const text = callText(ctx.schema, fn, args).replace(
    /^select /,
    `select set_config('statement_timeout', $${n + 1}::text, true), ` +
      `set_config('idle_in_transaction_session_timeout', $${n + 2}::text, true), `,
  );
  const backstop = s.batchTimeoutMs + MARGIN_MS;
  const params = [
    ...args.map((a) => param(a[2])),
    `${Math.ceil(Math.min(s.statementTimeoutMs, backstop))}ms`,
    `${Math.ceil(Math.max(s.idleTimeoutMs, backstop))}ms`,
  ];
  const life = batchLife(s.batchTimeoutMs, s.signal);
  const br: BatchRun = { life, until: opts.until ?? Number.POSITIVE_INFINITY, inflight: Promise.resolve() };
  try {
    const work = driver.transaction(async (raw) => {
      const lost = () => life.abort("connection", raw.signal?.reason);
      if (raw.signal?.aborted) lost();
      else raw.signal?.addEventListener("abort", lost, { once: true });
      const tx = life.guard(raw);
      const inner = (async () => {
        const received = reply<Received>(await tx.query(text, params), fn, receivedShape);
        if (opts.hooks?.afterReceive && !(await opts.hooks.afterReceive(received, tx, life))) {
          throw BUSY; // rolled back: another worker's fenced batch still owns it
        }
        const out = await handleEvents(ctx, s, target(received), received.events, tx, br);
        if (life.dead()) throw life.error();
        await opts.hooks?.beforeCommit?.(tx);
        return { ...out, busy: received.busy, roundTrips: out.roundTrips + 3 };
      })();
      inner.catch(() => {}); // observed by the race; may settle after it
      try {
        return await Promise.race([inner, life.died]);
      } finally {
        raw.signal?.removeEventListener("abort", lost);
      }
    });
    // A driver may end the transaction early (postgres.js rejects begin() when
    // its connection closes) while a handler still runs; and a hung ROLLBACK
    // must not hold run() past the deadline.
    work.catch(() => {}); // it may settle after we gave up on it
    return await Promise.race([work, life.died]);
  } catch (err) {
    if (err === BUSY) return { events: 0, retried: 0, deadLettered: 0, dropped: 0, deferred: 0, roundTrips: 3, busy: true };
    if (!(err instanceof KeyqError) && classify(err) === "connection") life.abort("connection", err);
    if (life.reason() === "connection") {
      // Wait for the handler in flight (it got the signal), bounded by the deadline.
      await Promise.race([br.inflight, life.expired]);
      throw life.error();
    }
    if (life.dead()) throw life.error();
    throw mapError(err, ctx.schema);
  } finally {
    life.dispose();
  }
}

const BUSY: unique symbol = Symbol("busy");
