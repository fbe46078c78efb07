/**
 * Consumers: plain (one cursor, every event in order), exclusive (Tier A:
 * many workers, one per key at a time) and ordered (Tier B: N slots, FIFO per
 * key). Each batch is one transaction; `run` and `work` are shared, the
 * kind's own steps live in kinds.ts.
 *
 * @module
 */

import { type BatchSettings, batchSettings } from "../batch/settings.ts";
import { type BatchLink, type ConsumerContext, runBatch, type Ticked } from "../batch/batch.ts";
import { engine } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { chainOf, type Executor, leadOf, transactional } from "../driver.ts";
import { type ConsumerKind, type Started, SUBSCRIBE } from "./kinds.ts";
import { consume, emptyReport, type LoopLink, runLoop, short, type Woke, workLoop } from "./loop.ts";
import { observeBatch } from "../observe/batches.ts";
import { type Hub, hub as newHub } from "../observe/observer.ts";
import { pollWaker, type Waker, waker } from "../observe/wake.ts";
import { buildConcurrently } from "./slot-index.ts";
import * as v from "valibot";
import { target } from "../ops/positions.ts";
import type { Target } from "../engine/calls.ts";
import type { BatchOptions, BatchReport, BlockedKey, RunOptions, RunReport, SeekResult, SlotAssignment, StartPosition, WorkOptions } from "../types.ts";
import { checkName, checkText, int, parse, show } from "../validate.ts";

/** Options of `subscribe`. */
export interface SubscribeOptions {
  /**
   * Where a new consumer starts: `"latest"` (default: every event that
   * commits after `subscribe` returns, whatever the ticker did), `"earliest"`
   * (the start of the retained range), a `Date`, or an event id (that event
   * first). Applies only when the consumer is created; `seek` moves an
   * existing one. Outside the retained range: `POSITION_OUT_OF_RANGE`.
   */
  from?: StartPosition;
}

const subscribeSchema = v.strictObject({ from: v.optional(v.unknown()) });
const seekSchema = v.strictObject({ slot: v.optional(int(0, 1023)) });

/**
 * The calls of a consumer that need no batch transaction: create, move and
 * remove it. A client over a driver without interactive transactions (Neon's
 * HTTP `neon()`) gives only these; {@link Consumer} adds the consuming calls.
 *
 * @example
 * ```ts
 * import type { ConsumerHandle } from "@keyq/keyq";
 * async function rewind(c: ConsumerHandle): Promise<void> {
 *   await c.subscribe();
 *   await c.seek("earliest");
 * }
 * console.log(typeof rewind);
 * ```
 */
export interface ConsumerHandle {
  /** The queue it reads. */
  readonly queue: string;
  /** The consumer's name. */
  readonly name: string;
  /**
   * Creates the consumer (idempotent); true when it was new. It starts at
   * `from` (default `"latest"`: what commits after this call returns); an
   * existing consumer is not moved (use `seek`).
   */
  subscribe(options?: SubscribeOptions): Promise<boolean>;
  /**
   * Moves the consumer (or `{ slot }` of an ordered one) to a position in one
   * transaction; `CONSUMER_BUSY` while a batch holds it. The moved slots'
   * pending retries and blocked keys are dropped; dead letters stay.
   */
  seek(to: StartPosition, options?: { slot?: number }): Promise<SeekResult>;
  /** Removes the consumer with its cursor, retries and dead letters; true when it existed. */
  unsubscribe(): Promise<boolean>;
}

/**
 * A consumer of a queue. Every kind has the same calls; what a batch reads
 * and who may run it at once depends on the kind.
 */
export interface Consumer<P = unknown> extends ConsumerHandle {
  /** Consumes one batch in one transaction. */
  batch(options: BatchOptions<P>): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: RunOptions<P>): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: WorkOptions<P>): Promise<RunReport>;
}

/** The Tier B extras of an ordered consumer: its slots and blocked keys. */
export interface OrderedHandle extends ConsumerHandle {
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

/**
 * A Tier B ordered consumer: the shared calls plus its slots; its batch,
 * run and work also take the static assignment `worker`/`workers`.
 */
export interface OrderedConsumer<P = unknown> extends Consumer<P>, OrderedHandle {
  /** Consumes one batch (of one slot, or several while it has room) in one transaction. */
  batch(options: BatchOptions<P> & SlotAssignment): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: RunOptions<P> & SlotAssignment): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: WorkOptions<P> & SlotAssignment): Promise<RunReport>;
}

/** Options a strict-order consumer refuses: the pause policy holds a failed key's later events back per event, so no `handleBatch`. */
export interface PerEventOnly {
  /** Not with `onFailure: "pause"`: use `handler` (or `on`). */
  handleBatch?: never;
}

/**
 * A Tier B ordered consumer with `onFailure: "pause"` (strict order per
 * key): its calls take per-event handlers only, since a failed head holds
 * its key's later events back one by one.
 */
export interface StrictOrderedConsumer<P = unknown> extends OrderedConsumer<P> {
  /** Consumes one batch (of one slot, or several while it has room) in one transaction. */
  batch(options: BatchOptions<P> & SlotAssignment & PerEventOnly): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: RunOptions<P> & SlotAssignment & PerEventOnly): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: WorkOptions<P> & SlotAssignment & PerEventOnly): Promise<RunReport>;
}

/**
 * Creates the consumer (idempotent). The engine may first ask for slot
 * indexes built concurrently, or to wait for another session's build; after
 * 600 rounds, or when the server cannot build concurrently, it builds inline.
 */
async function subscribe(ctx: ConsumerContext, name: string, k: ConsumerKind, start: Target | null): Promise<boolean> {
  let inline = false;
  for (let round = 1;; round++) {
    const r = await engine(ctx.driver, ctx.schema).subscribe({
      queue: ctx.queue,
      consumer: name,
      kind: k.kind,
      slots: k.slots,
      settings: k.settings,
      indexInline: inline,
      start,
    });
    if (!r.build && !r.wait) return r.created;
    inline = !(await buildConcurrently(ctx, r.build ?? [])) || round >= 600;
    if (r.wait) await new Promise((res) => setTimeout(res, 100));
  }
}

/** Checks batch/run/work options for `k`; every refusal happens before the consumer row, a tick or a batch is written. */
function consumeSettings(ctx: ConsumerContext, k: ConsumerKind, options: unknown, what: string): BatchSettings {
  transactional(ctx.driver);
  const s = batchSettings(options, what, k.maxEvents);
  k.check(s);
  return s;
}

/** Takes `wakeups` (work() only) out of the options; the rest are checked as batch settings. */
function splitWakeups(options: unknown): { wakeups: boolean; rest: unknown } {
  if (typeof options !== "object" || options === null || !Object.hasOwn(options, "wakeups")) return { wakeups: true, rest: options };
  const { wakeups, ...rest } = options as { wakeups?: unknown };
  if (wakeups !== undefined && typeof wakeups !== "boolean") {
    throw new KeyqError("INVALID_INPUT", `Option "wakeups" of work options must be true or false, not ${show(wakeups)}.`, { field: "wakeups", value: wakeups });
  }
  return { wakeups: wakeups !== false, rest };
}

/** Builds the shared consumer surface around one kind; `obs` hears its batches and workers. */
export function makeConsumer<P>(ctx: ConsumerContext, name: string, k: ConsumerKind, obs: Hub = newHub()): Consumer<P> {
  const queue = ctx.queue;
  checkName("queue", queue);
  checkName("consumer", name);
  let subscribed = false;
  const sub = async (options?: SubscribeOptions): Promise<boolean> => {
    const o = parse(subscribeSchema, options ?? {}, "subscribe options");
    const start = o.from === undefined ? null : target("from", o.from, "subscribe");
    const created = await subscribe(ctx, name, k, start);
    subscribed = true;
    return created;
  };
  // run(): each batch ends by the budget plus a grace (batch.ts); work()'s runs are slices, not limits.
  // A run's start: one statement (start_run) that also subscribes a fresh client's consumer;
  // when the engine asks for a slot index built outside a transaction, subscribe does it first.
  const start = async (s: BatchSettings, w?: Waker): Promise<Started> => {
    const ticked = w?.ticking();
    let done: Started | undefined;
    try {
      const r = await k.start(s, !subscribed);
      if (r !== SUBSCRIBE) {
        subscribed = true;
        return done = r;
      }
      await sub();
      const again = await k.start(s, false);
      if (again === SUBSCRIBE) throw new Error("keyq: start_run asked to subscribe a subscribed consumer");
      return done = { ...again, statements: again.statements + 1 };
    } finally {
      ticked?.(done?.tick ?? null, done?.busy ?? true);
    }
  };
  // The run's batches share one connection where the driver chains transactions (each COMMIT goes with the next receive).
  // run() (bounded) ends on a batch that took the last of what was ticked: one not full of a kind that reads up to
  // the newest tick, or Tier A's that found no free chunk left (drained), and that started (or dropped, or deferred)
  // every event it received: events a batch gave back (an event timeout, a dead batch) come in the next batch. The
  // empty look it saves costs a cron invocation one to three round trips; a chunk freed meanwhile by another batch's
  // rollback, or a retry falling due, waits for the next run. work()'s runs still look again (its received hook).
  const run = async (s: BatchSettings, bounded: boolean, w?: Waker): Promise<RunReport> => {
    const chain = chainOf(ctx.driver);
    let drained = false;
    let got = 0;
    const s2: BatchSettings = bounded ? { ...s, received: (d, n) => void (drained = d, got = n) } : s;
    const ends = bounded ? (b: BatchReport) => (k.readsAll ? short(b, s) : drained) && b.events + b.dropped + b.deferred >= got : undefined;
    return await runLoop(s2, () => start(s2, w), (until, link) => once(s2, until, bounded, link && chain && { ...link, chain }), chain, ends);
  };
  // A tick (and plan) that tells the waker: it covers the commits heard before it, and wakes this process's other consumers.
  // On `exec` when given: a lead statement of a batch (wokeRun), issued before the tick() call returns.
  const tick = async (s: BatchSettings, w: Waker, exec?: Executor): Promise<Ticked> => {
    const ticked = w.ticking();
    let r: Ticked | undefined;
    try {
      return r = await k.prepare(s, exec);
    } finally {
      ticked(r?.tick ?? null, r?.busy ?? true);
    }
  };
  // Whether a woken run's tick goes with its batch's BEGIN (see wokeRun): the driver can, and the last such tick wrote one.
  const pipelines = leadOf(ctx.driver) !== undefined;
  let leadWrote = true;
  const leads = { on: () => pipelines && leadWrote, heard: (id: string | null) => void (leadWrote = id !== null) };
  // A woken run (work()): no maintenance, and no tick when this worker just
  // wrote one; a kind whose batches read planned work (Tier A) still plans
  // a tick it heard from another session. A kind whose batch reads up to
  // the newest tick ends on a batch that is not full: what commits later
  // notifies again. Its batches chain as a full run's do.
  // A Tier A or Tier B run ends on a batch that took the last free work
  // (drained) and started every event it received. For Tier B, unless a
  // tick came while it held its slots: a worker woken for that tick passed
  // over the held slots, so this one looks again once its COMMIT answered
  // (the tick's notification, heard before that, moved the herd's epoch;
  // heard after, it wakes a worker that finds them free). Tier A needs no
  // such look: a drained batch holds no chunk with events left (a chunk
  // read in part is not drained), a newer chunk of a held bucket is still
  // claimed when nothing else is free (claim_chunk), and a key held across
  // windows defers its event by deferDelay, past any look right after the
  // COMMIT; at 400 events/s the look found nothing in 43 % of a 4-worker
  // consumer's batches.
  //
  // Where the driver writes statements ahead of a transaction's BEGIN
  // (Driver.transactionAfter), the tick such a run needs (after producers'
  // commits; Tier A also plans another session's tick) goes with its first
  // batch's BEGIN and receive: the server commits it before the batch
  // reads, and the wake-up saves a round trip. A lead tick that wrote
  // nothing (the policy's lag, another session's tick) sends the next
  // wake-up's tick alone, as without the capability, until one writes.
  const wokeRun = async (s: BatchSettings, w: Waker, woke: Exclude<Woke, false>): Promise<RunReport> => {
    const started = Date.now();
    const report = emptyReport();
    let epoch = 0;
    let lead: ((exec: Executor) => Promise<unknown>) | undefined;
    const ticks = woke === "sent" || (woke === "tick" && k.plansTicks === true);
    if (ticks && leads.on()) {
      report.statements = report.roundTrips = 1;
      lead = (exec) => {
        const p = tick(s, w, exec);
        return p.then((t) => {
          report.ticked = t.tick !== null;
          if (t.tick !== null) epoch++; // this batch's own tick moved the herd's epoch after the batch noted it
          leads.heard(t.tick);
        }, () => leads.heard(null));
      };
    } else if (ticks) {
      report.ticked = (await tick(s, w)).tick !== null;
      report.statements = report.roundTrips = 1;
    }
    let drained = false;
    let got = 0;
    let tookLast = false;
    const s2: BatchSettings = k.readsAll ? s : {
      ...s,
      received: (d, n) => {
        drained = d;
        got = n;
        s.received?.(d, n);
      },
    };
    const ends = k.readsAll ? (b: BatchReport) => short(b, s) : (b: BatchReport) => (tookLast = drained && b.events + b.dropped + b.deferred >= got);
    for (;;) {
      const chain = chainOf(ctx.driver);
      const batch = (until: number, link?: LoopLink) => {
        epoch = w.epoch();
        drained = false;
        got = 0;
        const first = lead;
        lead = undefined;
        return once(s2, until, false, link && chain && { ...link, chain }, first);
      };
      tookLast = false;
      await consume(s2, started, report, batch, ends, chain);
      if (!tookLast || k.plansTicks || w.epoch() === epoch) return report;
      w.running(); // this look reads the ticks heard so far (a tick that came while the batch held every slot waits for it)
    }
  };
  const info = { queue, consumer: name, kind: k.kind };
  const once = (s: BatchSettings, until?: number, bounded?: boolean, link?: BatchLink, lead?: (exec: Executor) => Promise<unknown>) =>
    observeBatch(obs, info, s, (s2) => runBatch(ctx, s2, k, until, bounded, link, lead));
  return {
    queue,
    name,
    subscribe: sub,
    async seek(to, options) {
      const t = target("to", to, "seek");
      const o = parse(seekSchema, options ?? {}, "seek options");
      return await engine(ctx.driver, ctx.schema).seek({ queue, consumer: name, target: t, slot: o.slot ?? null });
    },
    async unsubscribe() {
      const r = await engine(ctx.driver, ctx.schema).unsubscribe({ queue, consumer: name });
      subscribed = false;
      return r.removed;
    },
    batch: async (options) => await once(consumeSettings(ctx, k, options, "batch options")),
    run: async (options) => await run(consumeSettings(ctx, k, options, "run options"), true),
    async work(options) {
      const { wakeups, rest } = splitWakeups(options);
      const settings = consumeSettings(ctx, k, rest, "work options");
      const who = { queue, consumer: name };
      obs.emit({ type: "work.started", ...who, kind: k.kind });
      const mode = (m: "listen" | "poll", reason: string) => obs.emit({ type: "work.mode", ...who, mode: m, reason });
      let w: Waker;
      if (wakeups) w = waker(ctx.driver, ctx.schema, queue, name, mode);
      else {
        mode("poll", "wakeups: false");
        w = pollWaker();
      }
      // A batch that received events lets one more idle worker of this consumer look (not for one cursor: it would wait for
      // it), unless it took the last free work (Tier A's drained). The woken run still looks once more after its COMMIT:
      // work that came meanwhile behind what it held (a chunk of the same bucket, its slot) is free only then, and the
      // worker that found it held has stopped. A Tier B batch over every slot holds them from its start and, once it
      // read every free slot to its end, until it ends (receive_ordered_rows locks each slot it visits): meanwhile commits and
      // ticks wake no other worker of the consumer (herd.ts cover, coverWhile below).
      const s: BatchSettings = k.readsAll ? settings : {
        ...settings,
        received: (drained) => drained || w.more(),
        ...(k.kind === "ordered" && settings.worker === undefined ? { hold: () => coverWhile(w) } : {}),
      };
      try {
        const report = await workLoop(s, () => run(s, false, w), {
          waker: w,
          woken: () => obs.emit({ type: "work.woken", ...who }),
          tick: async () => {
            const t = await tick(s, w);
            if (t.tick !== null) leads.heard(t.tick); // a tick alone wrote one: the next goes with a batch again
            return t;
          },
          leads: leads.on,
          woke: (woke) => wokeRun(s, w, woke),
          retry: (r) => obs.emit({ type: "work.retry", ...who, ...r }),
        });
        obs.emit({ type: "work.stopped", ...who, report });
        return report;
      } finally {
        await w.close();
      }
    },
  };
}

/**
 * A Tier B batch's hold on its consumer's work (herd.ts Member.cover), from
 * its start: receive_ordered_rows locks every slot it visits, so while its receive
 * is in flight and, once it read every free slot to its end (drained), until
 * it ends, another worker's look would find them held.
 */
function coverWhile(w: Waker): (drained?: boolean) => void {
  const release = w.cover();
  return (drained) => {
    if (drained === false) release(true); // it holds only the slots it filled up from: others may look now
    else if (drained === undefined) release();
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
      return await engine(ctx.driver, ctx.schema).slotOf({ queue: c.queue, consumer: c.name, key, slotCount: slots });
    },
    blockedKeys: () => engine(ctx.driver, ctx.schema).blockedKeys({ queue: c.queue, consumer: c.name }),
  });
}
