/**
 * Typed event maps: per queue, each event type with the Standard Schema of
 * its payload (valibot, zod, arktype…). From the map, `send` accepts only the
 * queue's types with their payloads, handlers receive a union discriminated
 * on `type`, and `on: { FileCreated(ev, tx) {…} }` handles each type on its own.
 *
 * @example
 * ```ts
 * import type { EventOf, SendEventOf } from "keyq";
 * import * as v from "valibot";
 * const files = { FileCreated: v.object({ path: v.string() }), FileDeleted: v.object({ path: v.string() }) };
 * type FileEvent = EventOf<typeof files>; // { type: "FileCreated"; payload: { path: string }; … } | …
 * const out: SendEventOf<typeof files> = { type: "FileDeleted", payload: { path: "/a" }, key: "tenant-1" };
 * const describe = (ev: FileEvent): string => `${ev.type} ${ev.payload.path}`;
 * console.log(out.type, typeof describe);
 * ```
 *
 * @module
 */

import type { Consumer, OrderedConsumer, PerEventOnly, StrictOrderedConsumer } from "../kinds/consumer.ts";
import type { PayloadSchema } from "../payload.ts";
import type {
  BatchContext,
  BatchOptions,
  BatchReport,
  HandlerContext,
  HandlerTx,
  KeyqEvent,
  RunOptions,
  RunReport,
  SendInput,
  SlotAssignment,
  WorkOptions,
} from "../types.ts";

/** The event types of one queue: each type's name with the Standard Schema of its payload. */
export type EventTypes = Record<string, PayloadSchema>;

/** Typed queues: each queue's name with its event types (`keyq(driver, { events })`). */
export type EventMap = Record<string, EventTypes>;

/** What a Standard Schema declares as its types (valibot, zod and arktype declare them). */
export type DeclaredTypes<S> = S extends { readonly "~standard": { readonly types?: infer T } } ? NonNullable<T> : never;

/** The payload a schema accepts (its input type); `unknown` for a schema that declares none. */
export type SchemaInput<S> = DeclaredTypes<S> extends { readonly input: infer I } ? I : unknown;

/** The payload a schema produces (its output type); `unknown` for a schema that declares none. */
export type SchemaOutput<S> = DeclaredTypes<S> extends { readonly output: infer O } ? O : unknown;

/** The names of a queue's event types. */
export type EventType<M extends EventTypes> = keyof M & string;

/** An event `send` accepts for a typed queue: one of its types, with that type's payload. */
export type SendEventOf<M extends EventTypes> = {
  [T in EventType<M>]: Omit<SendInput, "type" | "payload"> & { type: T; payload: SchemaInput<M[T]> };
}[EventType<M>];

/** The event of type `T` as a handler receives it (its payload parsed by the type's schema). */
export type EventOfType<M extends EventTypes, T extends EventType<M>> = Omit<KeyqEvent, "type" | "payload"> & {
  type: T;
  payload: SchemaOutput<M[T]>;
};

/** An event of a typed queue as handlers receive it: a union discriminated on `type`. */
export type EventOf<M extends EventTypes> = { [T in EventType<M>]: EventOfType<M, T> }[EventType<M>];

/** One handler per event type: `on: { FileCreated(ev, tx) {…}, FileDeleted(ev, tx) {…} }`. */
export type OnHandlers<M extends EventTypes> = {
  [T in EventType<M>]: (event: EventOfType<M, T>, tx: HandlerTx, ctx: HandlerContext) => Promise<void> | void;
};

/** The handler options of a typed consumer: give exactly one of `handler`, `on` or `handleBatch`. */
export interface TypedHandlers<M extends EventTypes> {
  /** Called once per event, in order: `switch (ev.type)` narrows the payload. */
  handler?: (event: EventOf<M>, tx: HandlerTx, ctx: HandlerContext) => Promise<void> | void;
  /** One handler per event type (every type of the queue), called once per event, in order. */
  on?: OnHandlers<M>;
  /** Called once per batch with all its events of known types (the others fail with `UNKNOWN_EVENT_TYPE`). */
  handleBatch?: (events: EventOf<M>[], ctx: BatchContext) => Promise<void> | void;
  /** Called for each failed event (logging), including events of a type the map does not know. */
  onError?: (error: unknown, event: KeyqEvent) => void;
}

/** The handler options a typed consumer types its own way. */
export type HandlerKeys = "handler" | "handleBatch" | "onError";

/** `batch` options of a typed consumer. */
export type TypedBatchOptions<M extends EventTypes> = Omit<BatchOptions, HandlerKeys> & TypedHandlers<M>;
/** `run` options of a typed consumer. */
export type TypedRunOptions<M extends EventTypes> = Omit<RunOptions, HandlerKeys> & TypedHandlers<M>;
/** `work` options of a typed consumer. */
export type TypedWorkOptions<M extends EventTypes> = Omit<WorkOptions, HandlerKeys> & TypedHandlers<M>;

/** The consuming calls of a typed consumer; `X` are the kind's own options (an ordered consumer's `worker`/`workers`). */
export interface TypedCalls<M extends EventTypes, X = Record<never, never>> {
  /** Consumes one batch in one transaction. */
  batch(options: TypedBatchOptions<M> & X): Promise<BatchReport>;
  /** Ticks, maintains, then consumes batches until the budget or the backlog ends. */
  run(options: TypedRunOptions<M> & X): Promise<RunReport>;
  /** Loops `run` with polling back-off until `signal` aborts. */
  work(options: TypedWorkOptions<M> & X): Promise<RunReport>;
}

/** A consumer of a typed queue: handlers get the queue's event union. */
export type TypedConsumer<M extends EventTypes> = Omit<Consumer, keyof TypedCalls<M>> & TypedCalls<M>;

/** A Tier B ordered consumer of a typed queue; its calls also take `worker`/`workers`. */
export type TypedOrderedConsumer<M extends EventTypes> = Omit<OrderedConsumer, keyof TypedCalls<M>> & TypedCalls<M, SlotAssignment>;

/** A Tier B ordered consumer of a typed queue with `onFailure: "pause"`: per-event handlers only (`handler` or `on`). */
export type TypedStrictOrderedConsumer<M extends EventTypes> = Omit<StrictOrderedConsumer, keyof TypedCalls<M>> & TypedCalls<M, SlotAssignment & PerEventOnly>;

/** The queues of `E` that have event types. */
export type TypedQueue<E extends EventMap> = keyof E & string;

/** What `send` takes for queue `Q`: a typed event for a typed queue, else `SendInput<P>`. */
export type SendArg<E extends EventMap, Q extends string, P> = Q extends TypedQueue<E> ? SendEventOf<E[Q]> : SendInput<P>;
