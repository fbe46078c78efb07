/**
 * The life of one batch as a small typed state machine: the phases of its
 * attempt, the steps between them, how each event is admitted and how its
 * handler call settles, and the batch's deadline. Pure functions returning
 * results (no throws), so every transition is unit-tested
 * (tests/unit/batch-machine.test.ts); batch.ts and handler.ts drive them.
 *
 * One attempt per batch: receive → handle → record → commit. Each event's
 * handler is called at most once per delivery; a failed event rolls back to
 * its own savepoint (savepoint.ts), so its neighbours are never called again.
 *
 * @module
 */

import { describeError } from "../error-text.ts";
import { KeyqError } from "../errors.ts";

/** Where a batch's attempt stands. The last four are final. */
export type Phase = "receiving" | "handling" | "recording" | "committing" | "committed" | "busy" | "aborted" | "failed";

/** What happened to the attempt. */
export type Step =
  /** The receive answered; `busy` when another worker holds what it needs (the attempt rolls back). */
  | { on: "received"; busy: boolean }
  /** Every event's handler call settled (or the rest were held or released). */
  | { on: "handled" }
  /** Failures, retries, deferrals were recorded (the ack). */
  | { on: "recorded" }
  /** COMMIT answered. */
  | { on: "committed" }
  /** The batch died: deadline or lost connection (BATCH_ABORTED). */
  | { on: "aborted"; error: KeyqError }
  /** A statement of keyq's own failed, or a `handleBatch` call threw. */
  | { on: "failed"; error: unknown };

/** The result of a step: the next phase, or why the step does not apply. */
export type Move = { ok: true; phase: Phase } | { ok: false; reason: string };

const FINAL: ReadonlySet<Phase> = new Set(["committed", "busy", "aborted", "failed"]);

/** The step each live phase waits for, and where it leads. */
const FORWARD: Readonly<Record<string, { on: Step["on"]; to: Phase }>> = {
  receiving: { on: "received", to: "handling" },
  handling: { on: "handled", to: "recording" },
  recording: { on: "recorded", to: "committing" },
  committing: { on: "committed", to: "committed" },
};

/**
 * The transition function.
 *
 * @example
 * ```ts
 * import { move } from "./machine.ts";
 * console.log(move("receiving", { on: "received", busy: false })); // { ok: true, phase: "handling" }
 * ```
 */
export function move(from: Phase, step: Step): Move {
  if (FINAL.has(from)) return { ok: false, reason: `the batch is already ${from}` };
  if (step.on === "aborted") return { ok: true, phase: "aborted" };
  if (step.on === "failed") return { ok: true, phase: "failed" };
  const f = FORWARD[from]!;
  if (f.on !== step.on) return { ok: false, reason: `a ${from} batch waits for "${f.on}", not "${step.on}"` };
  if (step.on === "received" && step.busy) return { ok: true, phase: "busy" };
  return { ok: true, phase: f.to };
}

/** True for a phase nothing follows. */
export function isFinal(p: Phase): boolean {
  return FINAL.has(p);
}

/** What becomes of an event before its handler is called. */
export type Admission = "run" | "held" | "released";

/**
 * `held`: an earlier event of its key failed and the policy holds the key
 * (Tier B pause); `released`: the batch starts no further event (stopped,
 * out of budget, past an event timeout), it comes again; else `run`.
 */
export function admit(e: { hold: boolean; keyFailed: boolean; ended: boolean }): Admission {
  if (e.hold && e.keyFailed) return "held";
  return e.ended ? "released" : "run";
}

/** How a handler call settled (handler.ts). */
export interface CallResult {
  error?: unknown;
  timedOut?: boolean;
}

/** One event's outcome. */
export type EventOutcome =
  | { kind: "ok" }
  | { kind: "failed"; error: unknown }
  | { kind: "timedOut"; error: unknown }
  | { kind: "released" };

/** The outcome of every call that succeeded (shared, frozen: one per event would be garbage). */
const SUCCEEDED: EventOutcome = Object.freeze({ kind: "ok" });

/**
 * Settles one handler call: it threw (failed, or released when it gave up
 * because the worker stops), ran past eventTimeout, or returned normally
 * while a statement it ran failed (`swallowed`: the event fails with
 * HANDLER_SWALLOWED_FAILURE), or succeeded.
 */
export function settle(call: CallResult, swallowed: { error: unknown } | undefined, stopping: boolean): EventOutcome {
  if (call.timedOut) return { kind: "timedOut", error: call.error };
  if ("error" in call) return stopping ? { kind: "released" } : { kind: "failed", error: call.error };
  if (swallowed) return { kind: "failed", error: swallowedError(swallowed.error) };
  return SUCCEEDED;
}

/** True when an outcome ends the batch: no further event starts. */
export function endsBatch(o: EventOutcome): boolean {
  return o.kind === "timedOut";
}

/**
 * The error of a handler that returned normally although a statement it
 * ran through `tx` failed: the swallowed error is its cause and is named.
 */
export function swallowedError(error: unknown): KeyqError {
  const e = describeError(error);
  const what = `${e.code !== undefined ? `${e.code}: ` : ""}${e.message}`;
  return new KeyqError(
    "HANDLER_SWALLOWED_FAILURE",
    `The handler returned normally, but a statement it ran through tx failed (${what}), so its writes were rolled back and the event fails. ` +
      "Run a statement you expect to fail in tx.savepoint(sp => sp.query(...)) and catch that call's rejection.",
    { swallowed: e },
    { cause: error },
  );
}

/** Grace past a run's budget a batch of `run()` may take to finish the handler call in progress (ms). */
export const BUDGET_GRACE_MS = 2_000;

/** A batch's time limit: its length and what set it. */
export interface Deadline {
  ms: number;
  /** "budget": the run's budget plus BUDGET_GRACE_MS came first; else batchTimeout. */
  by: "budget" | "batchTimeout";
}

/**
 * A batch ends by `batchTimeout`, or, when started by `run()` (`until` is
 * the budget's end, epoch ms), by the budget's end plus the grace, whichever
 * is sooner.
 */
export function deadline(now: number, batchTimeoutMs: number, until: number | undefined): Deadline {
  if (until === undefined || !Number.isFinite(until)) return { ms: batchTimeoutMs, by: "batchTimeout" };
  const left = Math.max(1, until + BUDGET_GRACE_MS - now);
  return left < batchTimeoutMs ? { ms: left, by: "budget" } : { ms: batchTimeoutMs, by: "batchTimeout" };
}
