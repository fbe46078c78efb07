/**
 * The compact wire forms of a plain or ordered consumer's batch.
 *
 * A batch comes as rows of one text each (`receive_plain_rows`,
 * `receive_ordered_rows`): a row per event, `[id, txid, type, key, time,
 * trace]` and the payload's JSON text after a newline, and a JSON head, the
 * first row of a plain batch (`{"busy": b, "retries": [event objects]}`)
 * and the last of an ordered one (`{"busy": b, "slot": k, "retries": […],
 * "groups": […], "drained": true}`). Processes of earlier builds read one
 * text (`receive_plain`, `receive_ordered_wire`, {@link parseWire}): the
 * head with `"rows": [[id, txid, type, key, time, trace], …]`, then each
 * row's payload after a newline.
 *
 * Neither a head nor a payload holds a raw newline (the server writes both
 * with Postgres's json and jsonb output), so the client parses the heads
 * and splits the payloads off without reading them; a payload is parsed
 * only when a handler reads it. Positional rows carry no repeated field
 * names, and the server builds the reply without a function call per event.
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
  /** The payload's JSON text, not parsed yet (the wire rows): `payload` is then undefined. */
  raw?: string;
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
  /** Tier B, a batch that read several slots: the slot that delivered it. */
  slot?: number;
}

/** The engine's answer to a receive call. */
export interface Received {
  busy: boolean;
  events: WireEvent[];
  /** Tier B: the slot this batch read (the first, when it read several). */
  slot?: number;
  /** Tier B: every slot this batch read, when it read more than one (each event carries its own). */
  slots?: number[];
  /** Tier A: nothing was free while other batches held every bucket; the bucket count seen. */
  starved?: number | null;
  /**
   * Tier A: no free chunk was left when the batch was read; Tier B (several slots a batch): every free slot was read
   * to its end. Either way another look finds nothing until a new tick.
   */
  drained?: boolean;
}

/**
 * One event row: id, txid, type, key, time, payload (its JSON text), trace
 * (the producer's traceparent or null).
 */
export type PlainRow = [id: string, txid: string, type: string, key: string | null, time: string, payload: string, trace: string | null];

/** A `receive_plain_rows` or `receive_ordered_rows` reply as parsed, before it becomes a batch's events. */
export interface PlainBatch {
  busy: boolean;
  /** Ordered: the slot read (null when none had events). */
  slot?: number | null;
  /** Due retries first, as the engine's event objects. */
  retries: WireEvent[];
  /** The window's events, in order. */
  rows: PlainRow[];
  /** Ordered, read with multiSlot: [slot, retries, rows] per slot read, in the order of `retries` and `rows`. */
  groups?: [slot: number, retries: number, rows: number][];
  /** Ordered, read with multiSlot: the batch read every slot free to it to its end. */
  drained?: boolean;
}

/**
 * Parses a reply in the one-text form of earlier builds (`receive_plain`,
 * `receive_ordered_wire`: the head, then one payload per row): the head with each
 * row's payload text put in its place (the rows' form, {@link PlainRow}).
 * Undefined when the payloads do not match the rows one to one, so the
 * shape check refuses the reply as BAD_REPLY.
 *
 * @example
 * ```ts
 * import { parseWire } from "./wire.ts";
 * const b = parseWire('{"busy":false,"retries":[],"rows":[["1","7","T",null,"2026-01-01T00:00:00+00:00",null]]}\n{"a": 1}') as {
 *   rows: unknown[][];
 * };
 * console.log(b.rows[0]![5]); // '{"a": 1}'
 * ```
 */
export function parseWire(text: string): unknown {
  const nl = text.indexOf("\n");
  const head = JSON.parse(nl < 0 ? text : text.slice(0, nl)) as { rows?: unknown } | null;
  const rows = head?.rows;
  if (!Array.isArray(rows)) return head;
  const payloads = nl < 0 ? [] : text.slice(nl + 1).split("\n");
  if (payloads.length !== rows.length) return undefined;
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i] as unknown[];
    if (!Array.isArray(r) || r.length !== 6) return undefined;
    r.push(r[5]);
    r[5] = payloads[i];
  }
  return head;
}

/**
 * Parses a plain batch's rows (a head, then a line per event) into the
 * rows' form ({@link PlainRow}): the heads in one `JSON.parse`, each payload
 * split off unread. Undefined when the rows are not of that form, so the
 * shape check refuses the reply as BAD_REPLY.
 *
 * @example
 * ```ts
 * import { parseLines } from "./wire.ts";
 * const b = parseLines(['{"busy":false,"retries":[]}', '["1","7","T",null,"2026-01-01T00:00:00+00:00",null]\n{"a": 1}']) as {
 *   rows: unknown[][];
 * };
 * console.log(b.rows[0]![5]); // '{"a": 1}'
 * ```
 */
export function parseLines(texts: string[]): unknown {
  return texts.length === 0 ? undefined : withLines(texts[0]!, texts, 1, texts.length);
}

/**
 * Parses an ordered batch's rows (a line per event, then the head, last)
 * as {@link parseLines} parses a plain batch's.
 *
 * @example
 * ```ts
 * import { parseOrderedLines } from "./wire.ts";
 * const b = parseOrderedLines(['["1","7","T","k","2026-01-01T00:00:00+00:00",null]\n2', '{"busy":false,"slot":3,"retries":[]}']) as {
 *   slot: number;
 *   rows: unknown[][];
 * };
 * console.log(b.slot, b.rows[0]![5]); // 3 "2"
 * ```
 */
export function parseOrderedLines(texts: string[]): unknown {
  return texts.length === 0 ? undefined : withLines(texts[texts.length - 1]!, texts, 0, texts.length - 1);
}

/** The head `head` with texts[from, to) as its rows (each a row's head and payload). */
function withLines(headText: string, texts: string[], from: number, to: number): unknown {
  const head = JSON.parse(headText) as Record<string, unknown> | null;
  if (typeof head !== "object" || head === null || Array.isArray(head) || "rows" in head) return undefined;
  const n = to - from;
  const heads = new Array<string>(n);
  const payloads = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    const line = texts[from + i]!;
    const nl = line.indexOf("\n");
    if (nl < 0) return undefined;
    heads[i] = line.slice(0, nl);
    payloads[i] = line.slice(nl + 1);
  }
  const rows = n === 0 ? [] : JSON.parse(`[${heads.join(",")}]`) as unknown[];
  // A head that is not one array would change the count.
  if (rows.length !== n) return undefined;
  for (let i = 0; i < n; i++) {
    const r = rows[i];
    if (!Array.isArray(r) || r.length !== 6) return undefined;
    r.push(r[5]);
    r[5] = payloads[i];
  }
  head.rows = rows;
  return head;
}

function isRow(x: unknown): x is PlainRow {
  return Array.isArray(x) && x.length === 7 && typeof x[0] === "string" && typeof x[1] === "string" && typeof x[2] === "string" &&
    (x[3] === null || typeof x[3] === "string") && typeof x[4] === "string" && typeof x[5] === "string" &&
    (x[6] === null || typeof x[6] === "string");
}

/** A retry as the engine's event object (`take_retries`). */
const isRetry = (x: unknown): boolean => {
  if (typeof x !== "object" || x === null) return false;
  const e = x as Record<string, unknown>;
  return typeof e.id === "string" && typeof e.txid === "string" && typeof e.type === "string" && typeof e.time === "string" &&
    typeof e.retry === "number";
};

/**
 * The shape a `receive_plain_rows` reply must have (a reply of another shape is
 * BAD_REPLY, like every engine reply).
 *
 * @example
 * ```ts
 * import { isPlainBatch } from "./wire.ts";
 * console.log(isPlainBatch({ busy: false, retries: [], rows: [["1", "7", "T", null, "2026-01-01T00:00:00+00:00", "1", null]] })); // true
 * console.log(isPlainBatch({ busy: false, retries: [], rows: [["1"]] })); // false
 * ```
 */
export function isPlainBatch(x: unknown): boolean {
  if (typeof x !== "object" || x === null) return false;
  const v = x as { busy?: unknown; retries?: unknown; rows?: unknown };
  return typeof v.busy === "boolean" && Array.isArray(v.retries) && v.retries.every(isRetry) && Array.isArray(v.rows) && v.rows.every(isRow);
}

/**
 * The shape a `receive_ordered_rows` reply must have: a plain batch's, plus
 * the slot it read (a non-negative integer, or null when no slot had events).
 *
 * @example
 * ```ts
 * import { isOrderedBatch } from "./wire.ts";
 * console.log(isOrderedBatch({ busy: false, slot: 3, retries: [], rows: [] })); // true
 * console.log(isOrderedBatch({ busy: false, retries: [], rows: [] })); // false
 * ```
 */
export function isOrderedBatch(x: unknown): boolean {
  if (!isPlainBatch(x)) return false;
  const b = x as { slot?: unknown; groups?: unknown; drained?: unknown; retries: unknown[]; rows: unknown[] };
  const slot = b.slot;
  if (b.drained !== undefined && b.drained !== true) return false;
  if (!(slot === null || (Number.isInteger(slot) && (slot as number) >= 0))) return false;
  if (b.groups === undefined) return true;
  // Groups must account for every retry and row, each slot once, the first being "slot".
  if (!Array.isArray(b.groups) || (b.groups.length > 0) !== (slot !== null)) return false;
  const nat = (n: unknown) => Number.isInteger(n) && (n as number) >= 0;
  if (!b.groups.every((g) => Array.isArray(g) && g.length === 3 && g.every(nat))) return false;
  const gs = b.groups as number[][];
  return (gs.length === 0 || gs[0]![0] === slot) && new Set(gs.map((g) => g[0])).size === gs.length &&
    gs.reduce((n, g) => n + g[1]!, 0) === b.retries.length && gs.reduce((n, g) => n + g[2]!, 0) === b.rows.length;
}

/**
 * A checked `receive_plain_rows` reply as a batch's events: retries first (as the
 * engine ordered them), then the window's rows.
 *
 * @example
 * ```ts
 * import { fromPlain } from "./wire.ts";
 * const r = fromPlain({ busy: false, retries: [], rows: [["1", "7", "T", null, "2026-01-01T00:00:00+00:00", '{"a":1}', null]] });
 * console.log(r.events[0]!.id, r.events[0]!.raw); // "1" '{"a":1}'
 * ```
 */
export function fromPlain(batch: PlainBatch): Received {
  const events: WireEvent[] = batch.retries;
  const nRetries = events.length;
  for (const r of batch.rows) {
    events.push({ id: r[0], txid: r[1], type: r[2], key: r[3], time: r[4], payload: undefined, raw: r[5], retry: 0, trace: r[6] });
  }
  const out: Received = { busy: batch.busy, events };
  if (typeof batch.slot === "number") out.slot = batch.slot;
  if (batch.drained === true) out.drained = true;
  if (batch.groups && batch.groups.length > 1) {
    // Retries of every slot come first, then rows, each part in group order.
    let ri = 0;
    let wi = nRetries;
    for (const [slot, retries, rows] of batch.groups) {
      for (let i = 0; i < retries; i++) events[ri++]!.slot = slot;
      for (let i = 0; i < rows; i++) events[wi++]!.slot = slot;
    }
    out.slots = batch.groups.map((g) => g[0]);
  }
  return out;
}
