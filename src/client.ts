/**
 * `keyq(driver, options)`: the client. Small surface: queues, producer,
 * ticker, maintenance, and consumers.
 *
 * @module
 */

import * as v from "valibot";
import type { ConsumerContext } from "./batch.ts";
import {
  type Consumer,
  exclusiveKind,
  makeConsumer,
  type OrderedConsumer,
  orderedKind,
  plainKind,
  withSlots,
} from "./consumer.ts";
import { type DeadLetters, deadLetters } from "./dlq.ts";
import type { Driver, Executor } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { migrate, migrationSql } from "./migrate.ts";
import type { PayloadSchema } from "./payload.ts";
import { send, sendBatch } from "./producer.ts";
import { call, fields } from "./sql.ts";
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
import { txExecutor } from "./tx.ts";
import { checkName, checkSchemaName, duration, durationMs, int, parse } from "./validate.ts";

/** Options of `keyq()`. */
export interface KeyqOptions {
  /** The Postgres schema holding the engine (default `"keyq"`). */
  schema?: string;
  /** Payload schemas per queue name, checked at send and at receive. */
  payloads?: Record<string, PayloadSchema>;
}

/** The keyq client. */
export interface Keyq {
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

/** Per-consumer overrides of the queue's retry policy. */
export interface ConsumerOptions {
  /** Failed deliveries before dead-lettering (overrides the queue's). */
  maxRetries?: number;
  /** First retry delay (overrides the queue's). */
  retryBase?: Duration;
  /** Longest retry delay (overrides the queue's). */
  retryCap?: Duration;
}

/** Options of a Tier B ordered consumer. */
export interface OrderedOptions extends ConsumerOptions {
  /** N, the fixed slot count (1–1024): the parallelism and the read-index key. */
  slots: number;
  /**
   * `"skip"` (default): a failed event is retried in its slot and later
   * events of its key may overtake it. `"pause"`: nothing later of that key is
   * delivered until the failed head is acked or dead-lettered; then the held
   * events go out in order, exactly once, without spending retries.
   */
  onFailure?: "skip" | "pause";
  /** A static worker also reads any slot not polled for this long (default 30 s). */
  helpAfter?: Duration;
  /**
   * Lease each batch's slot until the batch's deadline, committed outside
   * the batch: when a batch's session dies while a handler still runs, no
   * other worker reads the slot before that deadline (takeover waits for it
   * instead of being instant). Give it to every worker of the consumer; it
   * needs a pool of at least 2 connections. Default false.
   */
  fenced?: boolean;
}

/** Options of a Tier A exclusive consumer. */
export interface ExclusiveOptions extends ConsumerOptions {
  /**
   * Handlers are idempotent: an event whose key another worker holds is
   * acked and dropped (the brief's "contended + idempotent → ack-drop").
   * Otherwise it is deferred and delivered again later, without spending a retry.
   */
  idempotent?: boolean;
  /** How long a deferred event waits before it is offered again (default 1 s). */
  deferDelay?: Duration;
  /**
   * Lease each batch's keys until the batch's deadline, committed outside
   * the batch: when a batch's session dies while a handler still runs (an
   * admin kill, a failover), no other worker takes those keys before that
   * deadline, so calls of one key never overlap even for handlers that
   * ignore their signal. Takeover waits for the deadline instead of being
   * instant. Give it to every worker of the consumer; it needs a pool of at
   * least 2 connections. Default false.
   */
  fenced?: boolean;
}

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
const tickSchema = v.strictObject({ force: v.optional(v.boolean("expected true or false")) });
const maintainSchema = v.strictObject({ forceRotate: v.optional(v.boolean("expected true or false")) });

const settingsSchema = v.strictObject({
  tables: v.optional(int(2, 8)),
  rotationPeriod: v.optional(duration),
  tickMaxCount: v.optional(int(1, 1_000_000_000)),
  tickMaxLag: v.optional(duration),
  tickIdlePeriod: v.optional(duration),
  maxRetries: v.optional(int(0, 1_000_000)),
  retryBase: v.optional(duration),
  retryCap: v.optional(duration),
});

const consumerSchema = v.strictObject({
  maxRetries: v.optional(int(0, 1_000_000)),
  retryBase: v.optional(duration),
  retryCap: v.optional(duration),
});

const statusSchema = v.strictObject({ queue: v.optional(v.unknown()), staleAfter: v.optional(duration) });

const orderedSchema = v.strictObject({
  ...consumerSchema.entries,
  slots: int(1, 1024),
  onFailure: v.optional(v.picklist(["skip", "pause"], 'expected "skip" or "pause"')),
  helpAfter: v.optional(duration),
  fenced: v.optional(v.boolean("expected true or false")),
});

const exclusiveSchema = v.strictObject({
  ...consumerSchema.entries,
  idempotent: v.optional(v.boolean("expected true or false")),
  deferDelay: v.optional(duration),
  fenced: v.optional(v.boolean("expected true or false")),
});

/** Validates consumer overrides; durations in seconds for the engine. */
export function consumerSettings(options: unknown, schema: v.GenericSchema = consumerSchema): Record<string, unknown> {
  const o = parse(schema, options, "consumer options") as v.InferOutput<typeof consumerSchema>;
  const out: Record<string, unknown> = {};
  if (o.maxRetries !== undefined) out.maxRetries = o.maxRetries;
  if (o.retryBase !== undefined) out.retryBase = durationMs("retryBase", o.retryBase, 1)! / 1000;
  if (o.retryCap !== undefined) out.retryCap = durationMs("retryCap", o.retryCap, 1)! / 1000;
  return out;
}

/**
 * `createQueue` of an existing queue is idempotent only with the same
 * settings: a difference would otherwise be ignored without a word.
 */
function sameSettings(name: string, wanted: Record<string, number>, have: QueueInfo): void {
  for (const [k, want] of Object.entries(wanted)) {
    const got = (have as unknown as Record<string, number>)[k]!;
    if (Math.abs(got - want) > 1e-6 * Math.max(1, Math.abs(want))) {
      const unit = k === "tables" || k === "tickMaxCount" || k === "maxRetries" ? "" : " s";
      throw new KeyqError(
        "QUEUE_EXISTS",
        `Queue "${name}" already exists with ${k} ${got}${unit}, not ${want}${unit}; call updateQueue("${name}", { ${k} }) to change it, ` +
          `or createQueue without settings to use it as it is.`,
        { queue: name, field: k, existing: got, requested: want },
      );
    }
  }
}

/** Validates queue settings and converts durations to seconds for the engine. */
function settingsJson(settings: unknown, allowTables: boolean): Record<string, number> {
  const s = parse(settingsSchema, settings, "queue settings");
  if (!allowTables && s.tables !== undefined) {
    throw new KeyqError("INVALID_INPUT", `Option "tables" is fixed when a queue is created; drop and recreate the queue to change it.`, {
      field: "tables",
    });
  }
  const out: Record<string, number> = {};
  for (const [k, val] of Object.entries(s)) {
    if (val === undefined) continue;
    const isDuration = k === "rotationPeriod" || k === "tickMaxLag" || k === "tickIdlePeriod" || k === "retryBase" || k === "retryCap";
    const min = k === "rotationPeriod" || k === "retryBase" || k === "retryCap" ? 1 : 0;
    out[k] = isDuration ? durationMs(k, val as string | number, min)! / 1000 : (val as number);
  }
  return out;
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
  const tick = async (queue: string, force = false): Promise<string | null> => {
    checkName("queue", queue);
    const r = await call<{ tick: string | null }>(driver, schema, "tick", [
      ["queue", "text", queue],
      ["force", "boolean", force],
    ], fields({ tick: "string|null" }));
    return r.tick;
  };
  const maintainOne = (queue: string, forceRotate: boolean): Promise<MaintainReport> =>
    call<MaintainReport>(driver, schema, "maintain", [
      ["queue", "text", queue],
      ["force_rotate", "boolean", forceRotate],
    ], fields({ queue: "string", skipped: "boolean" }));
  const ctx = (queue: string): ConsumerContext => ({
    driver,
    schema,
    payloadSchema: schemaOf(queue),
    tick: async (q) => (await tick(q)) !== null,
    maintain: (q) => maintainOne(q, false),
  });

  return {
    schema,
    driver,
    migrate: () => migrate(driver, schema),
    migrationSql: () => migrationSql(schema),
    async createQueue(name, settings = {}) {
      checkName("queue", name);
      const wanted = settingsJson(settings, true);
      const r = await call<{ created: boolean; queue: QueueInfo }>(driver, schema, "create_queue", [
        ["queue", "text", name],
        ["settings", "jsonb", wanted],
      ]);
      if (!r.created) sameSettings(name, wanted, r.queue);
      return r;
    },
    async updateQueue(name, settings) {
      checkName("queue", name);
      return await call(driver, schema, "update_queue", [
        ["queue", "text", name],
        ["settings", "jsonb", settingsJson(settings, false)],
      ]);
    },
    async dropQueue(name) {
      checkName("queue", name);
      return (await call<{ dropped: boolean }>(driver, schema, "drop_queue", [["queue", "text", name]])).dropped;
    },
    listQueues: () => call<QueueInfo[]>(driver, schema, "list_queues"),
    send: async (queue, event, opts) => await send(exec(opts, "send options"), schema, queue, event, schemaOf(queue)),
    sendBatch: async (queue, events, opts) => await sendBatch(exec(opts, "sendBatch options"), schema, queue, events, schemaOf(queue)),
    tick: async (queue, opts) => await tick(queue, parse(tickSchema, opts, "tick options").force ?? false),
    async maintain(queue, opts) {
      const force = parse(maintainSchema, opts, "maintain options").forceRotate ?? false;
      if (queue !== undefined) return [await maintainOne(checkName("queue", queue), force)];
      const queues = await call<QueueInfo[]>(driver, schema, "list_queues");
      const out: MaintainReport[] = [];
      for (const q of queues) out.push(await maintainOne(q.name, force));
      return out;
    },
    consumer: (queue, name, opts) => {
      const c = ctx(queue);
      const settings = consumerSettings(opts ?? {});
      return makeConsumer(c, queue, name, () => plainKind(c, queue, name, settings));
    },
    exclusive: (queue, name, opts) => {
      const c = ctx(queue);
      const settings = consumerSettings(opts ?? {}, exclusiveSchema);
      const o = parse(exclusiveSchema, opts ?? {}, "exclusive consumer options");
      const deferMs = durationMs("deferDelay", o.deferDelay ?? 1000, 1)!;
      return makeConsumer(c, queue, name, () => exclusiveKind(c, queue, name, settings, o.idempotent ?? false, deferMs / 1000, o.fenced ?? false));
    },
    ordered: (queue, name, opts) => {
      const c = ctx(queue);
      const o = parse(orderedSchema, opts, "ordered consumer options");
      const settings = { ...consumerSettings(opts, orderedSchema), onFailure: o.onFailure ?? "skip" };
      const kind = {
        slots: o.slots,
        pause: o.onFailure === "pause",
        helpAfterS: durationMs("helpAfter", o.helpAfter ?? 30_000, 1)! / 1000,
        fenced: o.fenced ?? false,
      };
      return withSlots(c, makeConsumer(c, queue, name, () => orderedKind(c, queue, name, settings, kind)), o.slots);
    },
    dlq: deadLetters(driver, schema),
    async status(opts = {}) {
      const o = parse(statusSchema, opts, "status options");
      const queue = o.queue === undefined ? null : checkName("queue", o.queue);
      const rows = await call<QueueStatus[]>(driver, schema, "status", [
        ["queue", "text", queue],
        ["stale_after", "float8", durationMs("staleAfter", o.staleAfter ?? 300_000, 1)! / 1000],
      ]);
      if (queue !== null && rows.length === 0) {
        throw new KeyqError("QUEUE_NOT_FOUND", `Queue "${queue}" does not exist; create it with createQueue("${queue}") or list them with listQueues().`, {
          queue,
        });
      }
      return rows;
    },
  };
}
