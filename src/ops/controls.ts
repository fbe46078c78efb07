/**
 * Operator controls: pause and resume a consumer by hand, settle a blocked
 * key's head now (skip it or dead-letter it), unsubscribe by name, list
 * blocked keys.
 *
 * @module
 */

import type { Driver } from "../driver.ts";
import { engine } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import type { BlockedKey } from "../types.ts";
import { checkName, parse, show, text } from "../validate.ts";

/** The operator calls of a client. */
export interface Controls {
  /** Pauses a consumer: its batches read nothing (report busy) until `resume`. True when it changed. */
  pause(queue: string, consumer: string): Promise<boolean>;
  /** Resumes a paused consumer. True when it changed. */
  resume(queue: string, consumer: string): Promise<boolean>;
  /**
   * Settles the failed head of a blocked key (pause policy) now:
   * `"skip"` drops it, `"deadLetter"` moves it to the dead letters; the key's
   * held events go out next, in order. `KEY_NOT_BLOCKED` when it is not blocked.
   */
  settleHead(queue: string, consumer: string, key: string, action: "skip" | "deadLetter"): Promise<{ slot: number; headId: string }>;
  /** Keys blocked behind a failed head, with their held events. */
  blocked(queue: string, consumer: string): Promise<BlockedKey[]>;
  /** Removes a consumer with its cursor, retries and dead letters; false when it did not exist. */
  unsubscribe(queue: string, consumer: string): Promise<boolean>;
}

const keyText = text("key", 0, 1000);

/** The operator calls over `driver` in `schema`. */
export function controls(driver: Driver, schema: string): Controls {
  const db = engine(driver, schema);
  const qc = (queue: string, consumer: string) => ({ queue: checkName("queue", queue), consumer: checkName("consumer", consumer) });
  const paused = async (queue: string, consumer: string, p: boolean) => (await db.setPaused({ ...qc(queue, consumer), paused: p })).changed;
  return {
    pause: (queue, consumer) => paused(queue, consumer, true),
    resume: (queue, consumer) => paused(queue, consumer, false),
    async settleHead(queue, consumer, key, action) {
      const ids = qc(queue, consumer);
      const k = parse(keyText, key, "settleHead key");
      if (action !== "skip" && action !== "deadLetter") {
        throw new KeyqError("INVALID_INPUT", `settleHead takes "skip" or "deadLetter", not ${show(action)}.`, { field: "action", value: action });
      }
      const r = await db.settleHead({ ...ids, key: k, action });
      return { slot: r.slot, headId: r.headId };
    },
    blocked: (queue, consumer) => db.blockedKeys(qc(queue, consumer)),
    async unsubscribe(queue, consumer) {
      return (await db.unsubscribe(qc(queue, consumer))).removed;
    },
  };
}
