/**
 * The compact wire form of a plain consumer's batch (`receive_plain`):
 * `{"busy": b, "retries": [event objects], "rows": [[id, txid, type, key,
 * time, payload], …]}`. The server builds it as json text without a function
 * call per event and the client parses it in one `JSON.parse`; positional
 * rows carry no repeated field names.
 *
 * @module
 */

/** The engine's JSON form of a received event. */
export interface WireEvent {
  id: string;
  txid: string;
  type: string;
  key: string | null;
  payload: unknown;
  time: string;
  retry: number;
  /** The W3C traceparent of the span that sent it (keyq/otel), when one was recorded. */
  trace?: string | null;
  /** True when it came from the consumer's retry rows (a retry or a replay). */
  redelivered?: boolean;
  /** Tier A: false when another worker holds the key. */
  locked?: boolean;
  /** Set by a fenced batch: another batch's lease still fences the key (always deferred). */
  fenced?: boolean;
}

/** The engine's answer to a receive call. */
export interface Received {
  busy: boolean;
  events: WireEvent[];
  /** Tier B: the slot this batch read. */
  slot?: number;
  /** Tier A: nothing was free while other batches held every bucket; the bucket count seen. */
  starved?: number | null;
}

/** One event row: id, txid, type, key, time, payload, trace (the producer's traceparent or null). */
export type PlainRow = [id: string, txid: string, type: string, key: string | null, time: string, payload: unknown, trace?: string | null];

/** A `receive_plain` reply as parsed, before it becomes a batch's events. */
export interface PlainBatch {
  busy: boolean;
  /** Due retries first, as the engine's event objects. */
  retries: WireEvent[];
  /** The window's events, in order. */
  rows: PlainRow[];
}

function isRow(x: unknown): x is PlainRow {
  return Array.isArray(x) && (x.length === 6 || (x.length === 7 && (x[6] === null || typeof x[6] === "string"))) && typeof x[0] === "string" &&
    typeof x[1] === "string" &&
    typeof x[2] === "string" && (x[3] === null || typeof x[3] === "string") && typeof x[4] === "string";
}

/**
 * The shape a `receive_plain` reply must have (a reply of another shape is
 * BAD_REPLY, like every engine reply).
 *
 * @example
 * ```ts
 * import { isPlainBatch } from "./wire.ts";
 * console.log(isPlainBatch({ busy: false, retries: [], rows: [["1", "7", "T", null, "2026-01-01T00:00:00+00:00", 1]] })); // true
 * console.log(isPlainBatch({ busy: false, retries: [], rows: [["1"]] })); // false
 * ```
 */
export function isPlainBatch(x: unknown): boolean {
  if (typeof x !== "object" || x === null) return false;
  const v = x as { busy?: unknown; retries?: unknown; rows?: unknown };
  return typeof v.busy === "boolean" && Array.isArray(v.retries) && Array.isArray(v.rows) && v.rows.every(isRow);
}

/**
 * A checked `receive_plain` reply as a batch's events: retries first (as the
 * engine ordered them), then the window's rows.
 *
 * @example
 * ```ts
 * import { fromPlain } from "./wire.ts";
 * const r = fromPlain({ busy: false, retries: [], rows: [["1", "7", "T", null, "2026-01-01T00:00:00+00:00", { a: 1 }]] });
 * console.log(r.events[0]!.id, r.events[0]!.payload); // "1" { a: 1 }
 * ```
 */
export function fromPlain(batch: PlainBatch): Received {
  const events: WireEvent[] = batch.retries;
  for (const r of batch.rows) {
    events.push({ id: r[0], txid: r[1], type: r[2], key: r[3], time: r[4], payload: r[5], retry: 0, trace: r[6] ?? null });
  }
  return { busy: batch.busy, events };
}
