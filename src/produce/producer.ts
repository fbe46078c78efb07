/**
 * Appending events: `send` and `sendBatch`, optionally inside the caller's
 * transaction (the event commits or rolls back with the caller's writes).
 *
 * @module
 */

import * as v from "valibot";
import type { Executor } from "../driver.ts";
import { engine, type SentRows } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import { checkPayload, type SchemaFor } from "../payload.ts";
import type { SendInput, SendResult } from "../types.ts";
import { checkJson, mayHoldBadText, plainShape, textProblem } from "../text.ts";
import { checkName, duration, durationMs, parse, show, text } from "../validate.ts";

/** SQS's dedup window: a dedup key without a ttl stays live for 5 minutes. */
const DEFAULT_TTL_MS = 5 * 60_000;

const eventSchema = v.strictObject({
  type: text("type", 1, 200),
  payload: v.unknown(),
  key: v.optional(v.nullable(text("key", 0, 1000))),
  dedupKey: v.optional(text("dedupKey", 1, 512)),
  ttl: v.optional(duration),
});

/** One checked event, as `columns` lays it out for the engine's `send_rows`. */
interface OutEvent {
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
  schemaOf: SchemaFor | undefined,
  where: string,
): Promise<OutEvent> {
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
  const payload = await checkPayload(schemaOf?.(e.type, where), e.payload, `${where} (queue "${queue}")`);
  checkJson(payload, where);
  const wire: OutEvent = { type: e.type, key: e.key ?? null, payload };
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
  schemaOf: SchemaFor | undefined,
  trace: string | null = null,
): Promise<SendResult> {
  checkName("queue", queue);
  const e = await prepare(queue, input, schemaOf, "the event");
  return await engine(exec, schemaName).send({
    queue,
    type: e.type,
    payload: e.payload,
    key: e.key,
    dedupKey: e.dedupKey ?? null,
    ttl: e.ttl ?? null,
    trace,
  });
}

/**
 * Keys an event may have on the fast path; anything else goes the slow way
 * (and is refused there). A dedup key without a ttl takes the engine's
 * default ttl, the same 5 minutes as DEFAULT_TTL_MS.
 */
const FAST_KEYS = new Set(["type", "payload", "key", "dedupKey"]);

/**
 * The common event — a plain object with a valid `type`, a `payload` of
 * plain JSON and an optional string or null `key` and `dedupKey` — checked
 * without valibot or an await, or undefined to let `prepare` judge it (and
 * word any error).
 */
function quick(input: unknown): true | undefined {
  if (typeof input !== "object" || input === null) return undefined;
  const proto = Object.getPrototypeOf(input);
  if (proto !== Object.prototype && proto !== null) return undefined;
  const e = input as { type?: unknown; payload?: unknown; key?: unknown; dedupKey?: unknown };
  for (const k in e) if (!FAST_KEYS.has(k) || !Object.hasOwn(e, k)) return undefined;
  const { type, key, dedupKey } = e;
  if (typeof type !== "string" || type.length < 1 || type.length > 200 || textProblem(type)) return undefined;
  if (key !== undefined && key !== null && (typeof key !== "string" || key.length > 1000 || textProblem(key))) return undefined;
  if (dedupKey !== undefined && (typeof dedupKey !== "string" || dedupKey.length < 1 || dedupKey.length > 512 || textProblem(dedupKey))) {
    return undefined;
  }
  if (e.payload === undefined) return undefined;
  try {
    // Its strings are checked by one scan of the serialised batch (sendBatch).
    return plainShape(e.payload) ? true : undefined;
  } catch {
    return undefined; // a getter that throws: prepare words it
  }
}

/** The batch as send_rows takes it: one array per field, the payloads as newline-separated JSON texts. */
interface Columns {
  types: string[];
  keys: (string | null)[];
  payloads: string;
  dedupKeys: (string | null)[] | null;
  ttls: (number | null)[] | null;
}

/**
 * One pass over checked events (`fast`: the caller's own objects, which
 * have no ttl). JSON.stringify writes no raw newline (it escapes control
 * characters inside strings), so a newline separates the payloads safely.
 */
function columns(events: readonly OutEvent[], fast: boolean): Columns {
  const n = events.length;
  const types = new Array<string>(n);
  const keys = new Array<string | null>(n);
  const docs = new Array<string>(n);
  let dedupKeys: (string | null)[] | null = null;
  let ttls: (number | null)[] | null = null;
  for (let i = 0; i < n; i++) {
    const e = events[i]!;
    types[i] = e.type;
    keys[i] = e.key ?? null;
    docs[i] = JSON.stringify(e.payload);
    if (e.dedupKey !== undefined) {
      dedupKeys ??= new Array<string | null>(n).fill(null);
      dedupKeys[i] = e.dedupKey;
    }
    if (!fast && e.ttl !== undefined) {
      ttls ??= new Array<number | null>(n).fill(null);
      ttls[i] = e.ttl;
    }
  }
  return { types, keys, payloads: docs.join("\n"), dedupKeys, ttls: dedupKeys && ttls };
}

/** The engine's reply as one result per event, in input order; BAD_REPLY when it does not cover the batch. */
function results(reply: SentRows, n: number): SendResult[] {
  const drawn = reply.ids.reduce((sum, [, count]) => sum + count, 0);
  if (drawn !== n || !reply.dup.every(([at]) => at < n)) {
    throw new KeyqError(
      "BAD_REPLY",
      `The engine call send_rows() answered ${drawn} ids for ${n} events; the connection is confused or was lost. Check which events were stored before sending again.`,
      { fn: "send_rows" },
    );
  }
  const out = new Array<SendResult>(n);
  let i = 0;
  for (const [first, count] of reply.ids) {
    const start = Number(first);
    if (Number.isSafeInteger(start + count)) {
      for (let j = 0; j < count; j++) out[i++] = { id: String(start + j), deduped: false };
    } else {
      const big = BigInt(first);
      for (let j = 0; j < count; j++) out[i++] = { id: String(big + BigInt(j)), deduped: false };
    }
  }
  for (const [at, id] of reply.dup) out[at] = { id, deduped: true };
  return out;
}

/** Appends many events in one statement, in array order; returns their ids in the same order. */
export async function sendBatch(
  exec: Executor,
  schemaName: string,
  queue: string,
  inputs: readonly SendInput[],
  schemaOf: SchemaFor | undefined,
  trace: string | null = null,
): Promise<SendResult[]> {
  checkName("queue", queue);
  if (!Array.isArray(inputs)) {
    throw new KeyqError("INVALID_INPUT", "sendBatch expects an array of events; wrap a single event in [ ].", { field: "events" });
  }
  if (inputs.length === 0) return [];
  // Without a payload schema the common events go as given: checked in one
  // synchronous pass (measured: about 3× less client time per event than
  // valibot + an await per event).
  let fast = schemaOf === undefined;
  for (let i = 0; fast && i < inputs.length; i++) fast = quick(inputs[i]) === true;
  let events = inputs as readonly OutEvent[];
  if (!fast) {
    const wire: OutEvent[] = [];
    for (let i = 0; i < inputs.length; i++) {
      wire.push(await prepare(queue, inputs[i] as SendInput, schemaOf, `event ${i}`));
    }
    events = wire;
  }
  const cols = columns(events, fast);
  if (fast && mayHoldBadText(cols.payloads)) {
    for (let i = 0; i < events.length; i++) checkJson(events[i]!.payload, `event ${i}`);
  }
  const reply = await engine(exec, schemaName).sendRows({ queue, ...cols, trace });
  return results(reply, inputs.length);
}
