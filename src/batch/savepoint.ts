/**
 * Per-event failure isolation, paid only by events that use the database.
 *
 * Every per-event handler runs in its own savepoint, opened lazily with the
 * handler's first statement through `tx`: a handler that never touches `tx`
 * costs no statement at all. A failed event rolls back to its savepoint and
 * the batch goes on; the other events' handlers are never called again.
 *
 * Two ways, by what the driver offers:
 * - plain SAVEPOINT statements: the event's SAVEPOINT is sent with the
 *   handler's first statement (in the same text when that statement has no
 *   parameters; else right before it, without waiting for it: postgres.js
 *   pipelines the two, pg, Neon and Bun.SQL do not: one round trip more), and the
 *   previous event's RELEASE rides in the same text as the next SAVEPOINT;
 *   COMMIT releases the last one.
 * - `tx.savepoint(fn)` of the driver, for a driver that refuses to commit a
 *   transaction in which any statement failed outside such a scope and does
 *   not say `savepointStatements` (postgres.js does: its adapter commits such
 *   a transaction itself): its SAVEPOINT is a round trip of its own.
 *
 * A statement that failed while the handler returned normally is a
 * swallowed failure: the event fails (see machine.ts). Handlers that expect
 * a statement to fail run it in `tx.savepoint(fn)` ({@link HandlerTx}).
 *
 * @module
 */

import type { Executor, Row, SqlParam } from "../driver.ts";
import type { HandlerTx } from "../types.ts";

export type { HandlerTx };

/** An executor for the current event plus the controls the batch loop needs. */
export interface EventScope {
  /** What the handler gets: opens the event's savepoint on first use. */
  readonly exec: HandlerTx;
  /** Starts the next event. */
  next(): void;
  /** The first statement of the current event that failed outside a savepoint of its own. */
  swallowed(): { error: unknown } | undefined;
  /** The current event succeeded: keep its writes. */
  commit(): Promise<void>;
  /** The current event failed: undo its writes (no statement when it wrote nothing). */
  rollback(): Promise<void>;
  /** Savepoint statements issued so far. */
  statements(): number;
}

/** Wraps the batch transaction `tx` in lazily opened per-event savepoints. */
export function eventScope(tx: Executor): EventScope {
  return tx.savepoint && !tx.savepointStatements ? driverScope(tx.savepoint.bind(tx)) : statementScope(tx);
}

/** Records the first failure of `query`'s statements in `seen`. */
function watched(query: Executor["query"], seen: { failure?: { error: unknown } }): Executor["query"] {
  return (text, params) =>
    query(text, params).catch((error: unknown) => {
      seen.failure ??= { error };
      throw error;
    });
}

/** Sends `first` (no parameters) and then `text` as one network write where the driver allows it. */
function together(tx: Executor, first: string, text: string, params?: readonly SqlParam[]): Promise<Row[]> {
  if (params === undefined) return tx.query(`${first}; ${text}`);
  const opened = tx.query(first);
  const out = tx.query(text, params);
  opened.catch(() => {});
  out.catch(() => {});
  return opened.then(() => out);
}

function statementScope(tx: Executor): EventScope {
  const seen: { failure?: { error: unknown } } = {};
  let open = false; // the current event has its savepoint
  let releasePrevious = false; // the previous event's savepoint is still to be released
  let count = 0;
  const raw: Executor["query"] = (text, params) => {
    if (open) return tx.query(text, params);
    open = true;
    count++;
    const sp = releasePrevious ? "release savepoint keyq_event; savepoint keyq_event" : "savepoint keyq_event";
    releasePrevious = false;
    return together(tx, sp, text, params);
  };
  const counter = { n: 0 };
  const exec: HandlerTx = {
    query: watched(raw, seen),
    savepoint: (fn) => statementSavepoint({ query: raw }, fn, counter),
  };
  return {
    exec,
    next() {
      if (open) releasePrevious = true;
      open = false;
      seen.failure = undefined;
    },
    swallowed: () => seen.failure,
    commit: () => Promise.resolve(),
    async rollback() {
      if (!open) return;
      open = false;
      count++;
      await tx.query("rollback to savepoint keyq_event; release savepoint keyq_event");
    },
    statements: () => count,
  };
}

/**
 * A savepoint of the handler's own, by statements: SAVEPOINT, `fn`, then
 * RELEASE, or ROLLBACK TO and RELEASE when `fn` threw or one of its
 * statements failed (then it rejects with that error).
 */
async function statementSavepoint<T>(
  tx: Executor,
  fn: (sp: Executor) => Promise<T>,
  counter: { n: number },
): Promise<T> {
  const name = `keyq_sp${++counter.n}`;
  await tx.query(`savepoint ${name}`);
  const seen: { failure?: { error: unknown } } = {};
  const inner: HandlerTx = {
    query: watched(tx.query.bind(tx), seen),
    savepoint: (f) => statementSavepoint(inner, f, counter),
  };
  let out: T;
  try {
    out = await fn(inner);
  } catch (err) {
    await tx.query(`rollback to savepoint ${name}; release savepoint ${name}`);
    throw err;
  }
  if (seen.failure) {
    await tx.query(`rollback to savepoint ${name}; release savepoint ${name}`);
    throw seen.failure.error;
  }
  await tx.query(`release savepoint ${name}`);
  return out;
}

type SavepointFn = <T>(fn: (sp: Executor) => Promise<T>) => Promise<T>;

/** The handler's own savepoint on a driver with savepoint scopes: nested scopes of the driver. */
function nested(sp: Executor, seen: { failure?: { error: unknown } }): HandlerTx {
  return {
    query: watched(sp.query.bind(sp), seen),
    savepoint<T>(fn: (inner: Executor) => Promise<T>): Promise<T> {
      if (!sp.savepoint) return Promise.reject(new Error("keyq: this driver's savepoint scope cannot nest"));
      const mine: { failure?: { error: unknown } } = {};
      return sp.savepoint(async (inner) => {
        const out = await fn(nested(inner, mine));
        if (mine.failure) throw mine.failure.error;
        return out;
      });
    },
  };
}

function driverScope(savepoint: SavepointFn): EventScope {
  const seen: { failure?: { error: unknown } } = {};
  let inner: Promise<HandlerTx> | null = null; // the open scope's executor
  let settle: ((error?: unknown) => void) | null = null;
  let done: Promise<unknown> | null = null;
  let count = 0;
  const open = (): Promise<HandlerTx> => {
    inner ??= new Promise<HandlerTx>((ready, failed) => {
      count += 2; // SAVEPOINT, then RELEASE (or ROLLBACK TO + RELEASE)
      done = savepoint((sp) =>
        new Promise<void>((resolve, reject) => {
          settle = (error) => (error === undefined ? resolve() : reject(error));
          ready(nested(sp, seen));
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
  const exec: HandlerTx = {
    query: async (text, params) => await (await open()).query(text, params),
    savepoint: async (fn) => await (await open()).savepoint(fn),
  };
  return {
    exec,
    next: () => void (seen.failure = undefined),
    swallowed: () => seen.failure,
    commit: () => close(),
    rollback: () => close(new Error("keyq: the event failed")),
    statements: () => count,
  };
}

/**
 * The `tx` of a `handleBatch` call: the batch transaction itself, with
 * savepoints of the handler's own, and the first failure of a statement
 * outside them recorded (the whole batch then fails: nothing commits).
 */
export function batchTx(tx: Executor): { exec: HandlerTx; swallowed(): { error: unknown } | undefined } {
  const seen: { failure?: { error: unknown } } = {};
  if (tx.savepoint) return { exec: nested(tx, seen), swallowed: () => seen.failure };
  const counter = { n: 0 };
  return {
    exec: { query: watched(tx.query.bind(tx), seen), savepoint: (fn) => statementSavepoint(tx, fn, counter) },
    swallowed: () => seen.failure,
  };
}
