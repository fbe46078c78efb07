/**
 * The three consumer kinds as strategies: each owns how it checks options,
 * prepares a run, receives a batch, sorts contended events and records
 * outcomes. The batch runner (batch.ts) and the consumer surface
 * (consumer.ts) are the same for all three.
 *
 * @module
 */

import type { BatchSettings } from "../batch/settings.ts";
import { type BatchKind, BUSY, type ConsumerContext, type Outcome, type Sorted, type Ticked } from "../batch/batch.ts";
import type { Executor } from "../driver.ts";
import { type AckReply, type Commit, engine, type Received } from "../engine/calls.ts";
import type { PrepareReply } from "../engine/declarations.ts";
import { KeyqError } from "../errors.ts";
import { fenceHooks } from "./fence.ts";
import { fromPlain } from "../engine/wire.ts";
import { buildConcurrently } from "./slot-index.ts";

/** One kind of consumer: what it persists, and its own steps of a run and a batch. */
export interface ConsumerKind extends BatchKind {
  readonly kind: "plain" | "exclusive" | "ordered";
  /** The slot count N (1 for the kinds without slots). */
  readonly slots: number;
  /** Default `maxEvents` of this kind (100 when absent). */
  readonly maxEvents?: number;
  /** Engine-side settings persisted with the consumer (retry overrides…). */
  readonly settings: Record<string, unknown>;
  /** Refuses settings this kind cannot use, before anything is written. */
  check(s: BatchSettings): void;
  /** Ticks (and plans): the id of the tick it wrote (or null), busy when another session held the ticker. */
  prepare(s: BatchSettings, exec?: Executor): Promise<Ticked>;
  /** True when a tick is read only once planned (`prepare`): a worker that heard another session's tick prepares before it reads. */
  readonly plansTicks?: boolean;
  /** True when a batch that is not full read everything up to the newest tick (one cursor, one window at a time). */
  readonly readsAll?: boolean;
  /**
   * A run's start in one statement (start_run): subscribes first when
   * `subscribe`, ticks (and plans), maintains. {@link SUBSCRIBE} when the
   * engine asks for a slot index built outside a transaction first: the
   * caller subscribes by itself, then starts again.
   */
  start(s: BatchSettings, subscribe: boolean): Promise<Started | typeof SUBSCRIBE>;
}

/** What a run's start did: whether it wrote a tick (its id; busy when another session held the ticker), and the statements it sent. */
export interface Started {
  ticked: boolean;
  tick: string | null;
  busy: boolean;
  statements: number;
}

/** start_run's answer when subscribe needs index work outside a transaction first. */
export const SUBSCRIBE = "subscribe" as const;

/** True when a prepare (and its retry after an index build) wrote no tick because another session held the ticker. */
const busyTick = (r: PrepareReply, g: { tick: string | null }): boolean => r.tick === null && g.tick === null && r.busy === true;

/**
 * A run's start commits without waiting for the WAL flush (engine Commit),
 * except when it subscribes: a subscription must outlive a crash even when
 * no batch commits after it.
 */
const commitOf = (subscribe: boolean): Commit | undefined => (subscribe ? undefined : "async");

/** The start_run call of `t` for a kind without bucket growth (plain, ordered). */
function startRun(t: KindTarget, kind: "plain" | "ordered", slots: number): ConsumerKind["start"] {
  return async (s, subscribe) => {
    const r = await engine(t.ctx.driver, t.ctx.schema).startRun({
      queue: t.queue,
      consumer: t.name,
      kind,
      slots,
      settings: t.settings,
      subscribe,
      chunkSize: s.maxEvents,
      growFrom: null,
      indexInline: false,
    }, commitOf(subscribe));
    if (r.subscribe?.build || r.subscribe?.wait) return SUBSCRIBE;
    return { ticked: r.tick !== null, tick: r.tick, busy: r.busy === true, statements: 1 };
  };
}

/** The consumer a kind serves. */
export interface KindTarget {
  readonly ctx: ConsumerContext;
  readonly queue: string;
  readonly name: string;
  /** Engine-side settings persisted with the consumer. */
  readonly settings: Record<string, unknown>;
}

/** Static assignment (`worker`/`workers`) is a Tier B option; elsewhere it would be silently ignored. */
function noWorkers(s: BatchSettings, kind: string): void {
  if (s.worker !== undefined) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Options "worker" and "workers" assign the slots of an ordered consumer; a ${kind} consumer has none, so remove them.`,
      {
        field: "worker",
      },
    );
  }
}

/** Every event is handled; nothing is contended. */
const handleAll = (received: Received, slot?: number, holdFailedKeys = false): Sorted => ({
  live: received.events,
  slot,
  deferred: [],
  dropped: 0,
  holdFailedKeys,
});

/** Records a batch's outcome with the kind's policy (`ack`). */
function ack(
  t: KindTarget,
  policy: { slot: (r: Received) => number | null; deferDelay: number; pause: boolean },
): (tx: Executor, r: Received, o: Outcome) => Promise<AckReply> {
  return (tx, r, o) =>
    engine(tx, t.ctx.schema).ack({
      queue: t.queue,
      consumer: t.name,
      slot: policy.slot(r),
      outcome: {
        retried: o.retried,
        failed: o.failed,
        deferred: o.deferred,
        deferDelay: policy.deferDelay,
        pause: policy.pause,
        held: o.held,
        released: o.released,
      },
    });
}

/**
 * How long a plain batch waits for a cursor another worker holds: its commit
 * hands the cursor over, so extra workers queue behind the holder instead of
 * polling (and the next batch starts the moment the last one commits).
 */
const PLAIN_WAIT_MS = 2_000;

/**
 * Measured on a 100k backlog (no-op handler, postgres.js): 1,000 events a
 * batch reads about twice as fast as 100, the fixed statements of a batch
 * spread over ten times the events.
 */
const PLAIN_MAX_EVENTS = 1_000;

/** The wait for a held cursor counts against the statement timeout, the batch's and the run's budget. */
function plainWait(s: BatchSettings, until: number): number {
  const left = until - Date.now();
  return Math.floor(Math.max(0, Math.min(PLAIN_WAIT_MS, s.statementTimeoutMs / 2, s.batchTimeoutMs / 2, left)));
}

/**
 * The plain kind: one cursor, one batch at a time, in order. A second
 * worker waits for the holder's commit (up to PLAIN_WAIT_MS), then reads on.
 * Batches come in the compact wire form (wire.ts).
 */
export function plainKind(t: KindTarget): ConsumerKind {
  const { ctx, queue, name } = t;
  return {
    kind: "plain",
    slots: 1,
    readsAll: true,
    maxEvents: PLAIN_MAX_EVENTS,
    settings: t.settings,
    check: (s) => noWorkers(s, "plain"),
    prepare: (_s, exec) => ctx.tick(queue, exec),
    start: startRun(t, "plain", 1),
    async receive(tx, s, local, until) {
      const input = { queue, consumer: name, maxEvents: s.maxEvents, waitMs: plainWait(s, until) };
      try {
        return fromPlain(await engine(tx, ctx.schema).receivePlain(input, local));
      } catch (err) {
        // The wait for the cursor ran out (lock_timeout): the holder is still at it.
        if (input.waitMs > 0 && (err as { code?: unknown } | null)?.code === "55P03") return BUSY;
        throw err;
      }
    },
    sort: (r) => handleAll(r),
    record: ack(t, { slot: () => 0, deferDelay: 1, pause: false }),
    hooks: () => ({}),
  };
}

/** Options of the exclusive kind, checked by the client. */
export interface ExclusiveSettings {
  /** Contended events are acked and dropped instead of deferred. */
  idempotent: boolean;
  /** Seconds a deferred event waits. */
  deferDelayS: number;
  /** Lease the batch's keys past its session (see fence.ts). */
  fenced: boolean;
}

/**
 * Tier A: any worker takes any chunk of any window, at most `perKey` workers
 * (persisted with the consumer, one by default) hold a key at a time, in
 * the consumer's own lock scope or a shared `lockScope`; the engine reads
 * both from the consumer row. Contended keys are dropped (`idempotent`) or deferred
 * without spending a retry; keys another fenced batch still leases are
 * always deferred.
 */
export function exclusiveKind(t: KindTarget, o: ExclusiveSettings): ConsumerKind {
  const { ctx, queue, name } = t;
  const growth = bucketGrowth(t);
  return {
    kind: "exclusive",
    slots: 1,
    plansTicks: true,
    settings: t.settings,
    check: (s) => noWorkers(s, "exclusive"),
    prepare: (s, exec) => growth.prepare(s.maxEvents, exec),
    start: (s, subscribe) => growth.start(s.maxEvents, subscribe),
    async receive(tx, s, local) {
      const r = await engine(tx, ctx.schema).receiveExclusive({ queue, consumer: name, maxEvents: s.maxEvents }, local);
      if (typeof r.starved === "number") growth.starved(r.starved);
      return r;
    },
    sort(r) {
      const contended = r.events.filter((w) => w.locked === false);
      const deferred = contended.filter((w) => !o.idempotent || w.fenced).map((w) => ({ id: w.id, txid: w.txid }));
      return {
        live: r.events.filter((w) => w.locked !== false),
        slot: undefined,
        deferred,
        dropped: o.idempotent ? contended.length - deferred.length : 0,
        holdFailedKeys: false,
      };
    },
    record: ack(t, { slot: () => 0, deferDelay: o.deferDelayS, pause: false }),
    hooks: () => (o.fenced ? fenceHooks(ctx, queue, name, "keys") : {}),
  };
}

/**
 * A Tier A worker's part in growing its consumer's key buckets
 * (09_growth.sql): a batch that starved (nothing free while other batches
 * held every bucket) is remembered, and the next prepare asks the engine to
 * double the count it saw. When the slot index for the new count must be
 * built concurrently, the client builds it here, outside any transaction
 * (never in a batch), and prepares again; until it is valid the count stays.
 */
function bucketGrowth(t: KindTarget): {
  prepare(chunkSize: number, exec?: Executor): Promise<Ticked>;
  start(chunkSize: number, subscribe: boolean): Promise<Started | typeof SUBSCRIBE>;
  starved(count: number): void;
} {
  const { ctx, queue, name } = t;
  let growFrom: number | null = null;
  let inline = false;
  const call = (chunkSize: number, exec: Executor = ctx.driver) =>
    engine(exec, ctx.schema).prepareExclusive({ queue, consumer: name, chunkSize, growFrom, indexInline: inline }, "async");
  /** After a reply that asks for a slot index built concurrently: builds it, then prepares again (true when that ticked). */
  const grown = async (r: PrepareReply, chunkSize: number): Promise<{ tick: string | null; statements: number }> => {
    let tick: string | null = null;
    let statements = 0;
    if (growFrom !== null && r.build && r.build.length > 0) {
      inline = !(await buildConcurrently(ctx, r.build));
      r = await call(chunkSize);
      tick = r.tick;
      statements = 1;
    }
    // Grown, or nothing to grow; else ("wait", or a build to retry) the next prepare asks again.
    if (!r.build && !r.wait) growFrom = null;
    return { tick, statements };
  };
  return {
    starved(count) {
      growFrom = count;
    },
    async prepare(chunkSize, exec) {
      const r = await call(chunkSize, exec); // a retry after an index build goes on the pool
      const g = await grown(r, chunkSize);
      return { tick: r.tick ?? g.tick, busy: busyTick(r, g) };
    },
    async start(chunkSize, subscribe) {
      const r = await engine(ctx.driver, ctx.schema).startRun({
        queue,
        consumer: name,
        kind: "exclusive",
        slots: 1,
        settings: t.settings,
        subscribe,
        chunkSize,
        growFrom,
        indexInline: inline,
      }, commitOf(subscribe));
      if (r.subscribe?.build || r.subscribe?.wait) return SUBSCRIBE;
      const g = await grown(r, chunkSize);
      return {
        ticked: r.tick !== null || g.tick !== null,
        tick: g.tick ?? r.tick,
        busy: busyTick(r, g),
        statements: 1 + g.statements,
      };
    },
  };
}

/** Options of a Tier B kind, checked by the client. */
export interface OrderedSettings {
  slots: number;
  pause: boolean;
  /** Seconds after which a static worker helps on a slot nobody polled. */
  helpAfterS: number;
  /** Lease the slot past the batch's session (see fence.ts). */
  fenced: boolean;
}

/** The ordered kind's refusals: the pause policy needs per-event handlers; a worker must read some slot. */
function checkOrdered(o: OrderedSettings, s: BatchSettings): void {
  if (o.pause && s.handleBatch) {
    throw new KeyqError(
      "INVALID_INPUT",
      'The pause policy needs a per-event "handler" (events after a failed head are held back); use handler instead of handleBatch.',
      {
        field: "handleBatch",
      },
    );
  }
  if (s.worker !== undefined && s.worker >= o.slots) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Worker ${s.worker} of ${s.workers} would read no slot: the consumer has ${o.slots} slots (worker k reads slots k, k + workers, …); ` +
        `run at most ${o.slots} workers, or create the consumer with more slots.`,
      { field: "worker", value: s.worker },
    );
  }
}

/**
 * The slots a worker tries, in order: all of them from a turning start, or
 * with `worker`/`workers` its own (worker, worker + workers, …) plus help on
 * any slot not polled for `helpAfter`.
 */
function slotOrder(o: OrderedSettings): (s: BatchSettings) => { slots: number[]; helpAfter: number | null } {
  let turn = Math.floor(Math.random() * o.slots);
  return (s) => {
    turn++;
    if (s.worker === undefined) {
      return { slots: Array.from({ length: o.slots }, (_, i) => (turn + i) % o.slots), helpAfter: null };
    }
    const mine: number[] = [];
    for (let k = s.worker; k < o.slots; k += s.workers!) mine.push(k);
    const start = turn % Math.max(mine.length, 1);
    return { slots: [...mine.slice(start), ...mine.slice(0, start)], helpAfter: o.helpAfterS };
  };
}

/**
 * A Tier B batch reads its first slot with events and, while it has room,
 * the next ones (a fenced batch reads one): as for the plain kind, 1,000
 * events a batch spread the batch's fixed statements over ten times the
 * events of 100 (4 workers over 8 slots, no-op: bench row "ordered-plain").
 */
const ORDERED_MAX_EVENTS = 1_000;

/**
 * Tier B: slot k of N is read by one worker at a time, in order; events
 * carry the slot that delivered them. No leader, no rebalance.
 */
export function orderedKind(t: KindTarget, o: OrderedSettings): ConsumerKind {
  const { ctx, queue, name } = t;
  const order = slotOrder(o);
  return {
    kind: "ordered",
    slots: o.slots,
    maxEvents: ORDERED_MAX_EVENTS,
    settings: t.settings,
    check: (s) => checkOrdered(o, s),
    prepare: (_s, exec) => ctx.tick(queue, exec),
    start: startRun(t, "ordered", o.slots),
    receive(tx, s, local) {
      const { slots, helpAfter } = order(s);
      // A fenced batch leases one slot (fence.ts), so it reads one.
      const input = { queue, consumer: name, slots, maxEvents: s.maxEvents, helpAfter, slotCount: o.slots, multiSlot: !o.fenced };
      return engine(tx, ctx.schema).receiveOrderedWire(input, local).then(fromPlain);
    },
    sort: (r) => handleAll(r, r.slot ?? 0, o.pause),
    record: ack(t, { slot: (r) => (r.slots ? null : r.slot ?? 0), deferDelay: 1, pause: o.pause }),
    hooks: () => (o.fenced ? fenceHooks(ctx, queue, name, "slot") : {}),
  };
}
