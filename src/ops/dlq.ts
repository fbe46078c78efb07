/**
 * Dead letters: list, count, replay (to the consumer that gave up only),
 * replay a key in original order, purge.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver } from "../driver.ts";
import { engine } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import type { DeadLetter, DeadLetterFilter } from "../types.ts";
import { checkId, checkName, duration, durationMs, int, parse, show, text } from "../validate.ts";

/**
 * The dead-letter API of a client (`q.dlq`). A filter naming a queue or
 * consumer that does not exist throws `QUEUE_NOT_FOUND`/`CONSUMER_NOT_FOUND`
 * rather than matching nothing.
 */
export interface DeadLetters {
  /** Dead letters matching `filter`, oldest first (at most `limit`, default 100). */
  list<P = unknown>(filter?: DeadLetterFilter & { limit?: number; afterId?: string }): Promise<DeadLetter<P>[]>;
  /** How many dead letters match `filter`. */
  count(filter?: DeadLetterFilter): Promise<number>;
  /** Replays dead letters by id to their own consumer; all must exist or nothing changes. */
  replay(ids: string | readonly string[]): Promise<number>;
  /** Replays every dead letter of `key` for one consumer, in original order. */
  replayKey(queue: string, consumer: string, key: string): Promise<number>;
  /** Replays every dead letter of one consumer. */
  replayAll(queue: string, consumer: string): Promise<number>;
  /** Deletes dead letters older than `olderThan` (and matching the rest of the filter). */
  purge(filter: DeadLetterFilter & { olderThan: DeadLetterFilter["olderThan"] }): Promise<number>;
}

const filterSchema = v.strictObject({
  queue: v.optional(v.unknown()),
  consumer: v.optional(v.unknown()),
  key: v.optional(text("key", 0, 1000)),
  olderThan: v.optional(duration),
  newerThan: v.optional(duration),
});

const listSchema = v.strictObject({
  ...filterSchema.entries,
  limit: v.optional(int(1, 10_000)),
  afterId: v.optional(v.unknown()),
});

function filterJson(input: unknown, what: string, schema: v.GenericSchema = filterSchema): Record<string, unknown> {
  const f = parse(schema, input, what) as v.InferOutput<typeof listSchema>;
  const out: Record<string, unknown> = {};
  if (f.queue !== undefined) out.queue = checkName("queue", f.queue);
  if (f.consumer !== undefined) out.consumer = checkName("consumer", f.consumer);
  if (f.key !== undefined) out.key = f.key;
  if (f.olderThan !== undefined) out.olderThan = durationMs("olderThan", f.olderThan)! / 1000;
  if (f.newerThan !== undefined) out.newerThan = durationMs("newerThan", f.newerThan)! / 1000;
  if (f.afterId !== undefined) out.afterId = checkId("afterId", f.afterId, `Option "afterId" of ${what}`);
  return out;
}

/** Creates the dead-letter API over `driver` in `schema`. */
export function deadLetters(driver: Driver, schema: string): DeadLetters {
  const db = engine(driver, schema);
  return {
    async list<P>(filter: DeadLetterFilter & { limit?: number; afterId?: string } = {}) {
      const limit = parse(listSchema, filter, "dlq.list filter").limit ?? 100;
      const rows = await db.dlqList({ filter: filterJson(filter, "dlq.list filter", listSchema), limit });
      return rows as DeadLetter<P>[];
    },
    async count(filter = {}) {
      return await db.dlqCount({ filter: filterJson(filter, "dlq.count filter") });
    },
    async replay(ids) {
      const list = typeof ids === "string" ? [ids] : ids;
      if (!Array.isArray(list) || list.length === 0) {
        throw new KeyqError("INVALID_INPUT", `dlq.replay takes dead-letter ids such as "42", not ${show(ids)}; find them with dlq.list().`, {
          field: "ids",
        });
      }
      for (const id of list) checkId("ids", id, "dlq.replay");
      return await db.dlqReplay({ ids: list });
    },
    async replayKey(queue, consumer, key) {
      if (typeof key !== "string") {
        throw new KeyqError("INVALID_INPUT", `dlq.replayKey needs the key as a string, not ${show(key)}.`, { field: "key" });
      }
      checkName("queue", queue);
      checkName("consumer", consumer);
      const filter = filterJson({ queue, consumer, key }, "dlq.replayKey");
      return await db.dlqReplayWhere({ filter });
    },
    async replayAll(queue, consumer) {
      const filter = filterJson({ queue: checkName("queue", queue), consumer: checkName("consumer", consumer) }, "dlq.replayAll");
      return await db.dlqReplayWhere({ filter });
    },
    async purge(filter) {
      if (filter?.olderThan === undefined) {
        throw new KeyqError("INVALID_INPUT", 'dlq.purge needs "olderThan" (e.g. "7 days"); use olderThan: 0 to purge all.', {
          field: "olderThan",
        });
      }
      return await db.dlqPurge({ filter: filterJson(filter, "dlq.purge filter") });
    },
  };
}
