/**
 * `keyq(driver, options)`: the client. Small surface: queues, producer,
 * ticker, maintenance, and consumers.
 *
 * @module
 */

import * as v from "valibot";
import { type Admin, admin } from "./ops/admin.ts";
import type { ConsumerContext } from "./batch/batch.ts";
import { type ConsumerOptions, type ExclusiveOptions, exclusiveOptions, type OrderedOptions, orderedOptions, plainOptions } from "./kinds/options.ts";
import {
  type Consumer,
  type ConsumerHandle,
  makeConsumer,
  type OrderedConsumer,
  type OrderedHandle,
  type StrictOrderedConsumer,
  withSlots,
} from "./kinds/consumer.ts";
import { type DeadLetters, deadLetters } from "./ops/dlq.ts";
import { type LogCalls, logCalls } from "./ops/positions.ts";
import { type Controls, controls } from "./ops/controls.ts";
import { type Driver, type Executor, transactional, type TxDriver } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { exclusiveKind, orderedKind, plainKind } from "./kinds/kinds.ts";
import { migrate, migrationSql } from "./engine/migrate.ts";
import type { PayloadSchema, SchemaFor } from "./payload.ts";
import { dispatching, schemaFor } from "./events/dispatch.ts";
import type { EventMap, EventTypes, SendArg, TypedConsumer, TypedOrderedConsumer, TypedQueue, TypedStrictOrderedConsumer } from "./events/types.ts";
import { send, sendBatch } from "./produce/producer.ts";
import { grant, grants, revoke } from "./roles/grants.ts";
import type {
  Duration,
  GrantInput,
  MaintainReport,
  MigrateResult,
  QueueInfo,
  QueueSettings,
  QueueStatus,
  RevokeInput,
  RoleGrants,
  SendInput,
  SendOptions,
  SendResult,
} from "./types.ts";
import { txExecutor } from "./produce/tx.ts";
import { checkSchemaName, parse } from "./validate.ts";
import { type Hub, hub, type Logger, loggerObserver, type Observer } from "./observe/observer.ts";

/** Options of `keyq()`. */
export interface KeyqOptions<E extends EventMap = EventMap> {
  /** The Postgres schema holding the engine (default `"keyq"`). */
  schema?: string;
  /** Payload schemas per queue name, checked at send and at receive. */
  payloads?: Record<string, PayloadSchema>;
  /**
   * Typed queues: per queue, each event type with the Standard Schema of its
   * payload, e.g. `{ files: { FileCreated: v.object({ path: v.string() }) } }`.
   * `send` then takes only those types with their payloads (checked at
   * compile time and at run time), handlers get a union discriminated on
   * `type`, and `on: { FileCreated(ev, tx) {…} }` is available. At receive,
   * an event of another type fails with `UNKNOWN_EVENT_TYPE` (retried by the
   * queue's policy, then dead-lettered with that code). A queue is either
   * in `events` or in `payloads`, not both; other queues stay untyped.
   */
  events?: E;
  /** Observers of sends, batches, handler calls and workers (e.g. `keyq/otel`); more can be added with `observe()`. */
  observers?: Observer[];
  /** A logger (`console` fits) that hears batches rolled back, failures, retries, dead letters and workers starting and stopping. */
  logger?: Logger;
}

/**
 * The calls of a keyq client that need no interactive transaction: queues,
 * producing, inspecting, operating, and consumer handles (subscribe, seek,
 * unsubscribe). It is what `keyq()` returns over a driver without
 * transactions (Neon's HTTP `neon()`); {@link Keyq} adds `migrate`,
 * `transaction` and the consuming calls. Log calls (seek, history,
 * replayKey) and operator controls (pause, resume, settleHead, blocked,
 * unsubscribe) are in LogCalls and Controls.
 */
export interface KeyqBase<E extends EventMap = Record<never, never>> extends LogCalls, Controls {
  /** The engine's schema. */
  readonly schema: string;
  /** The driver this client uses. */
  readonly driver: Driver;
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
  /**
   * Appends one event; pass `{ tx }` to append inside your transaction. On a
   * typed queue the event must be one of its types with that type's payload.
   */
  send<P = unknown, Q extends string = string>(queue: Q, event: SendArg<E, Q, P>, options?: SendOptions): Promise<SendResult>;
  /** Appends events in order in one statement; pass `{ tx }` to join your transaction. */
  sendBatch<P = unknown, Q extends string = string>(queue: Q, events: readonly SendArg<E, Q, P>[], options?: SendOptions): Promise<SendResult[]>;
  /** Advances the queue's ticker (own transaction); returns the new tick id or null. */
  tick(queue: string, options?: { force?: boolean }): Promise<string | null>;
  /** Rotation and housekeeping for one queue or all; skips queues another caller holds. */
  maintain(queue?: string, options?: { forceRotate?: boolean }): Promise<MaintainReport[]>;
  /** A plain consumer's handle (subscribe, seek, unsubscribe); consuming needs a driver with transactions. */
  consumer(queue: string, name: string, options?: ConsumerOptions): ConsumerHandle;
  /** A Tier A exclusive consumer's handle; consuming needs a driver with transactions. */
  exclusive(queue: string, name: string, options?: ExclusiveOptions): ConsumerHandle;
  /** A Tier B ordered consumer's handle (with slotOf and blockedKeys); consuming needs a driver with transactions. */
  ordered(queue: string, name: string, options: OrderedOptions): OrderedHandle;
  /** Dead letters: list, count, replay, replay a key in order, purge. */
  readonly dlq: DeadLetters;
  /**
   * Backlog, tick age and rotation per queue; lag, retries, dead letters,
   * blocked keys and stale cursors per consumer and slot. With `queue`, an
   * unknown queue throws `QUEUE_NOT_FOUND`. Durations are milliseconds
   * (`lastTickAgeMs`, `lagMs`, `polledAgoMs`, `retention`), the unit of the
   * `status --check` thresholds and of every duration keyq takes.
   */
  status(options?: { queue?: string; staleAfter?: Duration }): Promise<QueueStatus[]>;
  /**
   * Lets a Postgres role produce to queues, consume as consumers and/or
   * operate (docs/roles.md); the schema owner only. Idempotent; resolves to
   * the role's grants. `PERMISSION_DENIED` for any other caller,
   * `ROLE_NOT_FOUND` for an unknown role.
   */
  grant(input: GrantInput): Promise<RoleGrants>;
  /** Takes grants back (`all: true`: every one of the role); the schema owner only. */
  revoke(input: RevokeInput): Promise<RoleGrants>;
  /** Every role's grants (the owner or an operator). */
  grants(): Promise<RoleGrants[]>;
  /**
   * Adds an observer of this client's sends, batches, handler calls and
   * workers (consumers made before included); returns the function that
   * removes it.
   */
  observe(observer: Observer): () => void;
}

/**
 * The keyq client over a driver with interactive transactions (every
 * adapter but Neon's HTTP `neon()`); `E` is the typed event map given to
 * `keyq()`. Adds to {@link KeyqBase} `migrate`, `transaction` and consumers
 * that consume.
 */
export interface Keyq<E extends EventMap = Record<never, never>> extends KeyqBase<E> {
  /** The driver this client uses. */
  readonly driver: TxDriver;
  /** Applies pending engine migrations (idempotent, safe concurrently). */
  migrate(): Promise<MigrateResult>;
  /**
   * Runs `fn` in one transaction of the driver (BEGIN … COMMIT, ROLLBACK
   * when `fn` throws) and resolves to what it returned: for your own work,
   * e.g. your writes and `send(…, { tx })` committed together.
   */
  transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T>;
  /** A plain consumer: one cursor reading every event in order (typed handlers on a typed queue). */
  consumer<Q extends TypedQueue<E>>(queue: Q, name: string, options?: ConsumerOptions): TypedConsumer<E[Q]>;
  /** A plain consumer: one cursor reading every event in order. */
  consumer<P = unknown>(queue: string, name: string, options?: ConsumerOptions): Consumer<P>;
  /** Tier A exclusive consumer of a typed queue. */
  exclusive<Q extends TypedQueue<E>>(queue: Q, name: string, options?: ExclusiveOptions): TypedConsumer<E[Q]>;
  /**
   * Tier A: an exclusive consumer shared by any number of workers; at most
   * one worker processes a key at any instant; no order promise.
   */
  exclusive<P = unknown>(queue: string, name: string, options?: ExclusiveOptions): Consumer<P>;
  /** Tier B ordered consumer of a typed queue with the pause policy (strict order): per-event handlers only. */
  ordered<Q extends TypedQueue<E>>(queue: Q, name: string, options: OrderedOptions & { onFailure: "pause" }): TypedStrictOrderedConsumer<E[Q]>;
  /** Tier B ordered consumer of a typed queue. */
  ordered<Q extends TypedQueue<E>>(queue: Q, name: string, options: OrderedOptions): TypedOrderedConsumer<E[Q]>;
  /** Tier B ordered consumer with the pause policy (strict order per key): per-event handlers only. */
  ordered<P = unknown>(queue: string, name: string, options: OrderedOptions & { onFailure: "pause" }): StrictOrderedConsumer<P>;
  /**
   * Tier B: an ordered consumer with N fixed slots; key K always goes to
   * slot `(hashtextextended(K, 0) % N + N) % N`, one worker per slot, FIFO
   * within a key. N is persisted; another N is rejected.
   */
  ordered<P = unknown>(queue: string, name: string, options: OrderedOptions): OrderedConsumer<P>;
}

export type { ConsumerOptions, ExclusiveOptions, OrderedOptions } from "./kinds/options.ts";

const isSchema = (s: unknown): boolean => typeof (s as PayloadSchema | null)?.["~standard"]?.validate === "function";

const optionsSchema = v.strictObject({
  schema: v.optional(v.string("expected a string")),
  observers: v.optional(v.array(v.custom<Observer>((o) => typeof o === "object" && o !== null, "expected an observer object"))),
  logger: v.optional(v.custom<Logger>((o) => typeof o === "object" && o !== null, "expected a logger such as console")),
  payloads: v.optional(v.record(v.string(), v.custom<PayloadSchema>(isSchema, "expected a Standard Schema (valibot, zod, arktype…) per queue"))),
  events: v.optional(v.record(
    v.string(),
    v.record(v.string(), v.custom<PayloadSchema>(isSchema, "expected a Standard Schema (valibot, zod, arktype…) per event type")),
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

/** The consumer factories of a client, untyped (client.ts applies the overloads). */
interface Factories {
  consumer(queue: string, name: string, options?: ConsumerOptions): Consumer;
  exclusive(queue: string, name: string, options?: ExclusiveOptions): Consumer;
  ordered(queue: string, name: string, options: OrderedOptions): OrderedConsumer;
}

/** The consumer factories of a client. */
function consumers(
  driver: Driver,
  schema: string,
  schemaOf: (queue: unknown) => PayloadSchema | undefined,
  typesOf: (queue: unknown) => EventTypes | undefined,
  a: Admin,
  obs: Hub,
): Factories {
  const ctx = (queue: string): ConsumerContext => ({
    driver,
    schema,
    queue,
    payloadSchema: schemaOf(queue),
    tick: (q, exec) => a.ticked(q, exec),
    maintain: (q) => a.maintainOne(q, false),
  });
  // Typed queues check types and payloads in the handler wrapper (events/dispatch.ts); `on:` works on every queue.
  const typed = <C extends Consumer>(queue: string, c: C): C => dispatching(c, queue, typesOf(queue));
  return {
    consumer: (queue, name, opts) => {
      const settings = plainOptions(opts);
      const c = ctx(queue);
      return typed(queue, makeConsumer(c, name, plainKind({ ctx: c, queue, name, settings }), obs));
    },
    exclusive: (queue, name, opts) => {
      const o = exclusiveOptions(opts);
      checkFenced(driver, o.kind.fenced);
      const c = ctx(queue);
      return typed(queue, makeConsumer(c, name, exclusiveKind({ ctx: c, queue, name, settings: o.settings }, o.kind), obs));
    },
    ordered: (queue, name, opts) => {
      const o = orderedOptions(opts);
      checkFenced(driver, o.kind.fenced);
      const c = ctx(queue);
      return typed(queue, withSlots(c, makeConsumer(c, name, orderedKind({ ctx: c, queue, name, settings: o.settings }, o.kind), obs), o.kind.slots));
    },
  };
}

/**
 * Creates a keyq client over a driver adapter.
 *
 * @example
 * ```ts
 * import { keyq } from "@keyq/keyq";
 * import { fromPGlite } from "@keyq/keyq/pglite";
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
export function keyq<E extends EventMap = Record<never, never>>(driver: TxDriver, options?: KeyqOptions<E>): Keyq<E>;
/**
 * Creates a keyq client over a driver without interactive transactions
 * (Neon's HTTP `neon()`): it produces, inspects and operates; `migrate`,
 * `transaction` and consuming need a {@link TxDriver}.
 *
 * @example
 * ```ts
 * import { keyq } from "@keyq/keyq";
 * import { fromNeonHttp, type NeonHttpLike } from "@keyq/keyq/neon";
 *
 * declare const sql: NeonHttpLike; // neon(url) from @neondatabase/serverless
 * const q = keyq(fromNeonHttp(sql));
 * await q.send("files", { type: "FileCreated", payload: { path: "/a" }, key: "tenant-1" });
 * console.log(await q.status({ queue: "files" }));
 * ```
 */
export function keyq<E extends EventMap = Record<never, never>>(driver: Driver, options?: KeyqOptions<E>): KeyqBase<E>;
export function keyq<E extends EventMap = Record<never, never>>(driver: Driver, options: KeyqOptions<E> = {}): Keyq<E> {
  const o = parse(optionsSchema, options, "keyq options");
  const schema = checkSchemaName(o.schema ?? "keyq");
  if (!driver || typeof driver.query !== "function") {
    throw new KeyqError("INVALID_INPUT", "keyq() needs a driver adapter such as fromPostgresJs(sql) or fromPGlite(db).", {
      field: "driver",
    });
  }
  const payloads = (o.payloads ?? {}) as Record<string, PayloadSchema>;
  const events = (o.events ?? {}) as EventMap;
  for (const queue of Object.keys(events)) {
    if (Object.hasOwn(payloads, queue)) {
      throw new KeyqError(
        "INVALID_INPUT",
        `Queue "${queue}" is in both "payloads" and "events" of keyq options; keep it in events (a schema per event type).`,
        {
          field: `payloads.${queue}`,
        },
      );
    }
  }
  // Own entries only: a queue named "constructor" has no schema, nor does a non-string name.
  const own = <T>(m: Record<string, T>, queue: unknown): T | undefined => typeof queue === "string" && Object.hasOwn(m, queue) ? m[queue] : undefined;
  const schemaOf = (queue: unknown): PayloadSchema | undefined => own(payloads, queue);
  const typesOf = (queue: unknown): EventTypes | undefined => own(events, queue);
  /** The producer's schema lookup for `queue`: per type on a typed queue, one schema per queue otherwise. */
  const sendSchema = (queue: string): SchemaFor | undefined => {
    const types = typesOf(queue);
    if (types) return schemaFor(queue, types);
    const s = schemaOf(queue);
    return s && (() => s);
  };
  const exec = (opts: SendOptions | undefined, what: string): Executor => {
    const { tx } = parse(sendOptionsSchema, opts, what);
    return tx === undefined ? driver : txExecutor(driver, tx);
  };
  const a = admin(driver, schema);
  const obs = hub(o.observers ?? []);
  if (o.logger) obs.add(loggerObserver(o.logger));
  /** Runs one send through the observers (a producer span stores its trace with the events). */
  const sending = async <T extends SendResult | SendResult[]>(
    queue: string,
    count: number,
    batch: boolean,
    call: (trace: string | null) => Promise<T>,
  ): Promise<T> => {
    if (!obs.active) return await call(null);
    const info = { queue, count, batch };
    try {
      const r = await obs.send(info, call);
      obs.emit({ type: "sent", send: info, ids: Array.isArray(r) ? r.map((x) => x.id) : [r.id] });
      return r;
    } catch (error) {
      obs.emit({ type: "send.failed", send: info, error });
      throw error;
    }
  };
  return {
    schema,
    driver: driver as TxDriver, // a driver without transactions gets the KeyqBase type; its consuming calls refuse at run time
    migrate: () => migrate(driver, schema),
    transaction: (fn) => transactional(driver).transaction(fn),
    migrationSql: () => migrationSql(schema),
    createQueue: a.createQueue,
    updateQueue: a.updateQueue,
    dropQueue: a.dropQueue,
    listQueues: a.listQueues,
    send: async (queue: string, event: SendInput, opts?: SendOptions) => {
      const e = exec(opts, "send options");
      return await sending(queue, 1, false, (trace) => send(e, schema, queue, event, sendSchema(queue), trace));
    },
    sendBatch: async (queue: string, events: readonly SendInput[], opts?: SendOptions) => {
      const e = exec(opts, "sendBatch options");
      const n = Array.isArray(events) ? events.length : 0;
      return await sending(queue, n, true, (trace) => sendBatch(e, schema, queue, events, sendSchema(queue), trace));
    },
    tick: a.tick,
    maintain: a.maintain,
    // The factories are untyped; the Keyq overloads type them per kind and queue.
    ...(consumers(driver, schema, (queue) => (typesOf(queue) ? undefined : schemaOf(queue)), typesOf, a, obs) as unknown as Pick<Keyq<E>, keyof Factories>),
    dlq: deadLetters(driver, schema),
    status: a.status,
    grant: (input) => grant(driver, schema, input),
    revoke: (input) => revoke(driver, schema, input),
    grants: () => grants(driver, schema),
    observe: (observer) => {
      if (typeof observer !== "object" || observer === null) {
        throw new KeyqError("INVALID_INPUT", "observe() takes an observer object with on, send or handle hooks.", { field: "observer" });
      }
      return obs.add(observer);
    },
    ...logCalls(driver, schema),
    ...controls(driver, schema),
  };
}
