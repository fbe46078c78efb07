/**
 * The run-time half of typed event maps, kept outside the batch machinery:
 * the producer asks `schemaFor` for a type's schema (an unknown type is
 * refused before anything is written), and a typed consumer's options are
 * rewritten before they reach `batch`/`run`/`work` — an `on:` map becomes one
 * handler, and every handler sees only events of known types with payloads
 * parsed by their type's schema. An event of an unknown type (or whose
 * payload its schema refuses) fails like a handler error: retried by the
 * queue's policy (a newer worker of a rolling deploy may know the type), then
 * dead-lettered with `error.code` `"UNKNOWN_EVENT_TYPE"` (or `"INVALID_PAYLOAD"`).
 *
 * @module
 */

import { KeyqError } from "../errors.ts";
import { checkPayload, plainEvent, type SchemaFor } from "../payload.ts";
import type { BatchContext, KeyqEvent } from "../types.ts";
import { closest, show } from "../validate.ts";
import type { EventTypes } from "./types.ts";

/** The refusal of an event type the queue's map does not list. */
export function unknownType(queue: string, types: readonly string[], type: unknown, where: string): KeyqError {
  const best = typeof type === "string" ? closest(type, types) : undefined;
  return new KeyqError(
    "UNKNOWN_EVENT_TYPE",
    `The type of ${where} is ${show(type)}, not one of queue "${queue}"'s event types (${types.join(", ")})` +
      `${best ? `; did you mean "${best}"?` : ""}; add it to events.${queue} in keyq() or fix the type.`,
    { queue, type, known: [...types], suggestion: best },
  );
}

/** The schema lookup of a typed queue. */
export function schemaFor(queue: string, types: EventTypes): SchemaFor {
  const names = Object.keys(types);
  return (type, where) => {
    if (typeof type === "string" && Object.hasOwn(types, type)) return types[type];
    throw unknownType(queue, names, type, where);
  };
}

type Fn = (...args: never[]) => unknown;
type AnyHandler = (event: KeyqEvent, ...rest: unknown[]) => unknown;

/** Checks an `on:` map: an object of functions, each named after a type of the queue (when typed). */
function checkOn(queue: string, on: unknown, types: EventTypes | undefined): Record<string, AnyHandler> {
  if (typeof on !== "object" || on === null || Array.isArray(on)) {
    throw new KeyqError("INVALID_INPUT", `Option "on" is ${show(on)}; give an object of handlers per event type, like { FileCreated(ev, tx) {…} }.`, {
      field: "on",
      value: on,
    });
  }
  const names = types ? Object.keys(types) : undefined;
  for (const [type, fn] of Object.entries(on)) {
    if (names && !names.includes(type)) {
      const best = closest(type, names);
      throw new KeyqError(
        "INVALID_INPUT",
        `Option "on.${type}": "${type}" is not an event type of queue "${queue}"; ${best ? `did you mean "${best}"? ` : ""}Its types: ${names.join(", ")}.`,
        { field: `on.${type}`, suggestion: best },
      );
    }
    if (typeof fn !== "function") {
      throw new KeyqError("INVALID_INPUT", `Option "on.${type}" is ${show(fn)}; give a function (event, tx, { signal, deadline }) => ….`, {
        field: `on.${type}`,
      });
    }
  }
  return on as Record<string, AnyHandler>;
}

/**
 * Rewrites the options of `batch`, `run` or `work` of a consumer of `queue`:
 * `on` becomes a handler; with `types` (a typed queue) every handler gets
 * events of known types with parsed payloads. Other options pass unchanged
 * (and are checked where they always were).
 */
export function dispatchOptions(queue: string, types: EventTypes | undefined, options: unknown): unknown {
  if (typeof options !== "object" || options === null) return options;
  const { on, ...rest } = options as Record<string, unknown>;
  if (on === undefined && !types) return options;
  if (on !== undefined) {
    if (rest.handler !== undefined || rest.handleBatch !== undefined) {
      throw new KeyqError("INVALID_INPUT", `Give exactly one of "handler", "handleBatch" or "on"; "on" already handles each event type.`, {
        field: "on",
      });
    }
    const handlers = checkOn(queue, on, types);
    const names = Object.keys(handlers);
    rest.handler = (ev: KeyqEvent, ...more: unknown[]) => {
      const h = Object.hasOwn(handlers, ev.type) ? handlers[ev.type] : undefined;
      if (!h) throw unknownType(queue, names, ev.type, `event ${ev.id}`);
      return h(ev, ...more);
    };
  }
  if (!types) return rest;
  const pick = schemaFor(queue, types);
  /** The event with its payload parsed by its type's schema; throws for an unknown type or a refused payload. */
  const parsed = async (ev: KeyqEvent): Promise<KeyqEvent> => {
    const where = `event ${ev.id}`;
    const payload = await checkPayload(pick(ev.type, where), ev.payload, `${where} (queue "${queue}", type "${ev.type}")`);
    return payload === ev.payload ? ev : { ...plainEvent(ev), payload };
  };
  if (typeof rest.handler === "function") {
    const h = rest.handler as AnyHandler;
    rest.handler = async (ev: KeyqEvent, ...more: unknown[]) => await h(await parsed(ev), ...more);
  }
  if (typeof rest.handleBatch === "function") {
    const hb = rest.handleBatch as (events: KeyqEvent[], ctx: BatchContext) => unknown;
    rest.handleBatch = async (events: KeyqEvent[], ctx: BatchContext) => {
      const original = new Map<KeyqEvent, KeyqEvent>();
      const known: KeyqEvent[] = [];
      for (const ev of events) {
        try {
          const p = await parsed(ev);
          original.set(p, ev);
          known.push(p);
        } catch (err) {
          ctx.fail(ev, err);
        }
      }
      // fail() knows the batch's own event objects: map a parsed copy back to its original.
      const typed: BatchContext = Object.create(ctx);
      typed.fail = (ev, err) => ctx.fail(original.get(ev) ?? ev, err);
      return await hb(known, typed);
    };
  }
  return rest;
}

/** Wraps the consuming calls of `consumer` with `dispatchOptions`. */
export function dispatching<C extends { batch: Fn; run: Fn; work: Fn }>(consumer: C, queue: string, types: EventTypes | undefined): C {
  const wrap = (call: Fn) => async (options: unknown) => await (call as (o: unknown) => unknown)(dispatchOptions(queue, types, options));
  return Object.assign(consumer, { batch: wrap(consumer.batch), run: wrap(consumer.run), work: wrap(consumer.work) });
}
