/**
 * Appending events: `send` and `sendBatch`, optionally inside the caller's
 * transaction (the event commits or rolls back with the caller's writes).
 *
 * @module
 */

import * as v from "valibot";
import type { Executor } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { checkPayload, type PayloadSchema } from "./payload.ts";
import { call } from "./sql.ts";
import type { SendInput, SendResult } from "./types.ts";
import { checkName, parse, payloadJson } from "./validate.ts";

const eventSchema = v.strictObject({
  type: v.pipe(v.string("expected a string"), v.minLength(1, "expected 1–200 characters"), v.maxLength(200, "expected 1–200 characters")),
  payload: v.unknown(),
  key: v.optional(v.nullable(v.pipe(v.string("expected a string or null"), v.maxLength(1000, "expected at most 1,000 characters")))),
});

/** What the engine's `send_batch` takes per event. */
interface WireEvent {
  type: string;
  key: string | null;
  payload: unknown;
}

/** Validates one event and prepares it for the wire. */
async function prepare(
  queue: string,
  input: SendInput,
  schema: PayloadSchema | undefined,
  where: string,
): Promise<WireEvent> {
  if (typeof input === "object" && input !== null && (input as { payload?: unknown }).payload === undefined) {
    throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where} is missing; pass payload: null for an event without data.`, {
      field: "payload",
    });
  }
  const e = parse(eventSchema, input, where);
  payloadJson(e.payload, where);
  const payload = await checkPayload(schema, e.payload, `${where} (queue "${queue}")`);
  return { type: e.type, key: e.key ?? null, payload };
}

/** Appends one event and returns its id. */
export async function send(
  exec: Executor,
  schemaName: string,
  queue: string,
  input: SendInput,
  payloadSchema: PayloadSchema | undefined,
): Promise<SendResult> {
  checkName("queue", queue);
  const e = await prepare(queue, input, payloadSchema, "the event");
  const id = await call<string>(exec, schemaName, "send", [
    ["queue", "text", queue],
    ["type", "text", e.type],
    ["payload", "jsonb", payloadJson(e.payload, "the event")],
    ["key", "text", e.key],
  ]);
  return { id };
}

/** Appends many events in one statement, in array order; returns their ids in the same order. */
export async function sendBatch(
  exec: Executor,
  schemaName: string,
  queue: string,
  inputs: readonly SendInput[],
  payloadSchema: PayloadSchema | undefined,
): Promise<SendResult[]> {
  checkName("queue", queue);
  if (!Array.isArray(inputs)) {
    throw new KeyqError("INVALID_INPUT", "sendBatch expects an array of events; wrap a single event in [ ].", { field: "events" });
  }
  if (inputs.length === 0) return [];
  const wire: WireEvent[] = [];
  for (let i = 0; i < inputs.length; i++) {
    wire.push(await prepare(queue, inputs[i] as SendInput, payloadSchema, `event ${i}`));
  }
  const ids = await call<string[]>(exec, schemaName, "send_batch", [
    ["queue", "text", queue],
    ["events", "jsonb", JSON.stringify(wire)],
  ]);
  return ids.map((id) => ({ id }));
}
