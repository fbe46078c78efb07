/**
 * The reply of the engine's `status()` function as SQL writes it: durations
 * in seconds (`extract(epoch from …)`), under the names SQL callers of
 * `keyq.status()` read. The client converts it to `QueueStatus`
 * (milliseconds, `…Ms` names) in src/ops/status.ts.
 *
 * @module
 */

import type { CursorStatus, QueueStatus } from "../types.ts";

/** One cursor as the engine reports it. */
export interface EngineCursorStatus extends Omit<CursorStatus, "lagMs" | "polledAgoMs"> {
  /** Seconds since the cursor's tick. */
  lagSeconds: number;
  /** Seconds since a batch last looked at the cursor. */
  polledAgo: number;
}

/**
 * One queue as the engine reports it: `lastTickAge` and `retention` in
 * seconds, cursors as `EngineCursorStatus`.
 *
 * @example
 * ```ts ignore
 * const [raw] = await engine(driver, "keyq").status({ queue: "files", staleAfter: 300, afterQueue: null, maxQueues: null });
 * raw.lastTickAge; // 1.25: seconds
 * ```
 */
export interface EngineQueueStatus extends Omit<QueueStatus, "lastTickAgeMs" | "retention" | "consumers"> {
  /** Seconds since the last tick; null before the first. */
  lastTickAge: number | null;
  /** Seconds events are kept past their consumers; null: no retention. */
  retention: number | null;
  /** Its consumers, each with its cursors. */
  consumers: (Omit<QueueStatus["consumers"][number], "cursors"> & { cursors: EngineCursorStatus[] })[];
}
