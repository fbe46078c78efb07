/**
 * One batch = one transaction: receive (claim + fetch + key locks in one
 * statement), run the handler (no savepoints until a handler fails: then the
 * batch runs again with per-event savepoints, see savepoint.ts), record
 * failures and deferrals, commit. The runner is shared; what differs between consumer
 * kinds (how a batch is read, which events are contended, how outcomes are
 * recorded) is the kind's own `BatchKind` strategy (kinds.ts).
 *
 * @module
 */

import type { BatchSettings } from "./settings.ts";
import type { Driver, Executor } from "../driver.ts";
import type { AckOutcome, AckReply, EventRef, LocalTimeouts, Received, WireEvent } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { classify } from "../faults.ts";
import { batchScope, type BatchRun, failures, type Failures, type Handled, handleAll, handleEach, readyEvents } from "./handler.ts";
import { type BatchLife, batchLife } from "./life.ts";
import type { PayloadSchema } from "../payload.ts";
import { counting } from "./report.ts";
import { isRerun } from "./savepoint.ts";
import { mapError } from "../engine/reply.ts";
import type { BatchReport } from "../types.ts";

/** What a consumer needs from its client. */
export interface ConsumerContext {
  readonly driver: Driver;
  readonly schema: string;
  /** The queue the consumer reads. */
  readonly queue: string;
  readonly payloadSchema: PayloadSchema | undefined;
  /** Advances the queue's ticker in its own transaction; true when it ticked. */
  tick(queue: string): Promise<boolean>;
  /** Runs due maintenance of the queue (skips when another caller is on it). */
  maintain(queue: string): Promise<unknown>;
}

/** A received batch as its kind sorts it. */
export interface Sorted {
  /** Events to handle, in order. */
  live: WireEvent[];
  /** The slot handlers see on each event (Tier B); undefined for the other kinds. */
  slot: number | undefined;
  /** Contended events offered again later, without spending a retry. */
  deferred: EventRef[];
  /** Contended events acked without a handler call (idempotent handlers). */
  dropped: number;
  /** True when a failed event holds back the later events of its key (Tier B pause). */
  holdFailedKeys: boolean;
}

/** What a batch hands its kind to record (the kind adds its own policy). */
export type Outcome = Pick<AckOutcome, "retried" | "failed" | "deferred" | "held" | "released">;

/** Extra work a fenced batch does around its handlers. */
export interface BatchHooks {
  /**
   * After the receive, inside the batch: may mark events contended or end
   * the batch as busy (return false); runs before any handler.
   */
  afterReceive?(received: Received, tx: Executor, life: BatchLife): Promise<boolean>;
  /** Inside the batch, after the handlers and the ack, before COMMIT. */
  beforeCommit?(tx: Executor): Promise<void>;
  /** Statements the hooks sent on other connections (their `tx` ones are counted for them). */
  statements?(): number;
}

/** The steps of a batch that one consumer kind owns. */
export interface BatchKind {
  /**
   * Claims and reads one batch in `tx` (one statement that also sets
   * `local`); `until` is the run's budget (epoch ms), for a kind that waits.
   * On a rerun `again` is what the rolled-back attempt read: the kind reads
   * the same place first (Tier B: the same slot), so the rerun meets the
   * failed event again.
   */
  receive(tx: Executor, s: BatchSettings, local: LocalTimeouts, until: number, again?: Received): Promise<Received>;
  /** Splits a received batch into events to handle and contended ones. */
  sort(received: Received): Sorted;
  /** Records failures, retries, deferrals, held and released events in `tx`. */
  record(tx: Executor, received: Received, outcome: Outcome): Promise<AckReply>;
  /** Hooks for one batch (fenced consumers); `{}` for none. */
  hooks(): BatchHooks;
}

/**
 * What handling a received batch did; `statements` so far counts savepoints
 * and the ack (BEGIN, receive, COMMIT and counted statements come on top).
 */
type Done = Omit<BatchReport, "busy" | "roundTrips">;

/** Records what the batch did, when there is anything to record. */
async function record(kind: BatchKind, tx: Executor, received: Received, sorted: Sorted, log: Failures, h: Handled, statements: number): Promise<Done> {
  const { deferred } = sorted;
  const keep = new Set([...log.failed.keys(), ...[...deferred, ...h.held, ...h.released].map((r) => r.id)]);
  const retried = received.events.filter((w) => w.redelivered && !keep.has(w.id)).map((w) => w.id);
  const done: Done = { events: h.handled, retried: 0, deadLettered: 0, dropped: sorted.dropped, deferred: 0, statements };
  if (log.failed.size === 0 && retried.length === 0 && deferred.length === 0 && h.held.length === 0 && h.released.length === 0) {
    return done;
  }
  const r = await kind.record(tx, received, { retried, failed: [...log.failed.values()], deferred, held: h.held, released: h.released });
  return { ...done, ...r, statements: done.statements + 1 };
}

/**
 * Runs the handler over a received batch inside `tx` and records failures
 * (retry or dead letter), deferrals and events it did not start (released:
 * they come again, in order) in the same transaction. Once the batch is
 * dead it throws BATCH_ABORTED.
 */
async function handleEvents(ctx: ConsumerContext, s: BatchSettings, kind: BatchKind, received: Received, tx: Executor, br: BatchRun): Promise<Done> {
  const sorted = kind.sort(received);
  const log = failures(s);
  const ready = await readyEvents(ctx.payloadSchema, ctx.queue, sorted.live, sorted.slot, log);
  const scope = batchScope(tx, br);
  const h = s.handler ? await handleEach(s, br, scope, ready, sorted.holdFailedKeys, log) : await handleAll(s, br, tx, ready, log);
  if (br.life.dead()) throw br.life.error();
  return await record(kind, tx, received, sorted, log, h, scope.statements());
}

/** The body of the batch's transaction: receive, hooks, handlers, record. */
async function inTransaction(
  ctx: ConsumerContext,
  s: BatchSettings,
  kind: BatchKind,
  hooks: BatchHooks,
  raw: Executor,
  br: BatchRun,
  local: LocalTimeouts,
): Promise<BatchReport> {
  const { life } = br;
  const lost = () => life.abort("connection", raw.signal?.reason);
  if (raw.signal?.aborted) lost();
  else raw.signal?.addEventListener("abort", lost, { once: true });
  const tx = life.guard(raw);
  const hooked = counting(tx, br.counted);
  const inner = (async (): Promise<BatchReport> => {
    const received = await kind.receive(tx, s, local, br.until, br.received);
    br.received = received;
    if (hooks.afterReceive && !(await hooks.afterReceive(received, hooked, life))) {
      throw BUSY; // rolled back: another worker's fenced batch still owns it
    }
    // A retried event is likely to fail again: such a batch takes savepoints from the start.
    if (received.events.some((w) => w.redelivered)) br.known ??= new Map();
    const out = await handleEvents(ctx, s, kind, received, tx, br);
    if (life.dead()) throw life.error();
    await hooks.beforeCommit?.(hooked);
    // BEGIN, receive, COMMIT, plus the handlers' and hooks' own statements.
    const statements = out.statements + 3 + br.counted.n + (hooks.statements?.() ?? 0);
    return { ...out, busy: received.busy, statements, roundTrips: statements };
  })();
  inner.catch(() => {}); // observed by the race; may settle after it
  try {
    const report = await life.race(inner);
    // The driver sends COMMIT next. It cannot be recalled, so its answer is
    // waited for up to MARGIN_MS past the deadline (the server's statement
    // timeout is its backstop): a batch that commits late is reported as
    // committed, not as rolled back; one that does not answer, as unknown.
    life.seal(MARGIN_MS);
    return report;
  } finally {
    raw.signal?.removeEventListener("abort", lost);
  }
}

/** Margin past the deadline for the server-side backstops and for a COMMIT in flight. */
const MARGIN_MS = 2_000;

/**
 * One batch in one transaction. The receive statement also sets the batch's
 * local timeouts from its deadline (the server's idle and statement timeouts
 * stay backstops that fire only after keyq's deadline). Statements: BEGIN,
 * receive, [ack], COMMIT, and the handlers' and hooks' own; a batch whose
 * handler failed, or that holds a retried event, adds the savepoints of its
 * events that use the database (and a failed fast attempt's BEGIN, receive,
 * ROLLBACK and its handlers' statements).
 * No event starts after `until` (epoch ms).
 */
export async function runBatch(ctx: ConsumerContext, s: BatchSettings, kind: BatchKind, until?: number): Promise<BatchReport> {
  const driver = ctx.driver;
  if (!driver.transaction) {
    throw new KeyqError(
      "TRANSACTIONS_UNSUPPORTED",
      `The ${driver.name} driver has no interactive transactions, so it cannot consume; use a Pool or Client driver (for Neon: fromNeonPool).`,
    );
  }
  const backstop = s.batchTimeoutMs + MARGIN_MS;
  const local: LocalTimeouts = {
    statement: `${Math.ceil(Math.min(s.statementTimeoutMs, backstop))}ms`,
    idleInTransaction: `${Math.ceil(Math.max(s.idleTimeoutMs, backstop))}ms`,
  };
  const life = batchLife(s.batchTimeoutMs, s.signal);
  const br: BatchRun = { life, until: until ?? Number.POSITIVE_INFINITY, inflight: Promise.resolve(), counted: { n: 0 } };
  const hooks = kind.hooks();
  const transaction = driver.transaction.bind(driver);
  const attempt = (): Promise<BatchReport> => {
    const work = transaction((raw) => inTransaction(ctx, s, kind, hooks, raw, br, local));
    // A driver may end the transaction early (postgres.js rejects begin() when
    // its connection closes) while a handler still runs; and a hung ROLLBACK
    // must not hold run() past the deadline.
    work.catch(() => {}); // it may settle after we gave up on it
    return life.race(work);
  };
  try {
    return await attempt().catch((err) => {
      if (!isRerun(err)) throw err;
      // A handler failed on the fast path: the same batch again, with savepoints
      // (same life and deadline), the failed event's outcome carried over.
      br.known = new Map([[err.id, err.outcome]]);
      // br.counted already holds the fast attempt's handler and hook statements; + BEGIN, receive, ROLLBACK.
      return attempt().then((r) => ({ ...r, statements: r.statements + 3, roundTrips: r.statements + 3 }));
    });
  } catch (err) {
    if (err === BUSY) {
      const statements = 3 + br.counted.n + (hooks.statements?.() ?? 0); // BEGIN, receive, the hooks', ROLLBACK
      return { events: 0, retried: 0, deadLettered: 0, dropped: 0, deferred: 0, statements, roundTrips: statements, busy: true };
    }
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

/**
 * Thrown inside a batch's transaction when the batch cannot proceed because
 * another worker holds what it needs: the transaction rolls back and the
 * batch reports `busy`.
 */
export const BUSY: unique symbol = Symbol("busy");
