/**
 * Optional payload schemas. Any Standard Schema works (valibot, zod,
 * arktype…); keyq checks payloads at send and at receive time.
 *
 * @module
 */

import { KeyqError } from "./errors.ts";
import type { KeyqEvent } from "./types.ts";

/** The result shape of a Standard Schema validation. */
export type SchemaResult =
  | { readonly value: unknown; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<unknown> }> };

/**
 * A payload schema: anything implementing Standard Schema v1, such as a
 * valibot schema (`v.object({...})`).
 */
export interface PayloadSchema {
  /** The Standard Schema interface (valibot, zod, arktype…): keyq calls its `validate`. */
  readonly "~standard": {
    readonly validate: (value: unknown) => SchemaResult | Promise<SchemaResult>;
  };
}

/**
 * The payload schema of an event's type in a queue: undefined for none,
 * or throws `UNKNOWN_EVENT_TYPE` for a type a typed queue does not list.
 * `where` names the event for the message.
 */
export type SchemaFor = (type: string, where: string) => PayloadSchema | undefined;

function pathText(path: ReadonlyArray<unknown> | undefined): string {
  if (!path || path.length === 0) return "payload";
  return "payload." + path.map((p) => (typeof p === "object" && p !== null && "key" in p ? String((p as { key: unknown }).key) : String(p))).join(".");
}

/**
 * Validates `payload` against `schema` (when given) and returns the parsed
 * value; throws INVALID_PAYLOAD naming the queue, the event and the field.
 */
export async function checkPayload(
  schema: PayloadSchema | undefined,
  payload: unknown,
  where: string,
): Promise<unknown> {
  if (!schema) return payload;
  const result = await schema["~standard"].validate(payload);
  if (!result.issues) return result.value;
  const first = result.issues[0];
  throw new KeyqError(
    "INVALID_PAYLOAD",
    `The payload of ${where} does not match the queue's schema: ${pathText(first?.path)}: ${first?.message ?? "invalid"}; fix the payload or the schema.`,
    { issues: result.issues.map((i) => ({ message: i.message, path: pathText(i.path) })) },
  );
}

/**
 * An event as a plain object with every field: a received event's payload
 * and time are accessors (read on first use), which spreading does not copy.
 *
 * @example
 * ```ts
 * import { plainEvent } from "./payload.ts";
 * const ev = plainEvent({ id: "1", type: "T", key: null, payload: { a: 1 }, time: new Date(0), retry: 0 });
 * console.log(ev.payload); // { a: 1 }
 * ```
 */
export function plainEvent<P>(ev: KeyqEvent<P>): KeyqEvent<P> {
  const out: KeyqEvent<P> = { id: ev.id, type: ev.type, key: ev.key, payload: ev.payload, time: ev.time, retry: ev.retry };
  if (ev.slot !== undefined) out.slot = ev.slot;
  if (ev.trace !== undefined) out.trace = ev.trace;
  return out;
}
