/**
 * Per-event savepoints, opened lazily: a handler that never touches the
 * database costs no round trip; one that does pays one extra (the release of
 * the previous event's savepoint rides with the next one's creation). A
 * failed event rolls back only its own writes.
 *
 * @module
 */

import type { Executor } from "./driver.ts";

/** An executor for the current event plus the controls the batch loop needs. */
export interface EventScope {
  /** What the handler gets: opens the event's savepoint on first use. */
  readonly exec: Executor;
  /** Starts the next event. */
  next(): void;
  /** Undoes the current event's writes (no-op when it wrote nothing). */
  rollback(): Promise<void>;
  /** Savepoint statements issued so far (each one a round trip). */
  statements(): number;
}

/** Wraps the batch transaction `tx` in lazily opened per-event savepoints. */
export function eventScope(tx: Executor): EventScope {
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
