/**
 * Running the user's handlers over a received batch: per event (`handler`:
 * one call per event, each in its own lazily opened savepoint, see
 * savepoint.ts) or all at once (`handleBatch`). Failures are collected for
 * the kind to record; the batch's life decides when no further event
 * starts; machine.ts decides how each event is admitted and settles.
 *
 * @module
 */

import type { AnyEvent, BatchSettings } from "./settings.ts";
import type { Executor, Row, SqlParam } from "../driver.ts";
import { describeError } from "../error-text.ts";
import type { EventRef, WireEvent } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { type BatchLife, timer } from "./life.ts";
import { checkPayload, type PayloadSchema, plainEvent } from "../payload.ts";
import { admit, type CallResult, endsBatch, type EventOutcome, settle, swallowedError } from "./machine.ts";
import { counting, type Tally } from "./report.ts";
import { batchTx, type EventScope, type HandlerTx } from "./savepoint.ts";
import type { HandlerContext, KeyqEvent } from "../types.ts";

/** Where a batch stands while it runs: its life, and when it should stop starting events. */
export interface BatchRun {
  life: BatchLife;
  /** Epoch ms after which no further event starts (the run's budget); Infinity for none. */
  until: number;
  /** The handler call in progress (settled when none); it may reject. */
  inflight: PromiseLike<unknown>;
  /** Statements sent through counting executors: the handlers' own and the fence hooks' (report.ts). */
  counted: Tally;
  /** BatchSettings.hold's answer for this batch. */
  held?: (drained?: boolean) => void;
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

/**
 * The payload of a wire event: a row's JSON text is parsed on first use,
 * once (the parsed value replaces the text).
 */
export function payloadOf(w: WireEvent): unknown {
  if (w.raw !== undefined) {
    w.payload = JSON.parse(w.raw);
    w.raw = undefined;
  }
  return w.payload;
}

/**
 * The event a handler gets from a wire row: its payload is parsed and its
 * time made when first read, once (a handler that never looks pays for
 * neither), through accessors its objects share; `toJSON` gives every
 * field. Assigning either replaces it.
 */
class RowEvent {
  readonly #w: WireEvent;
  #time: Date | undefined;
  id: string;
  type: string;
  key: string | null;
  retry: number;
  slot?: number;
  trace?: string;
  constructor(w: WireEvent, slot: number | undefined) {
    this.#w = w;
    this.id = w.id;
    this.type = w.type;
    this.key = w.key;
    this.retry = w.retry;
    if (slot !== undefined) this.slot = slot;
    if (w.trace) this.trace = w.trace;
  }
  get payload(): never {
    return payloadOf(this.#w) as never;
  }
  set payload(value: never) {
    this.#w.raw = undefined;
    this.#w.payload = value;
  }
  get time(): Date {
    return (this.#time ??= new Date(this.#w.time));
  }
  set time(value: Date) {
    this.#time = value;
  }
  toJSON(): KeyqEvent<unknown> {
    return plainEvent(this);
  }
  // console.log and util.inspect show own fields only: without these, a
  // logged event would hide its payload and time (they live on the prototype).
  [Symbol.for("nodejs.util.inspect.custom")](): KeyqEvent<unknown> {
    return plainEvent(this);
  }
  [Symbol.for("Deno.customInspect")](inspect: (value: unknown, options?: unknown) => string, options?: unknown): string {
    return inspect(plainEvent(this), options);
  }
}

/** The event a handler gets: lazy for a wire row (RowEvent), plain for an event object of the engine. */
function toEvent(w: WireEvent, batchSlot: number | undefined): AnyEvent {
  const slot = w.slot ?? batchSlot;
  if (w.raw !== undefined) return new RowEvent(w, slot);
  const ev: AnyEvent = { id: w.id, type: w.type, key: w.key, payload: w.payload as never, time: new Date(w.time), retry: w.retry };
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
    for (const w of live) ready.push({ w, ev: toEvent(w, slot) });
    return ready;
  }
  for (const w of live) {
    try {
      const payload = await checkPayload(schema, payloadOf(w), `event ${w.id} (queue "${queue}")`);
      w.payload = payload;
      ready.push({ w, ev: toEvent(w, slot) });
    } catch (err) {
      log.fail(w, toEvent(w, slot), err);
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
 * What a handler call gets besides the event. Its signal and deadline are
 * made when the handler first reads them: an AbortController costs
 * microseconds, a plain consumer's handler runs for thousands of events a
 * second and most never look. One object per call, its getters shared.
 */
class CallContext implements HandlerContext {
  #ctl: AbortController | undefined;
  #deadline: Date | undefined;
  #relay: (() => void) | undefined;
  constructor(private readonly life: BatchLife, private readonly limit: number) {}
  get signal(): AbortSignal {
    return this.controller().signal;
  }
  get deadline(): Date {
    return (this.#deadline ??= new Date(this.limit));
  }
  /** The call's controller, made (and tied to the batch's signal) on first use. */
  controller(): AbortController {
    if (this.#ctl) return this.#ctl;
    const ctl = (this.#ctl = new AbortController());
    const life = this.life;
    if (life.signal.aborted) ctl.abort(life.signal.reason);
    else {
      this.#relay = () => ctl.abort(life.signal.reason);
      life.signal.addEventListener("abort", this.#relay, { once: true });
    }
    return ctl;
  }
  /** The call is over: stop relaying the batch's signal. */
  dispose(): void {
    if (this.#relay) this.life.signal.removeEventListener("abort", this.#relay);
  }
}

/**
 * Calls one handler with its own signal (the batch's, plus eventTimeout).
 * Resolves to the handler's error (undefined when it succeeded), or
 * "timeout"; rejects with BATCH_ABORTED when the batch dies meanwhile. A
 * handler still running then is left behind, its rejection observed. A
 * handler that returns no promise is done when it returns (nothing to
 * race); one that returns a promise costs one promise of keyq's (no
 * closure or listener per call while it does not read its signal).
 */
async function callHandler(
  s: BatchSettings,
  br: BatchRun,
  call: (ctx: HandlerContext) => unknown,
): Promise<CallResult> {
  const life = br.life;
  const limit = Number.isFinite(s.eventTimeoutMs) ? Math.min(life.deadline.getTime(), Date.now() + s.eventTimeoutMs) : life.deadline.getTime();
  const ctx = new CallContext(life, limit);
  const t = Number.isFinite(s.eventTimeoutMs) ? timer(s.eventTimeoutMs) : undefined;
  try {
    let out: unknown;
    try {
      out = call(ctx);
    } catch (error) {
      return { error };
    }
    if (!isThenable(out)) return OK;
    br.inflight = out;
    if (!t) return await life.settle(out);
    const timedOut = t.done.then(() => {
      ctx.controller().abort(eventTimedOut(s.eventTimeoutMs)); // made now if never read: a late read must see it aborted
      return { timedOut: true, error: eventTimedOut(s.eventTimeoutMs) };
    });
    return await life.race(Promise.race([life.settle(out), timedOut]));
  } finally {
    t?.cancel();
    ctx.dispose();
  }
}

/** The result of a call that succeeded (shared: nothing writes to it). */
const OK: CallResult = Object.freeze({});

function isThenable(x: unknown): x is PromiseLike<unknown> {
  return x !== null && (typeof x === "object" || typeof x === "function") && typeof (x as { then?: unknown }).then === "function";
}

/**
 * The handler's `tx` for one event: the event scope's, counted, and closed
 * once the call is over (a call left behind by eventTimeout must not write
 * into later events). One object per event, its methods shared.
 */
class EventTx implements HandlerTx {
  current = true;
  constructor(private readonly s: BatchSettings, private readonly br: BatchRun, private readonly scope: EventScope) {}
  query(text: string, params?: readonly SqlParam[]): Promise<Row[]> {
    if (!this.current) return Promise.reject(eventTimedOut(this.s.eventTimeoutMs));
    this.br.counted.n++;
    return this.scope.exec.query(text, params);
  }
  savepoint<T>(fn: (sp: Executor) => Promise<T>): Promise<T> {
    if (!this.current) return Promise.reject(eventTimedOut(this.s.eventTimeoutMs));
    const counted = this.br.counted;
    counted.n += 2; // SAVEPOINT and its RELEASE (or ROLLBACK TO); what runs in it is counted too
    return this.scope.exec.savepoint((sp) => fn(counting(sp, counted)));
  }
}

/**
 * One event in its own savepoint: one handler call, then its outcome
 * (machine.ts): kept, rolled back to its savepoint, or released.
 */
async function handleOne(s: BatchSettings, br: BatchRun, scope: EventScope, r: Ready, log: Failures): Promise<EventOutcome> {
  const { life } = br;
  scope.next();
  const tx = new EventTx(s, br, scope);
  const handler = s.handler!;
  const ev = r.ev;
  const call = await callHandler(s, br, (hc) => handler(ev, tx, hc));
  tx.current = false;
  if (life.dead()) throw life.error();
  const outcome = settle(call, scope.swallowed(), life.reason() === "stopped");
  if (outcome.kind === "ok") await scope.commit();
  else await scope.rollback();
  if (outcome.kind === "failed" || outcome.kind === "timedOut") log.fail(r.w, r.ev, outcome.error);
  return outcome;
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
    if (life.dead()) throw life.error();
    // Out of budget: stop, but only after one call, so a run slowed down
    // before its first event still makes progress.
    ended ||= life.signal.aborted || (out.handled > 0 && Date.now() >= br.until);
    const keyFailed = log.keys.size > 0 && r.w.key !== null && log.keys.has(r.w.key);
    const admission = ended || keyFailed ? admit({ hold, keyFailed, ended }) : "run";
    if (admission === "held") out.held.push({ id: r.w.id, txid: r.w.txid });
    else if (admission === "released") out.released.push({ id: r.w.id, txid: r.w.txid });
    else {
      const outcome = await handleOne(s, br, scope, r, log);
      if (outcome.kind === "released") out.released.push({ id: r.w.id, txid: r.w.txid });
      else out.handled++;
      ended ||= endsBatch(outcome);
    }
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
  const btx = batchTx(counting(tx, br.counted));
  const r = await callHandler(s, br, (hc) =>
    s.handleBatch!(ready.map((e) => e.ev), {
      tx: btx.exec,
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
  const swallowed = btx.swallowed();
  if (swallowed) throw swallowedError(swallowed.error); // its transaction is aborted: the whole batch rolls back
  out.handled = ready.length;
  return out;
}
