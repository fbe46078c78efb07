/**
 * Options of `batch`, `run` and `work`: checked once, defaults applied, and
 * refused when an option belongs to another call.
 *
 * @module
 */

import * as v from "valibot";
import { KeyqError } from "../errors.ts";
import type { BatchContext, HandlerContext, HandlerTx, KeyqEvent } from "../types.ts";
import { duration, durationMs, int, MAX_TIMEOUT_MS, parse } from "../validate.ts";

const batchSchema = v.strictObject({
  handler: v.optional(v.function("expected a function (event, tx, { signal, deadline }) => …")),
  handleBatch: v.optional(v.function("expected a function (events, { tx, fail, signal, deadline }) => …")),
  onError: v.optional(v.function("expected a function (error, event) => …")),
  maxEvents: v.optional(int(1, 10_000)),
  statementTimeout: v.optional(duration),
  idleTimeout: v.optional(duration),
  budgetMs: v.optional(duration),
  maxBatches: v.optional(int(1, Number.MAX_SAFE_INTEGER)),
  signal: v.optional(v.custom<AbortSignal>(isSignal, "expected an AbortSignal")),
  minPollMs: v.optional(duration),
  maxPollMs: v.optional(duration),
  worker: v.optional(int(0, 1023)),
  workers: v.optional(int(1, 1024)),
  batchTimeout: v.optional(duration),
  eventTimeout: v.optional(duration),
  onRetry: v.optional(v.function("expected a function ({ error, attempt, delayMs }) => …")),
  retryBackoff: v.optional(v.strictObject({
    baseMs: v.optional(duration),
    capMs: v.optional(duration),
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
  handler: ((event: AnyEvent, tx: HandlerTx, ctx: HandlerContext) => Promise<void> | void) | undefined;
  handleBatch: ((events: AnyEvent[], ctx: BatchContext) => Promise<void> | void) | undefined;
  onError: ((error: unknown, event: AnyEvent) => void) | undefined;
  maxEvents: number;
  /** The user's statement timeout (never above batchTimeout: refused), else 30 s or batchTimeout, whichever is shorter. */
  statementTimeoutMs: number;
  /** The user's idle timeout (0 when unset: keyq sets it just past each batch's deadline); never below batchTimeout. */
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
  /** A batch received `events` (at least one), before any handler ran; `drained` as Received says. */
  received?: (drained: boolean, events: number) => void;
  /**
   * Called as a batch starts (work(): herd.ts Member.cover). The function
   * it returns is told, when the batch received events, whether it drained
   * what it read (`true` keeps the hold), and is called with nothing once
   * the batch has ended (committed, rolled back, or given up on).
   */
  hold?: () => (drained?: boolean) => void;
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

type Parsed = v.InferOutput<typeof batchSchema>;

/** Refuses options that do not go together (or not with this call): nothing is written before. */
function refuseCombinations(o: Parsed, what: string): void {
  const call = `${what.split(" ")[0]}()`;
  for (const [key, where] of Object.entries(ONLY)) {
    if ((o as Record<string, unknown>)[key] !== undefined && !where.includes(call)) {
      throw new KeyqError("INVALID_INPUT", `Option "${key}" applies to ${where}, not ${call}; remove it or call ${where.split(" ")[0]}.`, {
        field: key,
      });
    }
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
}

/** The batch's timeouts (milliseconds or text, like every duration keyq takes), each honoured or refused, never changed. */
function timeouts(o: Parsed): { batchTimeoutMs: number; idleTimeoutMs: number; statementTimeoutMs: number | undefined } {
  const batchTimeoutMs = durationMs("batchTimeout", o.batchTimeout, 1, MAX_TIMEOUT_MS) ?? 60_000;
  const idleTimeoutMs = durationMs("idleTimeout", o.idleTimeout, 1, MAX_TIMEOUT_MS) ?? 0;
  if (idleTimeoutMs > 0 && idleTimeoutMs < batchTimeoutMs) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Option "idleTimeout" (${idleTimeoutMs} ms) is shorter than "batchTimeout" (${batchTimeoutMs} ms): the server would end the session of a handler that is silent within the batch's deadline, and the batch would be lost. ` +
        "Give idleTimeout >= batchTimeout, lower batchTimeout, or leave idleTimeout unset (keyq then sets it just past each batch's deadline).",
      { field: "idleTimeout", value: o.idleTimeout },
    );
  }
  const statementTimeoutMs = durationMs("statementTimeout", o.statementTimeout, 1, MAX_TIMEOUT_MS);
  if (statementTimeoutMs !== undefined && statementTimeoutMs > batchTimeoutMs) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Option "statementTimeout" (${statementTimeoutMs} ms) is longer than "batchTimeout" (${batchTimeoutMs} ms): no statement of a batch may outlive the batch's deadline, so keyq would have to lower it. ` +
        "Give statementTimeout <= batchTimeout, raise batchTimeout, or leave statementTimeout unset (30 s, or batchTimeout when that is shorter).",
      { field: "statementTimeout", value: o.statementTimeout },
    );
  }
  return { batchTimeoutMs, idleTimeoutMs, statementTimeoutMs };
}

/**
 * Validates batch/run/work options and applies defaults; `what` is "batch
 * options", "run options"…; `defaultMaxEvents` is the kind's own default.
 */
export function batchSettings(options: unknown, what: string, defaultMaxEvents: number = 100): BatchSettings {
  const o = parse(batchSchema, options, what);
  refuseCombinations(o, what);
  const minPollMs = durationMs("minPollMs", o.minPollMs, 1, 3_600_000);
  const maxPollMs = durationMs("maxPollMs", o.maxPollMs, 1, 3_600_000);
  if (minPollMs !== undefined && maxPollMs !== undefined && minPollMs > maxPollMs) {
    throw new KeyqError("INVALID_INPUT", `Option "minPollMs" (${minPollMs} ms) is above "maxPollMs" (${maxPollMs} ms); give minPollMs <= maxPollMs.`, {
      field: "minPollMs",
    });
  }
  const { batchTimeoutMs, idleTimeoutMs, statementTimeoutMs } = timeouts(o);
  return {
    handler: o.handler as BatchSettings["handler"],
    handleBatch: o.handleBatch as BatchSettings["handleBatch"],
    onError: o.onError as BatchSettings["onError"],
    maxEvents: o.maxEvents ?? defaultMaxEvents,
    statementTimeoutMs: statementTimeoutMs ?? Math.min(30_000, batchTimeoutMs),
    idleTimeoutMs,
    batchTimeoutMs,
    eventTimeoutMs: durationMs("eventTimeout", o.eventTimeout, 1, MAX_TIMEOUT_MS) ?? Number.POSITIVE_INFINITY,
    onRetry: o.onRetry as BatchSettings["onRetry"],
    retryBackoff: {
      baseMs: durationMs("retryBackoff.baseMs", o.retryBackoff?.baseMs, 1, MAX_TIMEOUT_MS) ?? 200,
      capMs: durationMs("retryBackoff.capMs", o.retryBackoff?.capMs, 1, MAX_TIMEOUT_MS) ?? 10_000,
    },
    budgetMs: durationMs("budgetMs", o.budgetMs, 1, 86_400_000) ?? 10_000,
    maxBatches: o.maxBatches ?? Number.MAX_SAFE_INTEGER,
    signal: o.signal,
    minPollMs: minPollMs ?? 100,
    maxPollMs: maxPollMs ?? 5_000,
    worker: o.worker,
    workers: o.workers,
  };
}
