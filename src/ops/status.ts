/**
 * `status()`: the engine's report in the client's unit. The engine writes
 * durations in seconds (`extract(epoch from …)`); the client reports every
 * duration in milliseconds under an `…Ms` name (`lastTickAgeMs`, `lagMs`,
 * `polledAgoMs`; `retention` keeps the name of the setting it reports), so a
 * reported value passed back as a threshold or a setting means the same.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver } from "../driver.ts";
import { engine } from "../engine/calls.ts";
import type { EngineQueueStatus } from "../engine/status.ts";
import { KeyqError } from "../errors.ts";
import type { Duration, QueueStatus } from "../types.ts";
import { checkName, duration, durationMs, parse } from "../validate.ts";
import { secondsToMs } from "./queue-settings.ts";

const statusSchema = v.strictObject({ queue: v.optional(v.unknown()), staleAfter: v.optional(duration) });

/** Options of `status()`. */
export interface StatusOptions {
  /** Only this queue (an error when it does not exist). */
  queue?: string;
  /** A cursor not polled for this long is stale (default 5 minutes). */
  staleAfter?: Duration;
}

/**
 * One queue of the engine's report with its durations in milliseconds.
 *
 * @example
 * ```ts ignore
 * statusInMs(raw).lastTickAgeMs; // raw.lastTickAge 1.25 (s) → 1250
 * ```
 */
export function statusInMs(raw: EngineQueueStatus): QueueStatus {
  const { lastTickAge, retention, consumers, ...rest } = raw;
  return {
    ...rest,
    lastTickAgeMs: lastTickAge === null ? null : secondsToMs(lastTickAge),
    retention: retention === null ? null : secondsToMs(retention),
    consumers: consumers.map((c) => ({
      ...c,
      cursors: (c.cursors ?? []).map(({ lagSeconds, polledAgo, ...cu }) => ({
        ...cu,
        lagMs: secondsToMs(lagSeconds),
        polledAgoMs: secondsToMs(polledAgo),
      })),
    })),
  };
}

/**
 * Queues per engine call of `status()` over every queue. Each reported
 * queue keeps its partitions locked until its statement's transaction ends
 * (about 8 relations a queue), so pages keep one statement well inside the
 * server's shared lock table however many queues there are.
 */
export const STATUS_PAGE = 100;

/** The engine's report of one queue, or of every queue page by page (each page its own statement, so its own locks). */
async function statusPages(driver: Driver, schema: string, queue: string | null, staleAfter: number): Promise<EngineQueueStatus[]> {
  const db = engine(driver, schema);
  if (queue !== null) return await db.status({ queue, staleAfter, afterQueue: null, maxQueues: null });
  const out: EngineQueueStatus[] = [];
  for (;;) {
    const page = await db.status({ queue: null, staleAfter, afterQueue: out.at(-1)?.queue ?? null, maxQueues: STATUS_PAGE });
    out.push(...page);
    if (page.length < STATUS_PAGE) return out;
  }
}

/**
 * The status of every queue (or one): a queue that does not exist is an
 * error, not an empty list.
 *
 * @example
 * ```ts ignore
 * const [files] = await status(driver, "keyq", { queue: "files" });
 * files.lastTickAgeMs; // milliseconds since the last tick
 * ```
 */
export async function status(driver: Driver, schema: string, opts: unknown = {}): Promise<QueueStatus[]> {
  const o = parse(statusSchema, opts, "status options");
  const queue = o.queue === undefined ? null : checkName("queue", o.queue);
  const staleAfter = durationMs("staleAfter", o.staleAfter ?? 300_000, 1)! / 1000;
  const rows = await statusPages(driver, schema, queue, staleAfter);
  if (queue !== null && rows.length === 0) {
    throw new KeyqError("QUEUE_NOT_FOUND", `Queue "${queue}" does not exist; create it with createQueue("${queue}") or list them with listQueues().`, {
      queue,
    });
  }
  return rows.map(statusInMs);
}
