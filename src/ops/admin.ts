/**
 * Queue administration of a client: create, update, drop and list queues,
 * the ticker, maintenance and status.
 *
 * @module
 */

import * as v from "valibot";
import type { Driver, Executor } from "../driver.ts";
import { engine } from "../engine/calls.ts";
import type { Ticked } from "../engine/declarations.ts";
import { infoInMs, queueSettings, sameSettings } from "./queue-settings.ts";
import type { MaintainReport, QueueInfo, QueueSettings, QueueStatus } from "../types.ts";
import { checkName, parse } from "../validate.ts";
import { status, type StatusOptions } from "./status.ts";

const tickSchema = v.strictObject({ force: v.optional(v.boolean("expected true or false")) });
const maintainSchema = v.strictObject({ forceRotate: v.optional(v.boolean("expected true or false")) });

/** The admin calls of a client, plus the unchecked tick and maintain its consumers use. */
export interface Admin {
  createQueue(name: string, settings?: QueueSettings): Promise<{ created: boolean; queue: QueueInfo }>;
  updateQueue(name: string, settings: QueueSettings): Promise<QueueInfo>;
  dropQueue(name: string): Promise<boolean>;
  listQueues(): Promise<QueueInfo[]>;
  tick(queue: string, options?: { force?: boolean }): Promise<string | null>;
  maintain(queue?: string, options?: { forceRotate?: boolean }): Promise<MaintainReport[]>;
  /** Every duration in milliseconds (`lastTickAgeMs`, `lagMs`, `polledAgoMs`, `retention`). */
  status(options?: StatusOptions): Promise<QueueStatus[]>;
  /** Advances one queue's ticker; the new tick id or null. */
  tickOne(queue: string, force: boolean): Promise<string | null>;
  /** A consumer's tick of one queue: its id (or null), and busy when another session held the ticker. */
  ticked(queue: string, exec?: Executor): Promise<Ticked>;
  /** Maintains one queue. */
  maintainOne(queue: string, forceRotate: boolean): Promise<MaintainReport>;
}

/** The admin calls over `driver` in `schema`. */
export function admin(driver: Driver, schema: string): Admin {
  const db = engine(driver, schema);
  const tickOne = async (queue: string, force: boolean): Promise<string | null> => {
    checkName("queue", queue);
    return (await db.tick({ queue, force })).tick;
  };
  // A worker's tick, on the pool: it commits without waiting for the WAL flush (engine Commit).
  // On `exec` when given (a woken worker's tick, written with its batch's BEGIN: Driver.transactionAfter).
  const ticked = async (queue: string, exec?: Executor): Promise<Ticked> => {
    const r = await (exec ? engine(exec, schema) : db).tick({ queue, force: false }, "async");
    return { tick: r.tick, busy: r.reason === "busy" };
  };
  const maintainOne = (queue: string, forceRotate: boolean): Promise<MaintainReport> => db.maintain({ queue, forceRotate });
  const listQueues = async (): Promise<QueueInfo[]> => (await db.listQueues({})).map(infoInMs);
  return {
    async createQueue(name, settings = {}) {
      checkName("queue", name);
      const wanted = queueSettings(settings, true);
      const r = await db.createQueue({ queue: name, settings: wanted });
      if (!r.created) sameSettings(name, wanted, r.queue);
      return { created: r.created, queue: infoInMs(r.queue) };
    },
    async updateQueue(name, settings) {
      checkName("queue", name);
      return infoInMs(await db.updateQueue({ queue: name, settings: queueSettings(settings, false) }));
    },
    async dropQueue(name) {
      checkName("queue", name);
      return (await db.dropQueue({ queue: name })).dropped;
    },
    listQueues,
    tick: async (queue, opts) => await tickOne(queue, parse(tickSchema, opts, "tick options").force ?? false),
    async maintain(queue, opts) {
      const force = parse(maintainSchema, opts, "maintain options").forceRotate ?? false;
      if (queue !== undefined) return [await maintainOne(checkName("queue", queue), force)];
      const out: MaintainReport[] = [];
      for (const q of await listQueues()) out.push(await maintainOne(q.name, force));
      return out;
    },
    status: (opts) => status(driver, schema, opts),
    tickOne,
    ticked,
    maintainOne,
  };
}
