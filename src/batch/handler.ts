/**
 * Running the user's handlers over a received batch: per event (`handler`:
 * no savepoints until one fails, then the batch runs again with one per
 * event, see savepoint.ts) or all at once (`handleBatch`). Failures are
 * collected for the kind to record; the batch's life decides when no
 * further event starts.
 *
 * @module
 */

import type { AnyEvent, BatchSettings } from "./settings.ts";
import type { Executor } from "../driver.ts";
import { describeError } from "../error-text.ts";
import type { EventRef, Received, WireEvent } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { type BatchLife, timer } from "./life.ts";
import { checkPayload, type PayloadSchema } from "../payload.ts";
import { counting, type Tally } from "./report.ts";
import { directScope, type EventScope, eventScope, type KnownOutcome, type Rerun } from "./savepoint.ts";
import type { HandlerContext } from "../types.ts";

/** Where a batch stands while it runs: its life, and when it should stop starting events. */
export interface BatchRun {
  life: BatchLife;
  /** Epoch ms after which no further event starts (the run's budget); Infinity for none. */
  until: number;
  /** The handler call in progress (settled when none). */
  inflight: Promise<unknown>;
  /** Statements sent through counting executors: the handlers' own and the fence hooks' (report.ts). */
  counted: Tally;
  /**
   * Undefined on the fast path (no savepoints; a failure reruns the batch).
   * On the careful rerun: the outcomes the fast attempt already learned.
   */
  known?: Map<string, KnownOutcome>;
  /** What the batch's last attempt received (the rerun reads the same place first). */
  received?: Received;
}

/**
 * The batch's per-event scope: straight on `tx` on the fast path, lazily
 * opened savepoints on the careful rerun (or for a batch holding a retried
 * event).
 */
export function batchScope(tx: Executor, br: BatchRun): EventScope {
  return br.known ? eventScope(tx) : directScope(tx);
}

/** An event ready for the handler, with its wire form. */
export interface Ready {
  w: WireEvent;
  ev: AnyEvent;
}

/** The failed events of a batch, and their keys. */
export interface Failures {
  readonly failed: Map<string, EventRef & { error: unknown }>;
  /** Keys whose event failed in this batch (the pause policy holds their later events). */
  readonly keys: Set<string>;
  fail(w: WireEvent, ev: AnyEvent, err: unknown): void;
}

/** What the handlers did. */
export interface Handled {
  handled: number;
  /** Held behind a failed head of their key. */
  held: EventRef[];
  /** Not started (stopped, out of budget): they come again, in order. */
  released: EventRef[];
}

/** A failure log that also tells the user's `onError`. */
export function failures(s: BatchSettings): Failures {
  const failed = new Map<string, EventRef & { error: unknown }>();
  const keys = new Set<string>();
  return {
    failed,
    keys,
    fail(w, ev, err) {
      failed.set(w.id, { id: w.id, txid: w.txid, error: describeError(err) });
      if (w.key !== null) keys.add(w.key);
      try {
        s.onError?.(err, ev);
      } catch { /* logging must not break the batch */ }
    },
  };
}

function toEvent(w: WireEvent, payload: unknown, slot: number | undefined): AnyEvent {
  const ev: AnyEvent = { id: w.id, type: w.type, key: w.key, payload: payload as never, time: new Date(w.time), retry: w.retry };
  if (slot !== undefined) ev.slot = slot;
  if (w.trace) ev.trace = w.trace;
  return ev;
}

/** Checks payloads against the queue's schema: a payload that fails is a failure of that event, not a crash. */
export async function readyEvents(
  schema: PayloadSchema | undefined,
  queue: string,
  live: WireEvent[],
  slot: number | undefined,
  log: Failures,
): Promise<Ready[]> {
  const ready: Ready[] = [];
  if (!schema) {
    for (const w of live) ready.push({ w, ev: toEvent(w, w.payload, slot) });
    return ready;
  }
  for (const w of live) {
    try {
      const payload = await checkPayload(schema, w.payload, `event ${w.id} (queue "${queue}")`);
      ready.push({ w, ev: toEvent(w, payload, slot) });
    } catch (err) {
      log.fail(w, toEvent(w, w.payload, slot), err);
    }
  }
  return ready;
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
 *
 * The call's signal and deadline are made when the handler first reads
 * them: an AbortController costs microseconds, a plain consumer's handler
 * runs for thousands of events a second and most never look. A handler
 * that returns no promise is done when it returns (nothing to race).
 */
async function callHandler(
  s: BatchSettings,
  br: BatchRun,
  fn: (ctx: HandlerContext) => Promise<void> | void,
): Promise<{ error?: unknown; timedOut?: boolean }> {
  const life = br.life;
  const limit = Math.min(life.deadline.getTime(), Date.now() + s.eventTimeoutMs);
  let ctl: AbortController | undefined;
  const relay = () => ctl!.abort(life.signal.reason);
  const signal = (): AbortSignal => {
    if (!ctl) {
      ctl = new AbortController();
      if (life.signal.aborted) relay();
      else life.signal.addEventListener("abort", relay, { once: true });
    }
    return ctl.signal;
  };
  let deadline: Date | undefined;
  const ctx: HandlerContext = {
    get signal() {
      return signal();
    },
    get deadline() {
      return (deadline ??= new Date(limit));
    },
  };
  const t = Number.isFinite(s.eventTimeoutMs) ? timer(s.eventTimeoutMs) : undefined;
  try {
    let out: unknown;
    try {
      out = fn(ctx);
    } catch (error) {
      return { error };
    }
    if (!isThenable(out)) return {};
    // Never rejects: a handler left behind is no unhandled rejection.
    const settled = Promise.resolve(out).then(() => ({}), (error: unknown) => ({ error }));
    br.inflight = settled;
    if (!t) return await life.race(settled);
    const timedOut = t.done.then(() => {
      signal(); // made now if the handler never read it: a late read must see it aborted
      ctl!.abort(eventTimedOut(s.eventTimeoutMs));
      return { timedOut: true, error: eventTimedOut(s.eventTimeoutMs) };
    });
    return await life.race(Promise.race([settled, timedOut]));
  } finally {
    t?.cancel();
    if (ctl) life.signal.removeEventListener("abort", relay);
  }
}

function isThenable(x: unknown): x is PromiseLike<unknown> {
  return x !== null && (typeof x === "object" || typeof x === "function") && typeof (x as { then?: unknown }).then === "function";
}

/**
 * One event in its scope; the result says whether it counts as handled,
 * failed or released. On the fast path a failure throws a {@link Rerun}
 * (its writes cannot be undone alone); on the rerun an outcome the fast
 * attempt learned is applied without calling the handler again.
 */
async function handleOne(s: BatchSettings, br: BatchRun, scope: EventScope, r: Ready, log: Failures): Promise<"ok" | "released" | "failed" | "timeout"> {
  const { life } = br;
  scope.next();
  let current = true; // a call left behind (eventTimeout) must not write into later events
  const exec: Executor = {
    query(text, params) {
      if (!current) return Promise.reject(eventTimedOut(s.eventTimeoutMs));
      br.counted.n++;
      return scope.exec.query(text, params);
    },
  };
  const known = br.known?.get(r.w.id);
  const res: { error?: unknown; timedOut?: boolean } = known
    ? { error: known.error, timedOut: known.kind === "timedOut" } // learned by the fast attempt: not called again
    : await callHandler(s, br, (hc) => s.handler!(r.ev, exec, hc));
  current = false;
  if (life.dead()) throw life.error();
  if (!br.known && "error" in res) {
    // Its writes cannot be undone alone: roll the batch back, run it again with savepoints.
    const kind = res.timedOut ? "timedOut" : life.reason() === "stopped" ? "released" : "failed";
    throw { rerun: true, id: r.w.id, outcome: { kind, error: res.error } } satisfies Rerun;
  }
  if (known?.kind === "released") return "released";
  if (!("error" in res)) {
    await scope.commit();
    return "ok";
  }
  await scope.rollback(res.error);
  // It gave up because the worker is stopping: not a failure, it comes again.
  if (!res.timedOut && life.reason() === "stopped") return "released";
  log.fail(r.w, r.ev, res.error);
  return res.timedOut ? "timeout" : "failed";
}

/**
 * `handler`: one call per event, in order. Once the batch is stopped, out of
 * budget or past an event timeout, no further event starts (those are
 * released); with `hold`, nothing of a failed key may overtake its head.
 */
export async function handleEach(s: BatchSettings, br: BatchRun, scope: EventScope, ready: Ready[], hold: boolean, log: Failures): Promise<Handled> {
  const { life } = br;
  const out: Handled = { handled: 0, held: [], released: [] };
  let ended = false; // stopped, out of budget, or an event timed out: start nothing more
  for (const r of ready) {
    const ref = { id: r.w.id, txid: r.w.txid };
    if (hold && r.w.key !== null && log.keys.has(r.w.key)) {
      out.held.push(ref);
      continue;
    }
    if (life.dead()) throw life.error();
    // Out of budget: stop, but only after one call, so a run slowed down
    // before its first event still makes progress.
    ended ||= life.signal.aborted || (out.handled > 0 && Date.now() >= br.until);
    if (ended) {
      out.released.push(ref);
      continue;
    }
    const result = await handleOne(s, br, scope, r, log);
    if (result === "released") out.released.push(ref);
    else out.handled++;
    ended ||= result === "timeout";
  }
  return out;
}

/** `handleBatch`: one call for all events; an error rolls the whole batch back. */
export async function handleAll(s: BatchSettings, br: BatchRun, tx: Executor, ready: Ready[], log: Failures): Promise<Handled> {
  const { life } = br;
  const out: Handled = { handled: 0, held: [], released: [] };
  if (ready.length === 0) return out; // an empty look (or only contended keys) is not a batch
  const byEvent = new Map(ready.map(({ w, ev }) => [ev, w] as const));
  if (life.signal.aborted) throw life.error(); // stopped before it began: nothing done, nothing lost
  const r = await callHandler(s, br, (hc) =>
    s.handleBatch!(ready.map((e) => e.ev), {
      tx: counting(tx, br.counted),
      signal: hc.signal,
      deadline: hc.deadline,
      fail: (ev, err) => {
        const w = byEvent.get(ev as AnyEvent);
        if (!w) throw new KeyqError("INVALID_INPUT", "fail() takes one of the events of this batch.", { field: "event" });
        log.fail(w, ev as AnyEvent, err);
      },
    }));
  if (life.dead()) throw life.error();
  if ("error" in r) {
    if (r.timedOut) life.abort("deadline", r.error); // one call is the whole batch
    if (r.timedOut || life.reason() === "stopped") throw life.error();
    throw r.error; // the whole batch rolls back; the same events come again
  }
  out.handled = ready.length;
  return out;
}
