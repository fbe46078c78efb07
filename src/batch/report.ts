/**
 * Honest batch reports: `statements` counts every statement a batch sent —
 * BEGIN, receive, ack, COMMIT, savepoints, fence hooks, and the handler's own
 * queries through `tx` — because that is what a batch costs the database.
 * Network round trips are a driver matter (postgres.js sends an unprepared
 * parameterised statement in two, a prepared one in one), so keyq does not
 * claim to count them; tests/round-trips.test.ts counts them on the wire.
 *
 * @module
 */

import type { Executor } from "../driver.ts";

/** A statement tally shared by the executors that feed it. */
export interface Tally {
  n: number;
}

/**
 * Wraps `exec` so each query adds one to `tally`, a driver's `savepoint`
 * two (plus what runs in it); `signal` passes through unchanged.
 *
 * @example
 * ```ts
 * import { counting } from "./report.ts";
 * const tally = { n: 0 };
 * const exec = counting({ query: async () => [] }, tally);
 * await exec.query("select 1");
 * console.log(tally.n); // 1
 * ```
 */
export function counting(exec: Executor, tally: Tally): Executor {
  const out: { -readonly [K in keyof Executor]: Executor[K] } = {
    query(text, params) {
      tally.n++;
      return exec.query(text, params);
    },
  };
  const savepoint = exec.savepoint?.bind(exec);
  if (savepoint) {
    // SAVEPOINT and its RELEASE (or ROLLBACK TO), and what runs inside it.
    out.savepoint = <T>(fn: (sp: Executor) => Promise<T>): Promise<T> => {
      tally.n += 2;
      return savepoint((sp) => fn(counting(sp, tally)));
    };
  }
  if (exec.signal) out.signal = exec.signal;
  return out;
}
