/**
 * `keyq(driver, options)`: the client. Small surface: queues, producer,
 * ticker, maintenance, and consumers.
 *
 * @module
 */

import * as v from "valibot";
import { type Admin, admin } from "./ops/admin.ts";
import type { ConsumerContext } from "./batch/batch.ts";
import { type ConsumerOptions, exclusiveOptions, type ExclusiveOptions, orderedOptions, type OrderedOptions, plainOptions } from "./kinds/options.ts";
import { type Consumer, makeConsumer, type OrderedConsumer, withSlots } from "./kinds/consumer.ts";
import { type DeadLetters, deadLetters } from "./ops/dlq.ts";
import { type LogCalls, logCalls } from "./ops/positions.ts";
import { type Controls, controls } from "./ops/controls.ts";
import type { Driver, Executor } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { exclusiveKind, orderedKind, plainKind } from "./kinds/kinds.ts";
import { migrate, migrationSql } from "./engine/migrate.ts";
import type { PayloadSchema } from "./payload.ts";
import { send, sendBatch } from "./produce/producer.ts";
import type {
  Duration,
  MaintainReport,
  MigrateResult,
  QueueInfo,
  QueueStatus,
  QueueSettings,
  SendInput,
  SendOptions,
  SendResult,
} from "./types.ts";
import { txExecutor } from "./produce/tx.ts";
import { checkSchemaName, parse } from "./validate.ts";

/** Options of `keyq()`. */
export interface KeyqOptions {
  /** The Postgres schema holding the engine (default `"keyq"`). */
  schema?: string;
  /** Payload schemas per queue name, checked at send and at receive. */
  payloads?: Record<string, PayloadSchema>;
}

/** The keyq client. Log calls (seek, history, replayKey) and operator controls (pause, resume, settleHead, blocked, unsubscribe) are in LogCalls and Controls. */
export interface Keyq extends LogCalls, Controls {
  /** The engine's schema. */
  readonly schema: string;
  /** The driver this client uses. */
  readonly driver: Driver;
  /** Applies pending engine migrations (idempotent, safe concurrently). */
  migrate(): Promise<MigrateResult>;
  /** The engine as one SQL script, for DBAs. */
  migrationSql(): string;
  /**
   * Creates a queue if it does not exist; `created` says which happened. An
   * existing queue is returned as it is when the given settings match its own
   * (or none are given); different settings throw `QUEUE_EXISTS` (use
   * `updateQueue`).
   */
  createQueue(name: string, settings?: QueueSettings): Promise<{ created: boolean; queue: QueueInfo }>;
  /** Changes settings of an existing queue (`tables` is fixed at creation). */
  updateQueue(name: string, settings: QueueSettings): Promise<QueueInfo>;
  /** Drops a queue with its events and consumers; false when it did not exist (idempotent, no error). */
  dropQueue(name: string): Promise<boolean>;
  /** Every queue with its settings. */
  listQueues(): Promise<QueueInfo[]>;
  /** Appends one event; pass `{ tx }` to append inside your transaction. */
  send<P = unknown>(queue: string, event: SendInput<P>, options?: SendOptions): Promise<SendResult>;
  /** Appends events in order in one statement; pass `{ tx }` to join your transaction. */
  sendBatch<P = unknown>(queue: string, events: readonly SendInput<P>[], options?: SendOptions): Promise<SendResult[]>;
  /** Advances the queue's ticker (own transaction); returns the new tick id or null. */
  tick(queue: string, options?: { force?: boolean }): Promise<string | null>;
  /** Rotation and housekeeping for one queue or all; skips queues another caller holds. */
  maintain(queue?: string, options?: { forceRotate?: boolean }): Promise<MaintainReport[]>;
  /** A plain consumer: one cursor reading every event in order. */
  consumer<P = unknown>(queue: string, name: string, options?: ConsumerOptions): Consumer<P>;
  /**
   * Tier A: an exclusive consumer shared by any number of workers; at most
   * one worker processes a key at any instant; no order promise.
   */
  exclusive<P = unknown>(queue: string, name: string, options?: ExclusiveOptions): Consumer<P>;
  /**
   * Tier B: an ordered consumer with N fixed slots; key K always goes to
   * slot `(hashtextextended(K, 0) % N + N) % N`, one worker per slot, FIFO
   * within a key. N is persisted; another N is rejected.
   */
  ordered<P = unknown>(queue: string, name: string, options: OrderedOptions): OrderedConsumer<P>;
  /** Dead letters: list, count, replay, replay a key in order, purge. */
  readonly dlq: DeadLetters;
  /**
   * Backlog, tick age and rotation per queue; lag, retries, dead letters,
   * blocked keys and stale cursors per consumer and slot. With `queue`, an
   * unknown queue throws `QUEUE_NOT_FOUND`.
   */
  status(options?: { queue?: string; staleAfter?: Duration }): Promise<QueueStatus[]>;
}

export type { ConsumerOptions, ExclusiveOptions, OrderedOptions } from "./kinds/options.ts";

const optionsSchema = v.strictObject({
  schema: v.optional(v.string("expected a string")),
  payloads: v.optional(v.record(
    v.string(),
    v.custom<PayloadSchema>(
      (s) => typeof (s as PayloadSchema | null)?.["~standard"]?.validate === "function",
      "expected a Standard Schema (valibot, zod, arktype…) per queue",
    ),
  )),
});

const sendOptionsSchema = v.strictObject({ tx: v.optional(v.unknown()) });

/**
 * A fenced batch leases its keys or slot on a second connection while its
 * own transaction holds one: on a one-connection driver that lease would wait
 * for the batch, and the batch for the lease, until the deadline.
 */
function checkFenced(driver: Driver, fenced: boolean): void {
  const n = driver.connections;
  if (!fenced || n === undefined || n >= 2) return;
  throw new KeyqError(
    "INVALID_INPUT",
    `Option "fenced" needs a driver with at least 2 connections (a fenced batch leases on a second connection while its transaction holds one); the ${driver.name} driver has ${n}. Give the pool max: 2 or more (for pg, a Pool rather than a Client), or drop fenced.`,
    { field: "fenced", connections: n },
  );
}

/** The consumer factories of a client. */
function consumers(
  driver: Driver,
  schema: string,
  schemaOf: (queue: unknown) => PayloadSchema | undefined,
  a: Admin,
): Pick<Keyq, "consumer" | "exclusive" | "ordered"> {
  const ctx = (queue: string): ConsumerContext => ({
    driver,
    schema,
    queue,
    payloadSchema: schemaOf(queue),
    tick: async (q) => (await a.tickOne(q, false)) !== null,
    maintain: (q) => a.maintainOne(q, false),
  });
  return {
    consumer: (queue, name, opts) => {
      const settings = plainOptions(opts);
      const c = ctx(queue);
      return makeConsumer(c, name, plainKind({ ctx: c, queue, name, settings }));
    },
    exclusive: (queue, name, opts) => {
      const o = exclusiveOptions(opts);
      checkFenced(driver, o.kind.fenced);
      const c = ctx(queue);
      return makeConsumer(c, name, exclusiveKind({ ctx: c, queue, name, settings: o.settings }, o.kind));
    },
    ordered: (queue, name, opts) => {
      const o = orderedOptions(opts);
      checkFenced(driver, o.kind.fenced);
      const c = ctx(queue);
      return withSlots(c, makeConsumer(c, name, orderedKind({ ctx: c, queue, name, settings: o.settings }, o.kind)), o.kind.slots);
    },
  };
}

/**
 * Creates a keyq client over a driver adapter.
 *
 * @example
 * ```ts
 * import { keyq } from "keyq";
 * import { fromPGlite } from "keyq/pglite";
 *
 * // Any driver adapter works; here embedded PGlite (an optional peer).
 * const { PGlite } = await import("@electric-sql/pglite");
 * const q = keyq(fromPGlite(new PGlite()));
 * await q.migrate();
 * await q.createQueue("files");
 * const audit = q.consumer("files", "audit");
 * await audit.subscribe();
 * await q.send("files", { type: "FileCreated", payload: { path: "/a" }, key: "tenant-1" });
 * await audit.run({ handler: (ev) => console.log(ev.type, ev.key, ev.payload) });
 * ```
 */
export function keyq(driver: Driver, options: KeyqOptions = {}): Keyq {
  const o = parse(optionsSchema, options, "keyq options");
  const schema = checkSchemaName(o.schema ?? "keyq");
  if (!driver || typeof driver.query !== "function") {
    throw new KeyqError("INVALID_INPUT", "keyq() needs a driver adapter such as fromPostgresJs(sql) or fromPGlite(db).", {
      field: "driver",
    });
  }
  const payloads = (o.payloads ?? {}) as Record<string, PayloadSchema>;
  // Own entries only: a queue named "constructor" has no schema, nor does a non-string name.
  const schemaOf = (queue: unknown): PayloadSchema | undefined =>
    typeof queue === "string" && Object.hasOwn(payloads, queue) ? payloads[queue] : undefined;
  const exec = (opts: SendOptions | undefined, what: string): Executor => {
    const { tx } = parse(sendOptionsSchema, opts, what);
    return tx === undefined ? driver : txExecutor(driver, tx);
  };
  const a = admin(driver, schema);
  return {
    schema,
    driver,
    migrate: () => migrate(driver, schema),
    migrationSql: () => migrationSql(schema),
    createQueue: a.createQueue,
    updateQueue: a.updateQueue,
    dropQueue: a.dropQueue,
    listQueues: a.listQueues,
    send: async (queue, event, opts) => await send(exec(opts, "send options"), schema, queue, event, schemaOf(queue)),
    sendBatch: async (queue, events, opts) => await sendBatch(exec(opts, "sendBatch options"), schema, queue, events, schemaOf(queue)),
    tick: a.tick,
    maintain: a.maintain,
    ...consumers(driver, schema, schemaOf, a),
    dlq: deadLetters(driver, schema),
    status: a.status,
    ...logCalls(driver, schema),
    ...controls(driver, schema),
  };
}
