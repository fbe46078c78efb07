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
import { checkPayload, type PayloadSchema } from "./payload.ts";
import { eventScope } from "./savepoint.ts";
import { type Arg, call, callText, mapError, param } from "./sql.ts";
import type { BatchContext, BatchReport, KeyqEvent } from "./types.ts";
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
  handler: v.optional(v.function("expected a function (event, tx) => …")),
  handleBatch: v.optional(v.function("expected a function (events, { tx, fail }) => …")),
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
  // Issue 9 (reliability) reads these; they are checked here so every option is strict.
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
  durationMs("batchTimeout", o.batchTimeout, 1, MAX_TIMEOUT_MS);
  durationMs("eventTimeout", o.eventTimeout, 1, MAX_TIMEOUT_MS);
  return {
    handler: o.handler as BatchSettings["handler"],
    handleBatch: o.handleBatch as BatchSettings["handleBatch"],
    onError: o.onError as BatchSettings["onError"],
    maxEvents: o.maxEvents ?? 100,
    statementTimeoutMs: durationMs("statementTimeout", o.statementTimeout, 1, MAX_TIMEOUT_MS) ?? 30_000,
    idleTimeoutMs: durationMs("idleTimeout", o.idleTimeout, 1, MAX_TIMEOUT_MS) ?? 60_000,
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

/**
 * Runs the handler over a received batch inside `tx` and records failures
 * (retry or dead letter) and deferrals in the same transaction. A payload
 * that fails the queue's schema is a failure of that event, not a crash.
 */
async function handleEvents(
  ctx: ConsumerContext,
  s: BatchSettings,
  target: Target,
  wire: WireEvent[],
  tx: Executor,
): Promise<Outcome> {
  const failed = new Map<string, { id: string; txid: string; error: unknown }>();
  const fail = (w: WireEvent, ev: AnyEvent, err: unknown) => {
    failed.set(w.id, { id: w.id, txid: w.txid, error: describeError(err) });
    try {
      s.onError?.(err, ev);
    } catch { /* logging must not break the batch */ }
  };
  const contended = wire.filter((w) => w.locked === false);
  const deferred = target.contended === "defer" ? contended.map((w) => ({ id: w.id, txid: w.txid })) : [];
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
  if (s.handler) {
    for (const { w, ev } of events) {
      if (target.pause && w.key !== null && failedKeys.has(w.key)) {
        held.push({ id: w.id, txid: w.txid }); // nothing of a failed key may overtake its head
        continue;
      }
      scope.next();
      let error: unknown;
      let ok = false;
      try {
        await s.handler(ev, scope.exec);
        ok = true;
      } catch (err) {
        error = err;
      }
      if (ok) {
        await scope.commit();
      } else {
        await scope.rollback(error);
        fail(w, ev, error);
        if (w.key !== null) failedKeys.add(w.key);
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
  const keep = new Set([...failed.keys(), ...deferred.map((d) => d.id), ...held.map((h) => h.id)]);
  const retried = wire.filter((w) => w.redelivered && !keep.has(w.id)).map((w) => w.id);
  const outcome: Outcome = {
    events: events.length - held.length,
    retried: 0,
    deadLettered: 0,
    dropped: target.contended === "drop" ? contended.length : 0,
    deferred: 0,
    roundTrips: scope.statements(),
  };
  if (failed.size === 0 && retried.length === 0 && deferred.length === 0 && held.length === 0) return outcome;
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
    }],
  ]);
  return { ...outcome, ...r, roundTrips: outcome.roundTrips + 1 };
}

/** The engine's answer to a receive call. */
export interface Received {
  busy: boolean;
  events: WireEvent[];
  /** Tier B: the slot this batch read. */
  slot?: number;
}

/**
 * One batch in one transaction. The receive statement also sets the batch's
 * local timeouts, so a hung worker cannot hold its keys or slot forever.
 * Round trips: BEGIN, receive, [ack], COMMIT, plus one per event whose
 * handler uses the database (its savepoint).
 */
export async function runBatch(
  ctx: ConsumerContext,
  s: BatchSettings,
  fn: string,
  args: readonly Arg[],
  target: (r: Received) => Target,
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
  const params = [...args.map((a) => param(a[2])), `${Math.ceil(s.statementTimeoutMs)}ms`, `${Math.ceil(s.idleTimeoutMs)}ms`];
  try {
    return await driver.transaction(async (tx) => {
      const rows = await tx.query(text, params);
      const raw = rows[0]?.r;
      const received = (typeof raw === "string" ? JSON.parse(raw) : raw) as Received;
      const out = await handleEvents(ctx, s, target(received), received.events, tx);
      return { ...out, busy: received.busy, roundTrips: out.roundTrips + 3 };
    });
  } catch (err) {
    throw mapError(err, ctx.schema);
  }
}
