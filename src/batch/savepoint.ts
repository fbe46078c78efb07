/**
 * Per-event failure isolation. A batch first runs on the fast path
 * ({@link directScope}: no savepoint statement at all); when a handler fails
 * it throws a {@link Rerun}, the batch rolls back and runs again with
 * per-event savepoints ({@link eventScope}), opened lazily: a handler that
 * never touches the database costs no round trip. A failed event rolls back
 * only its own writes, and the batch goes on.
 *
 * Two ways, by what the driver offers:
 * - `tx.savepoint(fn)` (postgres.js): the handler's queries run inside the
 *   driver's savepoint scope, opened on the first query and held until the
 *   handler settles; a failed query there does not doom the transaction.
 * - otherwise plain SAVEPOINT statements; releasing the previous event's
 *   savepoint rides with the next one's creation (one round trip each).
 *
 * @module
 */

import type { Executor } from "../driver.ts";

/** An executor for the current event plus the controls the batch loop needs. */
export interface EventScope {
  /** What the handler gets: opens the event's savepoint on first use. */
  readonly exec: Executor;
  /** Starts the next event. */
  next(): void;
  /** The current event succeeded: keep its writes. */
  commit(): Promise<void>;
  /** The current event failed: undo its writes (no-op when it wrote nothing). */
  rollback(error: unknown): Promise<void>;
  /** Savepoint statements issued so far (each one a round trip). */
  statements(): number;
}

/** Wraps the batch transaction `tx` in lazily opened per-event savepoints. */
export function eventScope(tx: Executor): EventScope {
  return tx.savepoint ? driverScope(tx, tx.savepoint.bind(tx)) : statementScope(tx);
}

function statementScope(tx: Executor): EventScope {
  let opening: Promise<unknown> | null = null; // the current event's savepoint
  let releasePrevious = false;
  let count = 0;
  const open = (): Promise<unknown> => {
    if (!opening) count++;
    opening ??= tx.query(releasePrevious ? "release savepoint keyq_event; savepoint keyq_event" : "savepoint keyq_event");
    releasePrevious = false;
    return opening;
  };
  return {
    exec: {
      async query(text, params) {
        await open();
        return await tx.query(text, params);
      },
    },
    next() {
      if (opening) releasePrevious = true;
      opening = null;
    },
    commit: () => Promise.resolve(),
    async rollback() {
      if (!opening) return;
      await opening.catch(() => {});
      await tx.query("rollback to savepoint keyq_event; release savepoint keyq_event");
      count++;
      opening = null;
    },
    statements: () => count,
  };
}

type SavepointFn = <T>(fn: (sp: Executor) => Promise<T>) => Promise<T>;

function driverScope(_tx: Executor, savepoint: SavepointFn): EventScope {
  let inner: Promise<Executor> | null = null; // the open scope's executor
  let settle: ((error?: unknown) => void) | null = null;
  let done: Promise<unknown> | null = null;
  let count = 0;
  const open = (): Promise<Executor> => {
    inner ??= new Promise<Executor>((ready, failed) => {
      count += 2; // SAVEPOINT, then RELEASE (or ROLLBACK TO + RELEASE)
      done = savepoint((sp) =>
        new Promise<void>((resolve, reject) => {
          settle = (error) => (error === undefined ? resolve() : reject(error));
          ready(sp);
        })
      );
      done.catch(failed);
    });
    return inner;
  };
  const close = async (error?: unknown): Promise<void> => {
    if (!inner) return;
    await inner.catch(() => {});
    settle?.(error);
    const d = done;
    inner = null;
    settle = null;
    done = null;
    if (error === undefined) await d;
    else await d?.catch(() => {});
  };
  return {
    exec: {
      async query(text, params) {
        return await (await open()).query(text, params);
      },
    },
    next() {},
    commit: () => close(),
    rollback: (error) => close(error ?? new Error("event failed")),
    statements: () => count,
  };
}

/**
 * The fast path of a batch: handlers run straight on the batch transaction,
 * with no savepoint statement at all. Used until a handler fails; then the
 * batch is rolled back and run again with per-event savepoints (see
 * {@link Rerun}).
 *
 * @example
 * ```ts
 * const scope = directScope(tx); // scope.exec is tx itself
 * ```
 */
export function directScope(tx: Executor): EventScope {
  return {
    exec: tx,
    next() {},
    commit: () => Promise.resolve(),
    rollback: () => Promise.resolve(),
    statements: () => 0,
  };
}

/** How the event that ended a fast batch went: the careful rerun applies it without calling the handler again. */
export type KnownOutcome = { kind: "failed" | "timedOut" | "released"; error: unknown };

/**
 * Thrown out of a fast batch when a handler fails, times out or gives up on
 * a stop: its writes cannot be undone alone, so the whole transaction rolls
 * back and the batch runs again with savepoints. The event's outcome is
 * carried over, so its handler is not called twice; handlers of the events
 * before it are (their writes were rolled back first; at-least-once for
 * effects outside the database).
 */
export interface Rerun {
  readonly rerun: true;
  readonly id: string;
  readonly outcome: KnownOutcome;
}

/**
 * Recognises a {@link Rerun}.
 *
 * @example
 * ```ts
 * isRerun({ rerun: true, id: "1", outcome: { kind: "failed", error: new Error("x") } }); // true
 * ```
 */
export function isRerun(x: unknown): x is Rerun {
  return typeof x === "object" && x !== null && (x as Rerun).rerun === true;
}
