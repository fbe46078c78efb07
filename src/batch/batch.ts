/**
 * One batch = one transaction, one attempt: receive (claim + fetch + key
 * locks in one statement), run the handlers (one call per event, each in its
 * own lazily opened savepoint, see savepoint.ts), record failures and
 * deferrals, commit. Its phases and their transitions are machine.ts's. The
 * runner is shared; what differs between consumer kinds (how a batch is
 * read, which events are contended, how outcomes are recorded) is the
 * kind's own `BatchKind` strategy (kinds.ts).
 *
 * @module
 */

import type { BatchSettings } from "./settings.ts";
import { type Driver, type Executor, leadOf, transactional, type TxChain } from "../driver.ts";
import type { AckOutcome, AckReply, EventRef, LocalTimeouts, Received, WireEvent } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { classify } from "../faults.ts";
import { type BatchRun, type Failures, failures, handleAll, type Handled, handleEach, readyEvents } from "./handler.ts";
import { type BatchLife, batchLife } from "./life.ts";
import { BUDGET_GRACE_MS, deadline, move, type Phase, type Step } from "./machine.ts";
import type { PayloadSchema } from "../payload.ts";
import { counting } from "./report.ts";
import { eventScope } from "./savepoint.ts";
import { mapError } from "../engine/reply.ts";
import type { BatchLimits, BatchReport } from "../types.ts";

import type { Ticked } from "../engine/declarations.ts";
export type { Ticked };

/** What a consumer needs from its client. */
export interface ConsumerContext {
  readonly driver: Driver;
  readonly schema: string;
  /** The queue the consumer reads. */
  readonly queue: string;
  readonly payloadSchema: PayloadSchema | undefined;
  /** Advances the queue's ticker in its own transaction: the new tick's id (null when it wrote none), busy when another session was writing one. */
  tick(queue: string, exec?: Executor): Promise<Ticked>;
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
   * {@link BUSY} when another worker holds what it needs: the batch rolls
   * back and reports `busy`.
   */
  receive(tx: Executor, s: BatchSettings, local: LocalTimeouts, until: number): Promise<Received | typeof BUSY>;
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
type Done = Omit<BatchReport, "busy" | "roundTrips" | "limits">;

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
 * Returned by a kind's receive when another worker holds what the batch
 * needs: the batch's transaction rolls back and it reports `busy`.
 */
export const BUSY = "busy" as const;

/**
 * A batch of a run whose batches share one connection (Driver.chain): its
 * COMMIT is held and travels with the next batch's BEGIN and receive.
 */
export interface BatchLink {
  /** The run's chain of transactions. */
  readonly chain: TxChain;
  /** The previous batch, committing: awaited after the receive (same round trip), before any handler. */
  readonly previous?: Promise<unknown>;
  /** Called with this batch's report once its COMMIT is held (the report holds once it answers). */
  held(report: BatchReport): void;
}

/** Everything one batch's attempt works with. */
interface Attempt {
  ctx: ConsumerContext;
  s: BatchSettings;
  kind: BatchKind;
  hooks: BatchHooks;
  br: BatchRun;
  local: LocalTimeouts;
  /** The previous batch of a chained run, committing (BatchLink). */
  previous?: Promise<unknown>;
  /** Moves the batch's phase (machine.ts); a move that does not apply is a bug. */
  step(step: Step): void;
}

/** How an attempt's transaction body ended: the report to commit, or busy (to roll back). */
type Ended = { busy: false; report: BatchReport } | { busy: true };

/**
 * Thrown only to make the driver roll a busy attempt back (the driver's
 * contract: `transaction(fn)` rolls back when `fn` throws); runBatch turns
 * it back into the busy result at once.
 */
class RollBack extends Error {
  constructor() {
    super("keyq: the batch is busy and rolls back");
    this.name = "RollBack";
  }
}

/**
 * Runs the handlers over a received batch inside `tx` and records failures
 * (retry or dead letter), deferrals and events it did not start (released:
 * they come again, in order) in the same transaction.
 */
async function handleEvents(a: Attempt, received: Received, tx: Executor): Promise<Done> {
  const { s, kind, br, ctx } = a;
  const sorted = kind.sort(received);
  const log = failures(s);
  const ready = await readyEvents(ctx.payloadSchema, ctx.queue, sorted.live, sorted.slot, log);
  const scope = eventScope(tx);
  const h = s.handler ? await handleEach(s, br, scope, ready, sorted.holdFailedKeys, log) : await handleAll(s, br, tx, ready, log);
  if (br.life.dead()) throw br.life.error();
  a.step({ on: "handled" });
  const done = await record(kind, tx, received, sorted, log, h, scope.statements());
  a.step({ on: "recorded" });
  return done;
}

/** The body of the batch's transaction: receive, hooks, handlers, record. */
async function body(a: Attempt, tx: Executor): Promise<Ended> {
  const { life } = a.br;
  const hooked = counting(tx, a.br.counted);
  const received = await a.kind.receive(tx, a.s, a.local, a.br.until);
  // The previous batch's COMMIT answered with this receive: a failed one ends this batch too (rolled back, no handler ran).
  if (a.previous) await a.previous;
  // Another worker's fenced batch may still own what was read.
  const busy = received === BUSY || (a.hooks.afterReceive !== undefined && !(await a.hooks.afterReceive(received, hooked, life)));
  a.step({ on: "received", busy });
  if (received === BUSY || busy) return { busy: true };
  if (received.events.length > 0) {
    const drained = received.drained === true;
    a.br.held?.(drained);
    a.s.received?.(drained, received.events.length);
  }
  const out = await handleEvents(a, received, tx);
  if (life.dead()) throw life.error();
  await a.hooks.beforeCommit?.(hooked);
  // BEGIN, receive, COMMIT, plus the handlers' and hooks' own statements.
  const statements = out.statements + 3 + a.br.counted.n + (a.hooks.statements?.() ?? 0);
  return { busy: false, report: { ...out, busy: received.busy, statements, roundTrips: statements } };
}

/** One attempt in the driver's transaction, raced against the batch's death. */
async function inTransaction(a: Attempt, raw: Executor): Promise<Ended> {
  const { life } = a.br;
  const lost = () => life.abort("connection", raw.signal?.reason);
  if (raw.signal?.aborted) lost();
  else raw.signal?.addEventListener("abort", lost, { once: true });
  const inner = body(a, life.guard(raw));
  inner.catch(() => {}); // observed by the race; may settle after it
  try {
    const ended = await life.race(inner);
    if (ended.busy) throw new RollBack();
    // The driver sends COMMIT next. It cannot be recalled, so its answer is
    // waited for up to MARGIN_MS past the deadline (the server's statement
    // timeout is its backstop): a batch that commits late is reported as
    // committed, not as rolled back; one that does not answer, as unknown.
    life.seal(MARGIN_MS);
    return ended;
  } finally {
    raw.signal?.removeEventListener("abort", lost);
  }
}

/** Margin past the deadline for the server-side backstops and for a COMMIT in flight. */
const MARGIN_MS = 2_000;

/** The statement timeout a batch runs with: the user's, or the time to a budget's deadline plus the margin when that is shorter. */
function statementMs(s: BatchSettings, deadlineMs: number): number {
  return Math.ceil(Math.min(s.statementTimeoutMs, deadlineMs + MARGIN_MS));
}

/**
 * The batch's local timeouts: the statement timeout as statementMs (never
 * past the deadline plus the margin; settings.ts refuses one longer than
 * batchTimeout, so only a run's budget can bound it, and the report's
 * `limits` says so); the idle timeout the user's (settings.ts refuses one
 * shorter than batchTimeout), else just past the deadline.
 */
function localTimeouts(s: BatchSettings, deadlineMs: number): LocalTimeouts {
  return {
    statement: `${statementMs(s, deadlineMs)}ms`,
    idleInTransaction: `${Math.ceil(s.idleTimeoutMs > 0 ? s.idleTimeoutMs : deadlineMs + MARGIN_MS)}ms`,
  };
}

/** A batch that found what it needs held by another worker: rolled back, nothing done. */
function busyReport(a: Attempt): BatchReport {
  const statements = 3 + a.br.counted.n + (a.hooks.statements?.() ?? 0); // BEGIN, receive, the hooks', ROLLBACK
  return { events: 0, retried: 0, deadLettered: 0, dropped: 0, deferred: 0, statements, roundTrips: statements, busy: true };
}

/** The error a failed attempt rejects with (after the handler in flight settled, on a lost connection). */
async function failure(a: Attempt, err: unknown): Promise<unknown> {
  const { life } = a.br;
  if (!(err instanceof KeyqError) && classify(err) === "connection") life.abort("connection", err);
  if (life.reason() === "connection") {
    // Wait for the handler in flight (it got the signal), bounded by the deadline.
    await Promise.race([Promise.resolve(a.br.inflight).then(() => {}, () => {}), life.expired]);
    return life.error();
  }
  if (life.dead()) return life.error();
  return mapError(err, a.ctx.schema);
}

/** The batch's attempt with its phase tracked by machine.ts. */
function attempt(
  ctx: ConsumerContext,
  s: BatchSettings,
  kind: BatchKind,
  br: BatchRun,
  local: LocalTimeouts,
  previous: Promise<unknown> | undefined,
): Attempt & { phase(): Phase } {
  let phase: Phase = "receiving";
  return {
    previous,
    ctx,
    s,
    kind,
    hooks: kind.hooks(),
    br,
    local,
    step(step) {
      const m = move(phase, step);
      if (!m.ok) throw new Error(`keyq: batch state machine: ${m.reason}`);
      phase = m.phase;
    },
    phase: () => phase,
  };
}

/**
 * One batch in one transaction. The receive statement also sets the batch's
 * local timeouts from its deadline. Statements: BEGIN, receive, [ack],
 * COMMIT, and the handlers' and hooks' own, plus a savepoint for each event
 * whose handler used `tx`. No event starts after `until` (epoch ms); with
 * `bounded` (run()), the batch's deadline is no later than `until` plus
 * BUDGET_GRACE_MS (or batchTimeout, whichever is sooner). `lead` issues
 * statements that run before the batch's transaction, outside it (a woken
 * worker's tick): in the same network write as BEGIN and the receive where
 * the driver offers it (Driver.transactionAfter), else first and on their
 * own. Its failure is the caller's to observe, not the batch's.
 */
export async function runBatch(
  ctx: ConsumerContext,
  s: BatchSettings,
  kind: BatchKind,
  until?: number,
  bounded = false,
  link?: BatchLink,
  lead?: (exec: Executor) => Promise<unknown>,
): Promise<BatchReport> {
  const db = transactional(ctx.driver);
  let sealed: BatchReport | undefined;
  const after = lead && !link ? leadOf(db) : undefined;
  const transaction = link
    ? <T>(fn: (tx: Executor) => Promise<T>) => link.chain.transaction(fn, () => sealed && link.held(sealed))
    : after
    ? <T>(fn: (tx: Executor) => Promise<T>) => after(lead!, fn)
    : db.transaction.bind(db);
  // A lead the driver cannot send with BEGIN goes first, on its own.
  if (lead && !after) await lead(db).catch(() => {});
  const dl = deadline(Date.now(), s.batchTimeoutMs, bounded ? until : undefined);
  const by = dl.by === "budget" ? `the run's budget, budgetMs ${s.budgetMs} ms plus ${BUDGET_GRACE_MS} ms of grace` : undefined;
  const life = batchLife(dl.ms, s.signal, by);
  const br: BatchRun = { life, until: until ?? Number.POSITIVE_INFINITY, inflight: Promise.resolve(), counted: { n: 0 } };
  const a = attempt(ctx, s, kind, br, localTimeouts(s, dl.ms), link?.previous);
  const limits: BatchLimits = { deadlineMs: dl.ms, by: dl.by, statementTimeoutMs: statementMs(s, dl.ms) };
  try {
    br.held = s.hold?.(); // released in finally, whatever ends the batch
    const work = transaction(async (raw) => {
      const ended = await inTransaction(a, raw);
      if (!ended.busy) sealed = { ...ended.report, limits };
      return ended;
    });
    // A driver may end the transaction early (postgres.js rejects begin() when
    // its connection closes) while a handler still runs; and a hung ROLLBACK
    // must not hold run() past the deadline.
    work.catch(() => {}); // it may settle after we gave up on it
    const ended = await life.race(work).catch((err: unknown) => {
      if (err instanceof RollBack) return { busy: true } as const;
      throw err;
    });
    if (ended.busy) return { ...busyReport(a), limits };
    a.step({ on: "committed" });
    return { ...ended.report, limits };
  } catch (err) {
    const e = await failure(a, err);
    if (!move(a.phase(), { on: "failed", error: e }).ok) throw e;
    a.step(e instanceof KeyqError && e.code === "BATCH_ABORTED" ? { on: "aborted", error: e } : { on: "failed", error: e });
    throw e;
  } finally {
    life.dispose();
    try {
      br.held?.();
    } catch { /* a waker's bookkeeping must not fail the batch */ }
  }
}
