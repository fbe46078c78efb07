/**
 * Positions in a queue's log: the `from` of a new consumer, seek of an
 * existing one, and one key's retained history (read it, or replay it into
 * one consumer). The engine resolves a target in one transaction; a point
 * outside the retained range is `POSITION_OUT_OF_RANGE`, never clamped.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver } from "../driver.ts";
import { engine, type Target } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import type { HistoryEvent, SeekResult, StartPosition } from "../types.ts";
import { checkId, checkName, int, parse, show, text } from "../validate.ts";

/**
 * Checks a start position strictly: `"latest"`, `"earliest"`, a valid
 * `Date`, or an event id (a decimal string). Anything else is `INVALID_INPUT`.
 */
export function target(field: string, value: unknown, what: string): Target {
  if (value === "latest") return { latest: true };
  if (value === "earliest") return { earliest: true };
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) {
      throw new KeyqError("INVALID_INPUT", `Option "${field}" of ${what} is an invalid Date; give a valid Date, "latest", "earliest" or an event id.`, {
        field,
      });
    }
    return { time: value.toISOString() };
  }
  if (typeof value === "string" && /^\d{1,19}$/.test(value)) return { id: checkId(field, value, `Option "${field}" of ${what}`) };
  throw new KeyqError(
    "INVALID_INPUT",
    `Option "${field}" of ${what} is ${show(value)}; give "latest", "earliest", a Date, or an event id as a decimal string such as "42".`,
    { field, value },
  );
}

const seekSchema = v.strictObject({ slot: v.optional(int(0, 1023)) });
const historySchema = v.strictObject({
  from: v.optional(v.unknown()),
  after: v.optional(v.pipe(v.string("expected a position string"), v.regex(/^\d+:\d+:\d+$/, 'expected a position such as "12:3456:78"'))),
  limit: v.optional(int(1, 100_000)),
});
const replaySchema = v.strictObject({ into: v.unknown(), from: v.optional(v.unknown()) });
const keyText = text("key", 0, 1000);

/** The log calls of a client. */
export interface LogCalls {
  /**
   * Moves a consumer (every slot, or `{ slot }` of an ordered consumer) to a
   * position, in one transaction. `CONSUMER_BUSY` while a batch holds it.
   * The moved slots' pending retries, held events and blocked keys are
   * dropped (from the new position the log is the truth); dead letters stay.
   */
  seek(queue: string, consumer: string, to: StartPosition, options?: { slot?: number }): Promise<SeekResult>;
  /** One key's retained events in delivery order (default from `"earliest"`, at most `limit`, default 1000). */
  history<P = unknown>(queue: string, key: string, options?: { from?: StartPosition; after?: string; limit?: number }): Promise<HistoryEvent<P>[]>;
  /**
   * Delivers one key's retained history again to one consumer (`into`), in
   * order, as redeliveries in its own slot; no cursor moves, no other
   * consumer sees anything. The number of events queued.
   */
  replayKey(queue: string, key: string, options: { into: string; from?: StartPosition }): Promise<number>;
}

/** The log calls over `driver` in `schema`. */
export function logCalls(driver: Driver, schema: string): LogCalls {
  const db = engine(driver, schema);
  return {
    async seek(queue, consumer, to, options) {
      checkName("queue", queue);
      checkName("consumer", consumer);
      const t = target("to", to, "seek");
      const o = parse(seekSchema, options ?? {}, "seek options");
      return await db.seek({ queue, consumer, target: t, slot: o.slot ?? null });
    },
    async history<P>(queue: string, key: string, options?: { from?: StartPosition; after?: string; limit?: number }) {
      checkName("queue", queue);
      const k = parse(keyText, key, "history key");
      const o = parse(historySchema, options ?? {}, "history options");
      const start = o.from === undefined ? null : target("from", o.from, "history");
      return await db.keyHistory({ queue, key: k, start, after: o.after ?? null, limit: o.limit ?? 1000 }) as HistoryEvent<P>[];
    },
    async replayKey(queue, key, options) {
      checkName("queue", queue);
      const k = parse(keyText, key, "replayKey key");
      const o = parse(replaySchema, options, "replayKey options");
      const into = checkName("consumer", o.into);
      const start = o.from === undefined ? null : target("from", o.from, "replayKey");
      return (await db.replayKey({ queue, consumer: into, key: k, start })).replayed;
    },
  };
}
