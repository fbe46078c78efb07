/**
 * Public types of keyq.
 *
 * ## Terminology
 *
 * - **event**: one immutable row of a queue's log: id, type, JSON payload,
 *   optional partition **key**, time. Never updated; tables are truncated
 *   whole by rotation.
 * - **queue**: a named log. Every consumer of a queue reads every event
 *   (fan-out).
 * - **tick**: an engine mark recording `pg_current_snapshot()`. Two ticks
 *   bound a **window**: the events whose transaction became visible between
 *   them. Windows tile the log, so each committed event is in exactly one.
 * - **consumer**: a named reader of a queue with its own cursor.
 * - **batch**: what one consumer transaction handles: the next events of a
 *   window, up to `maxEvents`. One batch is one transaction.
 * - **run**: one short invocation (a cron tick of an edge function): advance
 *   the ticker, do due maintenance, consume batches until a time budget or
 *   the backlog runs out.
 * - **Tier A (exclusive)**: many workers, at most one per key at a time.
 * - **Tier B (ordered)**: N fixed slots, FIFO within a key.
 *
 * Order: events are delivered in commit-window order, then in (transaction,
 * id) order inside a window. One producer sending in sequence (in one
 * transaction or several) is delivered in send order; two producers racing
 * on the same key have no defined order.
 *
 * @module
 */

import type { Executor } from "./driver.ts";

/**
 * A duration: milliseconds as a number, or text such as `"250ms"`, `"30s"`,
 * `"5 minutes"`, `"1 hour"`, `"2h"`, `"1 day"`.
 */
export type Duration = number | string;

/** JSON a payload may hold. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** An event to append. */
export interface SendInput<P = unknown> {
  /** Event type, e.g. `"FileCreated"` (1–200 characters). */
  type: string;
  /** JSON payload. */
  payload: P;
  /** Partition key (tenant, aggregate id…): the unit of exclusion and order. */
  key?: string | null;
  /**
   * Producer dedup key: while it is live, another send with the same key
   * appends nothing and returns the original id. Name the effect, not just the
   * entity: `migrate:${tenant}:${version}`, not `tenant`.
   */
  dedupKey?: string;
  /** How long `dedupKey` stays live (default 5 minutes). */
  ttl?: Duration;
}

/** Options of `send` and `sendBatch`. */
export interface SendOptions {
  /**
   * The caller's open transaction: the events commit or roll back with the
   * caller's own writes (outbox pattern). Accepted: keyq's executor (the `tx`
   * of `q.transaction(fn)` or of a handler), or the driver's own
   * transaction object when the client's adapter recognises it — postgres.js
   * and Bun.SQL: the `tx` of `sql.begin` (or of `tx.savepoint`); pg: a
   * `Client`/`PoolClient` after `BEGIN`; PGlite: the `tx` of
   * `db.transaction`. Anything else (`{}`, a pool, postgres.js `sql` itself,
   * a pg client outside a transaction) is refused with `INVALID_INPUT`
   * before anything is written.
   */
  tx?: Executor | object;
}

/** What `send` returns per event. */
export interface SendResult {
  /** The event id (a bigint, as a decimal string); the original one when deduped. */
  id: string;
  /** True when a live `dedupKey` matched, so nothing was appended. */
  deduped: boolean;
}

/** An event as a handler receives it. */
export interface KeyqEvent<P = unknown> {
  /** The event id (a bigint, as a decimal string). */
  id: string;
  /** The event type. */
  type: string;
  /** The partition key, or null. */
  key: string | null;
  /**
   * The parsed JSON payload. A received event parses it when it is first
   * read, once (a handler that never reads it costs no parse); with `time`
   * it is then an accessor of the event's prototype, which `{ ...event }`
   * and deep equality do not see: copy it by name (`JSON.stringify(event)`
   * writes both).
   */
  payload: P;
  /** When the event was appended (made on first read, like `payload`). */
  time: Date;
  /** How many times it failed before this delivery (0 on first delivery). */
  retry: number;
  /** Tier B: the slot that delivered it. */
  slot?: number;
  /**
   * The W3C `traceparent` of the span that sent it, when the producer was
   * traced (keyq/otel); absent otherwise.
   */
  trace?: string;
}

/** Settings of a queue. Durations accept milliseconds or text like `"5m"`. */
export interface QueueSettings {
  /** Ring tables for rotation, 2–8 (default 3). Fixed at creation. */
  tables?: number;
  /** How often to rotate to the next table (default 1 hour). */
  rotationPeriod?: Duration;
  /** Tick early once this many events are pending (with `tickMaxLag`). */
  tickMaxCount?: number;
  /** Longest an event waits for a tick when events are pending (default 0). */
  tickMaxLag?: Duration;
  /** Tick at least this often even when idle (default 1 minute). */
  tickIdlePeriod?: Duration;
  /** Failed deliveries before an event is dead-lettered (default 5). */
  maxRetries?: number;
  /** First retry delay (default 1 s); doubles per failure with jitter. */
  retryBase?: Duration;
  /** Longest retry delay (default 1 hour). */
  retryCap?: Duration;
  /**
   * Keep events at least this long, whatever the consumers say: rotation
   * never truncates a ring table holding a younger event (default: none, a
   * table is emptied once every consumer has passed it). `0` turns it off.
   * What `from: "earliest"`, seek and key history can reach back to.
   */
  retention?: Duration;
}

/**
 * A queue with its settings. Durations are milliseconds, the unit numbers
 * mean everywhere in keyq: any reported setting can be passed back to
 * `createQueue` or `updateQueue` unchanged and means the same thing.
 */
export interface QueueInfo {
  /** The queue's name. */
  name: string;
  /** Ring tables of its log (2–8). */
  tables: number;
  /** The ring table new events go to (0-based). */
  currentTable: number;
  /** When the log last rotated (ISO timestamp). */
  rotatedAt: string;
  /** Milliseconds between rotations. */
  rotationPeriod: number;
  /** A tick is due after this many new events. */
  tickMaxCount: number;
  /** Milliseconds a pending event may wait for a tick. */
  tickMaxLag: number;
  /** Milliseconds after which an idle queue is ticked anyway. */
  tickIdlePeriod: number;
  /** Retries of a failed event before it becomes a dead letter. */
  maxRetries: number;
  /** Milliseconds before the first retry (doubles with each retry). */
  retryBase: number;
  /** Longest wait between retries, in milliseconds. */
  retryCap: number;
  /** Milliseconds events are kept past their consumers; null: no retention (pass null or 0 to turn it off). */
  retention: number | null;
  /** When the queue was created (ISO timestamp). */
  createdAt: string;
}

/**
 * What a handler call gets besides the event: a signal and a deadline.
 * The signal fires when the batch's deadline passes, when its connection is
 * lost (the batch rolls back, and its key locks or slot are gone), when the
 * worker is stopped, or when the call runs past `eventTimeout`. Pass it on to
 * `fetch` and friends and stop when it fires: keyq cannot stop a call that
 * ignores it.
 */
export interface HandlerContext {
  /** Fires when this call should stop; `signal.reason` is a `KeyqError` "BATCH_ABORTED" or a TimeoutError. */
  signal: AbortSignal;
  /** When the batch (or this call, with `eventTimeout`) runs out of time. */
  deadline: Date;
}

/**
 * The `tx` a handler gets: the batch transaction, plus savepoints for
 * statements the handler expects to fail.
 *
 * @example
 * ```ts
 * import type { HandlerTx } from "keyq";
 * async function insertOnce(tx: HandlerTx, id: string): Promise<boolean> {
 *   try {
 *     await tx.savepoint((sp) => sp.query("insert into seen (id) values ($1)", [id]));
 *     return true;
 *   } catch (err) {
 *     if ((err as { code?: string }).code === "23505") return false; // a duplicate: undone, tx still usable
 *     throw err;
 *   }
 * }
 * ```
 */
export interface HandlerTx extends Executor {
  /**
   * Runs `fn` in a savepoint: when `fn` throws, or a statement in it failed,
   * its writes are undone, `savepoint` rejects with that error and `tx`
   * stays usable. A statement that fails outside it fails the event, even
   * when the handler catches the error (`HANDLER_SWALLOWED_FAILURE`).
   */
  savepoint<T>(fn: (sp: Executor) => Promise<T>): Promise<T>;
}

/**
 * Handles one event inside the batch transaction `tx`, in a savepoint of
 * its own (opened with its first statement through `tx`). Throwing fails
 * this event only: its writes through `tx` roll back, it is retried with
 * backoff, and the other events' writes commit; no other handler is called
 * again. A statement that failed while the handler returned normally fails
 * the event too (`KeyqError` "HANDLER_SWALLOWED_FAILURE"): run statements
 * you expect to fail in `tx.savepoint(fn)`.
 *
 * @example
 * ```ts
 * import type { EventHandler } from "@keyq/keyq";
 * const handler: EventHandler<{ url: string }> = async (ev, _tx, { signal }) => {
 *   await fetch(ev.payload.url, { method: "POST", signal }); // stops when the batch is lost
 * };
 * ```
 */
export type EventHandler<P = unknown> = (event: KeyqEvent<P>, tx: HandlerTx, ctx: HandlerContext) => Promise<void> | void;

/** What a batch handler gets besides the events. */
export interface BatchContext extends HandlerContext {
  /** The batch transaction; a statement that fails outside `tx.savepoint(fn)` fails the whole batch. */
  tx: HandlerTx;
  /** Marks one event failed (retried with backoff, or dead-lettered). */
  fail(event: KeyqEvent<unknown>, error: unknown): void;
}

/**
 * Handles a whole batch. Throwing rolls the whole batch back (nothing is
 * recorded; the same events come again); `fail` fails single events.
 */
export type BatchHandler<P = unknown> = (events: KeyqEvent<P>[], ctx: BatchContext) => Promise<void> | void;

/** Options of one batch: give `handler` (per event) or `handleBatch`. */
export interface BatchOptions<P = unknown> {
  /** Called once per event, in order, inside the batch transaction. */
  handler?: EventHandler<P>;
  /** Called once per batch with all its events. */
  handleBatch?: BatchHandler<P>;
  /** Called for each failed event (logging); its errors are ignored. */
  onError?: (error: unknown, event: KeyqEvent<P>) => void;
  /**
   * Most events in one batch (1–10,000; default 1,000 for plain and
   * ordered consumers, 100 for exclusive ones, measured). A Tier A batch also
   * stops at a sixteenth of the server's lock table in distinct keys (400
   * with default settings); the rest waits for the next batch.
   */
  maxEvents?: number;
  /**
   * Hard deadline of one batch (default 60 s). When it passes, the handlers'
   * signal fires, no further handler starts, the batch rolls back and the
   * call rejects with `KeyqError` "BATCH_ABORTED" (`details.reason`
   * "deadline"). The server's idle and statement timeouts of the batch are
   * set just past it, so keyq's deadline decides, not the server. A COMMIT
   * sent before the deadline is waited for up to 2 s past it (a batch that
   * commits late is reported as committed); with no answer by then the call
   * rejects with `details.commit` "unknown".
   */
  batchTimeout?: Duration;
  /**
   * Longest one handler call may take (default: only the batch deadline).
   * A call past it gets its signal aborted and its event fails (retried with
   * backoff); no further event of the batch starts and what finished commits.
   */
  eventTimeout?: Duration;
  /**
   * `statement_timeout` of the batch transaction, used as given; longer than
   * `batchTimeout` is refused (`INVALID_INPUT`). Unset: 30 s, or
   * `batchTimeout` when shorter. A run's budget that ends the batch sooner
   * bounds it to the deadline plus 2 s (the report's `limits` says so).
   */
  statementTimeout?: Duration;
  /**
   * The server-side backstop `idle_in_transaction_session_timeout` of the
   * batch. Unset, keyq sets it just past each batch's deadline, so a handler
   * that is silent within the deadline is never cut off. Given, it is used
   * as is, and refused (`INVALID_INPUT`) when shorter than `batchTimeout`.
   */
  idleTimeout?: Duration;
  /**
   * Stops the call: in a batch the handlers' signal fires, no further
   * handler starts and what finished commits; `run()` starts no further
   * batch; `work()` also stops promptly while polling or backing off.
   */
  signal?: AbortSignal;
}

/**
 * Tier B static assignment, taken by the `batch`, `run` and `work` of an
 * ordered consumer only: worker k of `workers` reads slots k, k + workers, …
 * (and helps on a slot nobody polled for `helpAfter`). Give both or neither.
 *
 * @example
 * ```ts
 * import type { OrderedConsumer, SlotAssignment } from "@keyq/keyq";
 * async function drain(c: OrderedConsumer, me: SlotAssignment): Promise<void> {
 *   await c.run({ ...me, handler: (ev) => console.log(ev.slot, ev.id) });
 * }
 * console.log(typeof drain);
 * ```
 */
export interface SlotAssignment {
  /** This worker's index, 0 ≤ worker < workers. */
  worker?: number;
  /** How many workers share the slots. */
  workers?: number;
}

/** What one batch did. */
export interface BatchReport {
  /** Events delivered to the handler. */
  events: number;
  /** Events that failed and were scheduled for a retry. */
  retried: number;
  /** Events that failed for the last time and went to the dead letters. */
  deadLettered: number;
  /** Tier A, idempotent: events acked without running because another worker held their key. */
  dropped: number;
  /** Tier A: events put back for later (no retry spent) because another worker held their key. */
  deferred: number;
  /**
   * Statements the batch sent: BEGIN, receive, [ack], COMMIT, savepoints,
   * fence hooks, and the handler's own queries through `tx`. Not network
   * round trips: a driver may need more than one per statement (see the
   * README).
   */
  statements: number;
  /**
   * @deprecated The same number as `statements` (it always counted
   * statements, not network round trips); kept for compatibility, use
   * `statements`.
   */
  roundTrips: number;
  /** True when another worker held the cursor or slot, so nothing was read. */
  busy: boolean;
  /**
   * The bounds the batch ran with (set on every report of `batch()` and of
   * each batch of `run()`/`work()`): its deadline, what set it, and the
   * `statement_timeout` it used. `statementTimeout` is used as given unless
   * a run's budget ends the batch sooner (`by: "budget"`): then no statement
   * outlives the deadline plus 2 s. See docs/batches.md.
   */
  limits?: BatchLimits;
}

/**
 * The bounds one batch ran with, in {@link BatchReport.limits}.
 *
 * @example
 * ```ts
 * import type { BatchLimits } from "keyq";
 * const l: BatchLimits = { deadlineMs: 4_000, by: "budget", statementTimeoutMs: 6_000 };
 * console.log(l.by); // "budget": the run's budget plus its 2 s grace came before batchTimeout
 * ```
 */
export interface BatchLimits {
  /** Milliseconds the batch may take: batchTimeout, or the run's budget plus 2 s of grace when that is sooner. */
  deadlineMs: number;
  /** What set the deadline. */
  by: "budget" | "batchTimeout";
  /** The batch's `statement_timeout`: `statementTimeout`, or deadlineMs plus 2 s when that is shorter (only under a budget). */
  statementTimeoutMs: number;
}

/** Options of `run`: a bounded invocation for cron and edge functions. */
export interface RunOptions<P = unknown> extends BatchOptions<P> {
  /**
   * Stop starting events after this long (default 10 s; milliseconds or
   * text like `"30s"`): the batch in
   * progress (once it has handled one event) commits what finished and its
   * other events come again (in order). Every batch of `run()` ends by the
   * budget plus a grace of 2 s (or `batchTimeout`, whichever is sooner): a
   * handler call still running then is abandoned, the batch rolls back and
   * `run()` rejects with `BATCH_ABORTED` (`details.by` "budget").
   */
  budgetMs?: Duration;
  /** Stop after this many batches (default unlimited). */
  maxBatches?: number;
}

/** What `run` did: its batches' counts added up. */
export interface RunReport extends Omit<BatchReport, "busy" | "limits"> {
  /** Batches that had something to do. */
  batches: number;
  /** Statements sent, including the run's tick and maintenance calls and the handlers' own. */
  statements: number;
  /** @deprecated The same number as `statements`; use `statements`. */
  roundTrips: number;
  /** True when the ticker wrote a tick. */
  ticked: boolean;
  /** Milliseconds spent. */
  ms: number;
}

/** Options of `work`: `run` in a loop until the signal aborts. */
export interface WorkOptions<P = unknown> extends RunOptions<P> {
  /** Shortest idle wait between polls (default 100 ms): milliseconds or text like `"250ms"`. */
  minPollMs?: Duration;
  /** Longest idle wait between polls (default 5 s): milliseconds or text like `"5s"`. */
  maxPollMs?: Duration;
  /**
   * Wake up on notifications instead of waiting out the poll back-off
   * (default true). Used only where a notification is seen to arrive (a
   * driver with a long-lived session, no transaction pooler); elsewhere the
   * worker polls. `false` always polls.
   */
  wakeups?: boolean;
  /**
   * Called before each retry after a transient failure (a lost connection,
   * a restarting server, too many connections, a serialization failure…);
   * `work()` itself only rejects for errors that retrying cannot fix.
   */
  onRetry?: (info: RetryInfo) => void;
  /** Backoff between retries: `baseMs` doubling per attempt up to `capMs`, with jitter (default 200 ms to 10 s). */
  retryBackoff?: { baseMs?: Duration; capMs?: Duration };
}

/** What `onRetry` hears. */
export interface RetryInfo {
  /** The failure (a driver error or a `KeyqError` such as "BATCH_ABORTED"). */
  error: unknown;
  /** Consecutive failures so far (1 for the first). */
  attempt: number;
  /** How long the worker waits before the next try. */
  delayMs: number;
}

/** Result of `migrate()`. */
export interface MigrateResult {
  /** Schema version before the call. */
  from: number;
  /** Schema version after the call. */
  to: number;
  /** Versions applied by this call. */
  applied: number[];
  /**
   * The engine's function set: "applied" (created or replaced by this call),
   * "current" (this build's was already there), "newer" (a newer keyq
   * version's, or a later build of this version, is recorded: left alone;
   * this process runs the older build).
   */
  functions: "applied" | "current" | "newer";
}

/** Result of `maintain()` for one queue. */
export interface MaintainReport {
  /** The queue maintained. */
  queue: string;
  /** True when another caller was maintaining this queue. */
  skipped: boolean;
  /** The rotation attempt: whether it rotated, why not, and the new ring table. */
  rotation?: { rotated: boolean; reason?: string; table?: number };
  /** Ticks no cursor needs any more, deleted. */
  ticksPruned?: number;
  /** Expired dedup keys collected. */
  dedupExpired?: number;
}

/** A dead-lettered event. */
export interface DeadLetter<P = unknown> {
  /** The dead letter's id (use it with `dlq.replay`). */
  id: string;
  /** The queue of the event. */
  queue: string;
  /** The consumer that gave up on it; replay goes back to it only. */
  consumer: string;
  /** The consumer's slot the event belonged to (0 except for Tier B). */
  slot: number;
  /** The event's id. */
  eventId: string;
  /** The event's type. */
  type: string;
  /** The event's partition key. */
  key: string | null;
  /** The event's payload. */
  payload: P;
  /** When the event was appended (ISO timestamp). */
  time: string;
  /** Deliveries that failed (maxRetries + 1). */
  attempts: number;
  /** The last error: message, and code/name when the error had them. */
  error: { message: string; code?: string; name?: string } | null;
  /** When it was dead-lettered (ISO timestamp). */
  deadAt: string;
  /**
   * The W3C `traceparent` the event was sent under (keyq/otel), kept so a
   * replayed delivery links to its producer again; null when the producer
   * traced nothing (and for dead letters older than this field).
   */
  trace: string | null;
}

/** Filters of the dead-letter calls. Durations count back from now. */
export interface DeadLetterFilter {
  /** Only this queue. */
  queue?: string;
  /** Only this consumer. */
  consumer?: string;
  /** Only this partition key. */
  key?: string;
  /** Only those dead for longer than this. */
  olderThan?: Duration;
  /** Only those dead for less than this. */
  newerThan?: Duration;
}

/** A key blocked behind its failed head event (Tier B pause policy). */
export interface BlockedKey {
  /** The slot the key maps to. */
  slot: number;
  /** The blocked partition key. */
  key: string;
  /** The failed head event's id; the key flows again once it is acked or dead-lettered. */
  headId: string;
  /** When the head event first failed (ISO timestamp). */
  since: string;
  /** Later events of the key waiting behind the head. */
  held: number;
}

/** One cursor (a slot, for Tier B) in `status()`. */
export interface CursorStatus {
  /** The slot (0 for plain and exclusive consumers). */
  slot: number;
  /** Events committed to the queue after the cursor's tick (queue-wide; deduplicated and rolled-back sends do not count), counted up to 100,000. */
  lagEvents: number;
  /** Milliseconds since the cursor's tick (compare with the `maxLagMs` threshold). */
  lagMs: number;
  /** Milliseconds since a batch last looked at this cursor. */
  polledAgoMs: number;
  /** Not polled for `staleAfter`: it pins rotation, so the log grows. */
  stale: boolean;
  /** True while the cursor is inside a window it has not finished. */
  windowOpen: boolean;
}

/** The retained range of a queue's log, in `status()`. */
export interface RetainedRange {
  /** The first tick of the range: `from: "earliest"` starts after it. */
  fromTick: string;
  /** When that tick was taken (ISO timestamp): the range starts here. */
  since: string;
  /** The first event of the range, in log order; null when it is empty. */
  oldestEventId: string | null;
  /** Its time (ISO timestamp), or null. */
  oldestEventTime: string | null;
  /** Events in the range, counted up to 100,000. */
  events: number;
  /** Bytes of the queue's ring tables (with their indexes). */
  bytes: number;
}

/** One queue in `status()`. */
export interface QueueStatus {
  /** The queue's name. */
  queue: string;
  /** Ring tables of its log. */
  tables: number;
  /** The ring table new events go to (0-based). */
  currentTable: number;
  /** When the log last rotated (ISO timestamp). */
  rotatedAt: string;
  /** The newest tick's id; null before the first tick. */
  lastTick: string | null;
  /** Milliseconds since the last tick; null before the first (compare with the `maxTickAgeMs` threshold). */
  lastTickAgeMs: number | null;
  /** Events committed since the last tick (not yet in any window), counted up to 100,000. */
  eventsSinceTick: number;
  /** Milliseconds events are kept past their consumers; null: no retention (pass null or 0 to turn it off). */
  retention: number | null;
  /** The retained range: what `from: "earliest"`, seek and key history can reach. */
  retained: RetainedRange;
  /** Its consumers, each with its cursors (one per slot for Tier B). */
  consumers: {
    name: string;
    kind: "plain" | "exclusive" | "ordered";
    slots: number;
    /** Paused by an operator: it reads nothing until resumed. */
    paused: boolean;
    retries: number;
    deadLetters: number;
    blockedKeys: number;
    cursors: CursorStatus[];
  }[];
}

/**
 * Grants of one role (docs/roles.md). Queue and consumer names, or `"*"` for
 * every one. A named queue must exist; a consumer need not yet.
 */
export interface GrantInput {
  /** The Postgres role (a login, or a NOLOGIN group its logins are members of). */
  role: string;
  /** Queues it may send to. */
  produce?: readonly string[];
  /** Consumers it may run, read the status and dead letters of, by queue: `{ orders: ["billing"] }`. */
  consume?: Readonly<Record<string, readonly string[]>>;
  /** Create and drop queues, subscribe, force ticks and rotation, replay and purge; implies produce and consume everywhere. */
  operate?: boolean;
}

/** Grants to take back; `all: true` takes every grant of the role. */
export interface RevokeInput extends GrantInput {
  /** Take back every grant of the role. */
  all?: boolean;
}

/** One role's grants, as `grants()` lists them. */
export interface RoleGrants {
  /** The Postgres role. */
  role: string;
  /** Queues it may send to (`"*"`: every one). */
  produce: string[];
  /** Consumers it may run, by queue (`"*"`: every one). */
  consume: Record<string, string[]>;
  /** Whether it may operate (create and drop queues, subscribe, seek, replay, purge…). */
  operate: boolean;
}

/**
 * Where a consumer starts (`subscribe({ from })`) or is moved to (`seek`):
 * `"latest"` (what commits after the call returns; the default), `"earliest"`
 * (the start of the retained range), a `Date` (the newest tick at or before
 * it), or an event id (that event first, then everything after it in log
 * order). A point outside the retained range is `POSITION_OUT_OF_RANGE`.
 */
export type StartPosition = "latest" | "earliest" | Date | string;

/** A resolved position: the tick it starts after, and a place inside the next window. */
export interface LogPosition {
  /** The tick the position starts after. */
  tick: string;
  /** That tick's time (ISO timestamp). */
  tickTime: string;
  /** When the position is inside a window: the window's end tick, else null. */
  windowEnd: string | null;
  /** Inside a window: delivery starts after this id (in (txid, id) order), else null. */
  afterId: string | null;
}

/** What `seek` did. */
export interface SeekResult {
  /** Where the consumer (or slot) now is. */
  position: LogPosition;
  /** Cursors moved (every slot, or 1). */
  slots: number;
  /** Pending retries (and held events) of the moved slots that were dropped. */
  retriesDropped: number;
  /** Blocked-key markers of the moved slots that were dropped. */
  blockedDropped: number;
}

/** One event of a key's history, in delivery order. */
export interface HistoryEvent<P = unknown> {
  /** The event's id (a bigint, as a decimal string). */
  id: string;
  /** The id of the transaction that appended it. */
  txid: string;
  /** The event's type. */
  type: string;
  /** Its partition key, or null. */
  key: string | null;
  /** Its JSON payload. */
  payload: P;
  /** When the event was appended (ISO timestamp). */
  time: string;
  /** Its place in the log ("tick:txid:id"); pass the last one as `after` for the next page. */
  position: string;
}
