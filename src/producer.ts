/**
 * Appending events: `send` and `sendBatch`, optionally inside the caller's
 * transaction (the event commits or rolls back with the caller's writes).
 *
 * @module
 */

import * as v from "valibot";
import type { Executor } from "./driver.ts";
import { engine } from "./engine.ts";
import { KeyqError } from "./errors.ts";
import { checkPayload, type PayloadSchema } from "./payload.ts";
import type { SendInput, SendResult } from "./types.ts";
import { checkJson } from "./text.ts";
import { checkName, duration, durationMs, parse, show, text } from "./validate.ts";

/** SQS's dedup window: a dedup key without a ttl stays live for 5 minutes. */
const DEFAULT_TTL_MS = 5 * 60_000;

const eventSchema = v.strictObject({
  type: text("type", 1, 200),
  payload: v.unknown(),
  key: v.optional(v.nullable(text("key", 0, 1000))),
  dedupKey: v.optional(text("dedupKey", 1, 512)),
  ttl: v.optional(duration),
});

/** What the engine's `send_batch` takes per event. */
interface WireEvent {
  type: string;
  key: string | null;
  payload: unknown;
  dedupKey?: string;
  /** Seconds. */
  ttl?: number;
}

/** Validates one event and prepares it for the wire. */
async function prepare(
  queue: string,
  input: SendInput,
  schema: PayloadSchema | undefined,
  where: string,
): Promise<WireEvent> {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new KeyqError("INVALID_INPUT", `Expected ${where} as an object like { type: "FileCreated", payload: {…} }, not ${show(input)}.`, {
      field: "event",
      value: input,
    });
  }
  if ((input as { payload?: unknown }).payload === undefined) {
    throw new KeyqError("INVALID_PAYLOAD", `The payload of ${where} is missing; pass payload: null for an event without data.`, {
      field: "payload",
    });
  }
  const e = parse(eventSchema, input, where);
  if (e.ttl !== undefined && e.dedupKey === undefined) {
    throw new KeyqError("INVALID_INPUT", `Option "ttl" of ${where} needs a "dedupKey"; add one or drop the ttl.`, { field: "ttl" });
  }
  const ttlMs = e.dedupKey === undefined ? undefined : durationMs("ttl", e.ttl ?? DEFAULT_TTL_MS, 1);
  const payload = await checkPayload(schema, e.payload, `${where} (queue "${queue}")`);
  checkJson(payload, where);
  const wire: WireEvent = { type: e.type, key: e.key ?? null, payload };
  if (e.dedupKey !== undefined) {
    wire.dedupKey = e.dedupKey;
    wire.ttl = ttlMs! / 1000;
  }
  return wire;
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
  return await engine.send(exec, schemaName, {
    queue,
    type: e.type,
    payload: e.payload,
    key: e.key,
    dedupKey: e.dedupKey ?? null,
    ttl: e.ttl ?? null,
  });
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
  return await engine.sendBatch(exec, schemaName, { queue, events: wire });
}
