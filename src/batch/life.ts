/**
 * The life of one batch: its deadline, the signal its handlers get, and why
 * it ended early. A batch is dead when its deadline passes or its
 * connection is lost: then no further handler starts and it rolls back.
 * A stopped batch (the worker's signal) starts no further handler either,
 * but commits what finished. Once its handlers are done and the driver is
 * committing, the batch is sealed: a COMMIT in flight cannot be recalled, so
 * the deadline no longer kills it; only a lost connection or a COMMIT that
 * does not answer within a grace period does, and then its outcome is
 * reported as unknown, not as rolled back.
 *
 * @module
 */

import type { Executor } from "../driver.ts";
import { KeyqError } from "../errors.ts";
import { classify } from "../faults.ts";

/** Why a batch ended early. */
export type AbortReason = "deadline" | "stopped" | "connection";

/** A batch's lifetime controls (internal). */
export interface BatchLife {
  /** Fires on any reason; handlers get it. */
  readonly signal: AbortSignal;
  /** The hard deadline. */
  readonly deadline: Date;
  /** Why it ended early, if it did. */
  reason(): AbortReason | undefined;
  /** True once the deadline passed or the connection was lost. */
  dead(): boolean;
  /** Ends the batch early; the first reason wins. */
  abort(reason: AbortReason, cause?: unknown): void;
  /**
   * The handlers are done and the driver sends COMMIT: from now on the
   * deadline does not end the batch; a lost connection, or no answer
   * `graceMs` after the deadline, does, with the COMMIT's outcome unknown.
   */
  seal(graceMs: number): void;
  /** Rejects with `error()` once the batch is dead; never resolves. */
  readonly died: Promise<never>;
  /**
   * Settles like `p`, or rejects with `error()` once the batch dies first.
   * `Promise.race([p, died])` for the per-event path: one promise, no
   * reaction left on `died` per call.
   */
  race<T>(p: PromiseLike<T>): Promise<T>;
  /**
   * The per-event race of a handler's promise: resolves to `{}` (shared)
   * when `p` fulfils, `{ error }` when it rejects, or rejects with `error()`
   * once the batch dies first. One promise per call and no listener left:
   * handler calls of a batch run one at a time.
   */
  settle(p: PromiseLike<unknown>): Promise<{ error?: unknown }>;
  /** Resolves when the deadline passes (or the batch is disposed). */
  readonly expired: Promise<void>;
  /** The BATCH_ABORTED error for the reason. */
  error(): KeyqError;
  /**
   * Wraps an executor: once the batch is dead it refuses queries (a dead
   * connection must not be written to), and a query failing with a
   * connection error kills the batch.
   */
  guard(exec: Executor): Executor;
  /** Clears the timer and listeners. */
  dispose(): void;
}

/** A promise that rejects when the batch dies, and races against it without a reaction left per call. */
function mortality(
  dead: () => boolean,
  error: () => KeyqError,
): { died: Promise<never>; die(e: KeyqError): void; race: BatchLife["race"]; settle: BatchLife["settle"] } {
  let reject!: (e: KeyqError) => void;
  const died = new Promise<never>((_, r) => (reject = r));
  died.catch(() => {}); // observed through race() only
  const mourners = new Set<(e: KeyqError) => void>();
  let call: ((e: KeyqError) => void) | undefined; // the handler call being settled (one at a time)
  const die = (e: KeyqError): void => {
    reject(e);
    for (const m of mourners) m(e);
    mourners.clear();
    call?.(e);
    call = undefined;
  };
  const race = <T>(p: PromiseLike<T>): Promise<T> =>
    new Promise<T>((resolve, fail) => {
      if (dead()) return fail(error());
      mourners.add(fail);
      p.then((v) => {
        mourners.delete(fail);
        resolve(v);
      }, (e: unknown) => {
        mourners.delete(fail);
        fail(e);
      });
    });
  const settle = (p: PromiseLike<unknown>): Promise<{ error?: unknown }> =>
    new Promise((resolve, fail) => {
      if (dead()) return fail(error());
      call = fail;
      p.then(() => {
        if (call === fail) call = undefined;
        resolve(FULFILLED);
      }, (e: unknown) => {
        if (call === fail) call = undefined;
        resolve({ error: e });
      });
    });
  return { died, die, race, settle };
}

/** What settle() resolves to for a fulfilled call (shared). */
const FULFILLED: { error?: unknown } = Object.freeze({});

/**
 * Starts a batch's life: deadline in `timeoutMs`, stopped when `stop`
 * aborts; `by` names what set the deadline when it is not batchTimeout
 * (the run's budget), for the error's message.
 */
export function batchLife(timeoutMs: number, stop: AbortSignal | undefined, by?: string): BatchLife {
  const ctl = new AbortController();
  const deadline = new Date(Date.now() + timeoutMs);
  let why: AbortReason | undefined;
  let cause: unknown;
  let grace: number | undefined; // set when sealed
  const dead = () => why === "deadline" || why === "connection";
  const error = (): KeyqError => abortedError(why, { deadline, by }, cause, grace);
  const m = mortality(dead, error);
  const abort = (reason: AbortReason, c?: unknown): void => {
    if (why !== undefined && !(why === "stopped" && reason !== "stopped")) return;
    const first = why === undefined;
    why = reason;
    cause = c;
    if (reason !== "stopped") m.die(error());
    if (first) ctl.abort(error());
  };
  let expire!: () => void;
  const expired = new Promise<void>((resolve) => (expire = resolve));
  const onDeadline = () => {
    expire();
    abort("deadline");
  };
  let timer = setTimeout(onDeadline, timeoutMs);
  const onStop = () => abort("stopped", stop?.reason);
  if (stop?.aborted) onStop();
  else stop?.addEventListener("abort", onStop, { once: true });
  let over = false; // disposed: a handler left behind must not reach a connection back in the pool
  const refuse = (): KeyqError | undefined => (dead() ? error() : over ? overError() : undefined);
  return {
    signal: ctl.signal,
    deadline,
    reason: () => why,
    dead,
    abort,
    race: m.race,
    settle: m.settle,
    seal(graceMs) {
      if (grace !== undefined || dead()) return;
      grace = graceMs;
      clearTimeout(timer);
      timer = setTimeout(onDeadline, Math.max(0, deadline.getTime() - Date.now()) + graceMs);
    },
    died: m.died,
    expired,
    error,
    guard: (exec) => guarded(exec, refuse, (err) => abort("connection", err)),
    dispose() {
      over = true;
      clearTimeout(timer);
      expire();
      stop?.removeEventListener("abort", onStop);
    },
  };
}

/**
 * The BATCH_ABORTED error of a batch that ended early for `why`; a lost
 * connection's error is its cause. A sealed batch (grace set) died while its
 * COMMIT was in flight: `details.commit` is "unknown".
 */
function abortedError(why: AbortReason | undefined, limit: { deadline: Date; by: string | undefined }, cause: unknown, grace: number | undefined): KeyqError {
  const when = `${limit.by ?? "batchTimeout"}, ${limit.deadline.toISOString()}`;
  const text = grace !== undefined
    ? `${
      why === "deadline"
        ? `The batch's COMMIT did not answer within ${grace} ms after its deadline (${when})`
        : `The batch's connection was lost while it committed (${describe(cause)})`
    }; it may have committed or rolled back. Events it did not commit come again, so keep handlers idempotent.`
    : why === "deadline"
    ? `The batch ran past its deadline (${when}) and was rolled back; its events come again. Make handlers honour their signal, or raise ${
      limit.by ? "budgetMs" : "batchTimeout"
    }.`
    : why === "connection"
    ? `The batch's connection was lost and the batch was rolled back; its events come again (${describe(cause)}).`
    : "The batch was stopped by the worker's signal and was rolled back; its events come again.";
  const base = { reason: why, cause, deadline: limit.deadline.toISOString(), by: limit.by ? "budget" : "batchTimeout" };
  const details = grace !== undefined ? { ...base, commit: "unknown" } : base;
  return new KeyqError("BATCH_ABORTED", text, details, cause === undefined ? undefined : { cause });
}

/**
 * Wraps an executor (and its savepoints): a query is refused with
 * `refuse()`'s error when it has one, and a query failing with a connection
 * error reports it to `lost`.
 */
function guarded(exec: Executor, refuse: () => KeyqError | undefined, lost: (err: unknown) => void): Executor {
  const query: Executor["query"] = async (text, params) => {
    const no = refuse();
    if (no) throw no;
    try {
      return await exec.query(text, params);
    } catch (err) {
      if (classify(err) === "connection") lost(err);
      throw err;
    }
  };
  const flag = exec.savepointStatements ? { savepointStatements: true } : {};
  if (!exec.savepoint) return { query, ...flag };
  const savepoint = exec.savepoint.bind(exec);
  return {
    query,
    ...flag,
    savepoint: <T>(fn: (sp: Executor) => Promise<T>): Promise<T> => {
      const no = refuse();
      if (no) return Promise.reject(no);
      return savepoint((sp) => fn(guarded(sp, refuse, lost)));
    },
  };
}

function overError(): KeyqError {
  return new KeyqError("BATCH_ABORTED", "This batch is over; a handler cannot use its transaction after the batch ended.", {
    reason: "stopped",
  });
}

function describe(err: unknown): string {
  const e = err as { message?: unknown; code?: unknown } | null;
  const msg = typeof e?.message === "string" ? e.message : String(err);
  return typeof e?.code === "string" ? `${e.code}: ${msg}` : msg;
}

/** Settles after `ms` (or never when `ms` is Infinity), unref-free and cancellable. */
export function timer(ms: number): { done: Promise<void>; cancel(): void } {
  let id: ReturnType<typeof setTimeout> | undefined;
  const done = new Promise<void>((resolve) => {
    if (Number.isFinite(ms)) id = setTimeout(resolve, Math.max(0, ms));
  });
  return { done, cancel: () => clearTimeout(id) };
}
