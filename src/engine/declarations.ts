/**
 * Every engine function the TypeScript calls, declared once: its SQL name,
 * argument names and types, return type, the shape its reply must have,
 * and the TypeScript input and result types (`EngineCalls`). calls.ts
 * binds them to an executor (`engine(exec, schema)`); tests/engine-api.test.ts
 * compares `ENGINE` with the functions a migrated schema really has, so a
 * renamed or retyped SQL argument fails the suite.
 *
 * @module
 */

import { fields, listOf, type Shape } from "./reply.ts";
import { isOrderedBatch, isPlainBatch, parseLines, parseOrderedLines, type PlainBatch, type Received } from "./wire.ts";
import type { EngineQueueStatus } from "./status.ts";
import type { BlockedKey, DeadLetter, HistoryEvent, LogPosition, MaintainReport, QueueInfo, RoleGrants, SeekResult, SendResult } from "../types.ts";

/** SQL types the engine's arguments use, as written in the cast. */
export type SqlType = "text" | "int" | "int[]" | "text[]" | "jsonb" | "boolean" | "float8" | "float8[]";

/** The `format_type()` spelling of each cast type, as pg_proc reports it. */
export const FORMAT_TYPE: Readonly<Record<SqlType, string>> = {
  text: "text",
  int: "integer",
  "int[]": "integer[]",
  "text[]": "text[]",
  jsonb: "jsonb",
  boolean: "boolean",
  float8: "double precision",
  "float8[]": "double precision[]",
};

/** One argument: the caller's field, the SQL argument name, its type. */
export interface EngineArg<In> {
  readonly key: keyof In & string;
  readonly sql: string;
  readonly type: SqlType;
}

/** One engine function as the TypeScript calls it. */
export interface EngineFn<In> {
  /** The SQL function name. */
  readonly name: string;
  /** The arguments TS passes, in SQL order (named, so order is documentation). */
  readonly args: readonly EngineArg<In>[];
  /** Arguments the SQL function has that TS leaves to their default. */
  readonly defaulted: readonly { sql: string; type: SqlType }[];
  /** The SQL return type (`format_type`). */
  readonly returns: string;
  /** What the parsed reply must look like. */
  readonly shape: Shape;
  /** How the reply's text is parsed, when it is not one JSON document (the wire form). */
  readonly parse?: (text: string) => unknown;
  /** A set-returning call (`returns` is `setof text`): how its rows' texts, in order, are parsed. */
  readonly lines?: (texts: string[]) => unknown;
}

/** A count or slot: a non-negative integer. */
const isCount: Shape = (x) => Number.isInteger(x) && (x as number) >= 0;
const isStrings: Shape = (x) => Array.isArray(x) && x.every((k) => typeof k === "string");

function fn<In>(
  name: string,
  args: readonly (readonly [key: keyof In & string, sql: string, type: SqlType])[],
  shape: Shape,
  defaulted: readonly { sql: string; type: SqlType }[] = [],
  returns = "jsonb",
  parse?: (text: string) => unknown,
  lines?: (texts: string[]) => unknown,
): EngineFn<In> {
  return {
    name,
    args: args.map(([key, sql, type]) => ({ key, sql, type })),
    defaulted,
    returns,
    shape,
    ...(parse ? { parse } : {}),
    ...(lines ? { lines } : {}),
  };
}

// ---------------------------------------------------------------- result types

/** An event named by id and transaction, as `ack` takes it. */
export interface EventRef {
  id: string;
  txid: string;
}

/** What a batch did with its events, recorded by `ack` in the batch's transaction. */
export interface AckOutcome {
  /** Redelivered events that succeeded: their retry rows go. */
  retried: string[];
  /** Failed events with their described error: retried later or dead-lettered. */
  failed: (EventRef & { error: unknown })[];
  /** Contended events (Tier A) offered again after `deferDelay`, no retry spent. */
  deferred: EventRef[];
  /** Seconds a deferred event waits. */
  deferDelay: number;
  /** Tier B pause policy: a failed key's later events are held. */
  pause: boolean;
  /** Events held behind a failed head of their key. */
  held: EventRef[];
  /** Events the batch did not start: they come again, in order. */
  released: EventRef[];
}

/** What `ack` recorded. */
export interface AckReply {
  retried: number;
  deadLettered: number;
  deferred: number;
}

/**
 * What send_rows answers: the ids drawn for the events, in array order, as
 * runs `[first id, count]`, and the events answered with another event's id
 * (deduplicated) as `[0-based index, id]`.
 */
export interface SentRows {
  ids: [string, number][];
  dup: [number, string][];
}

/** The engine's answer to subscribe: done, or slot-index work to do first. */
export interface SubscribeReply {
  created: boolean;
  /** CREATE/DROP INDEX CONCURRENTLY statements to run outside a transaction. */
  build?: string[];
  /** Another session is building a slot index of this queue. */
  wait?: boolean;
  /** Where a new consumer starts. */
  position?: LogPosition;
}

/** What a tick statement did: the id of the tick it wrote (or null), and whether another session held the ticker. */
export interface Ticked {
  tick: string | null;
  busy: boolean;
}

/** The engine's answer to prepare_exclusive: the tick, the consumer's bucket count, and slot-index work a growth waits for. */
export interface PrepareReply {
  tick: string | null;
  /** No tick written because another session was writing one (its snapshot may predate commits the caller heard of). */
  busy?: boolean;
  /** The key bucket count windows are planned with now. */
  buckets?: number;
  /** CREATE/DROP INDEX CONCURRENTLY statements to run outside a transaction before the count grows. */
  build?: string[];
  /** Another session is building a slot index of this queue. */
  wait?: boolean;
}

/**
 * The engine's answer to start_run: the tick (and, for an exclusive
 * consumer, prepare_exclusive's reply), subscribe's reply when it was
 * called, and maintain's.
 */
export interface StartReply extends PrepareReply {
  /** subscribe's reply; null when the consumer was there as it is (or not asked). With `build` or `wait`, nothing else was done. */
  subscribe: SubscribeReply | null;
  /** maintain's report; absent when subscribe asked for index work first. */
  maintain?: MaintainReport;
}

/** A start position or seek target as the engine reads it. */
export type Target = { latest: true } | { earliest: true } | { time: string } | { id: string };

// ---------------------------------------------------------------- declarations

type QC = { queue: string; consumer: string };
type Filter = { filter: Record<string, unknown> };

/** The TypeScript side of every engine call: [input, result], by TS name. */
export interface EngineCalls {
  createQueue: [{ queue: string; settings: Record<string, number> }, { created: boolean; queue: QueueInfo }];
  updateQueue: [{ queue: string; settings: Record<string, number> }, QueueInfo];
  dropQueue: [{ queue: string }, { dropped: boolean }];
  listQueues: [Record<never, never>, QueueInfo[]];
  /** Durations in seconds, as SQL writes them; src/ops/status.ts converts them to milliseconds. */
  status: [{ queue: string | null; staleAfter: number; afterQueue: string | null; maxQueues: number | null }, EngineQueueStatus[]];
  tick: [{ queue: string; force: boolean }, { tick: string | null; reason?: string }];
  maintain: [{ queue: string; forceRotate: boolean }, MaintainReport];
  send: [{ queue: string; type: string; payload: unknown; key: string | null; dedupKey: string | null; ttl: number | null; trace: string | null }, SendResult];
  /** An entry per event: a bare id when it could not be deduplicated (no dedup key), else `{ id, deduped }`. */
  sendBatch: [{ queue: string; events: readonly unknown[]; trace: string | null }, (string | SendResult)[]];
  /** The client's batch send: one array per field, payloads as newline-separated JSON texts (see SentRows). */
  sendRows: [
    {
      queue: string;
      types: readonly string[];
      keys: readonly (string | null)[];
      payloads: string;
      dedupKeys: readonly (string | null)[] | null;
      ttls: readonly (number | null)[] | null;
      trace: string | null;
    },
    SentRows,
  ];
  subscribe: [
    QC & { kind: string; slots: number; settings: Record<string, unknown>; indexInline: boolean; start: Target | null },
    SubscribeReply,
  ];
  seek: [QC & { target: Target; slot: number | null }, SeekResult];
  keyHistory: [{ queue: string; key: string; start: Target | null; after: string | null; limit: number }, HistoryEvent<unknown>[]];
  replayKey: [QC & { key: string; start: Target | null }, { replayed: number; slot: number }];
  setPaused: [QC & { paused: boolean }, { paused: boolean; changed: boolean }];
  settleHead: [QC & { key: string; action: "skip" | "deadLetter" }, { key: string; slot: number; headId: string; action: string }];
  unsubscribe: [QC, { removed: boolean }];
  prepareExclusive: [QC & { chunkSize: number; growFrom: number | null; indexInline: boolean }, PrepareReply];
  /** A run's start in one statement: subscribe (when asked), tick or prepare_exclusive, maintain (10_start.sql). */
  startRun: [
    QC & {
      kind: string;
      slots: number;
      settings: Record<string, unknown>;
      subscribe: boolean;
      chunkSize: number;
      growFrom: number | null;
      indexInline: boolean;
    },
    StartReply,
  ];
  /** A plain batch as JSON objects (SQL callers and tests; the client reads receivePlain). */
  receive: [QC & { maxEvents: number }, Received];
  /** Plain batches in the compact wire form (wire.ts); waits up to `waitMs` for a held cursor. */
  receivePlain: [QC & { maxEvents: number; waitMs: number }, PlainBatch];
  receiveExclusive: [QC & { maxEvents: number }, Received];
  /** An ordered batch as JSON objects (SQL callers and tests; the client reads receiveOrderedWire). */
  receiveOrdered: [QC & { slots: number[]; maxEvents: number; helpAfter: number | null; slotCount: number }, Received];
  /** Ordered batches in the compact wire form (wire.ts), with the slot read. */
  receiveOrderedWire: [QC & { slots: number[]; maxEvents: number; helpAfter: number | null; slotCount: number; multiSlot: boolean }, PlainBatch];
  /** slot: null for a Tier B batch that read several slots (the engine takes each event's from its key). */
  ack: [QC & { slot: number | null; outcome: AckOutcome }, AckReply];
  fence: [QC & { slot: number; keys: string[]; holder: string; ms: number }, string[]];
  unfence: [QC & { holder: string }, number];
  slotOf: [QC & { key: string | null; slotCount: number }, number];
  blockedKeys: [QC, BlockedKey[]];
  dlqList: [Filter & { limit: number }, DeadLetter<unknown>[]];
  dlqCount: [Filter, number];
  dlqReplay: [{ ids: readonly string[] }, number];
  dlqReplayWhere: [Filter, number];
  dlqPurge: [Filter, number];
  grant: [Grant, RoleGrants];
  revoke: [Grant & { all: boolean }, RoleGrants];
  grants: [Record<never, never>, RoleGrants[]];
}

/** A grant as the engine takes it (src/roles/grants.ts checks it). */
type Grant = { role: string; produce: readonly string[]; consume: Record<string, readonly string[]>; operate: boolean };

const receiveShape = fields({ busy: "boolean", events: "array" });
const tickShape = fields({ tick: "string|null" });
const grantShape = fields({ role: "string", produce: "array", consume: "object", operate: "boolean" });
const queueShape = fields({ name: "string", tables: "number", currentTable: "number", rotatedAt: "string", maxRetries: "number" });
const statusShape = fields({ queue: "string", tables: "number", currentTable: "number", lastTick: "string|null", consumers: "array" });
const sentShape = fields({ id: "string", deduped: "boolean" });
const historyShape = fields({ id: "string", txid: "string", type: "string", key: "string|null", position: "string" });
const blockedShape = fields({ slot: "number", key: "string", headId: "string", held: "number" });
const deadLetterShape = fields({ id: "string", queue: "string", consumer: "string", slot: "number", eventId: "string", attempts: "number" });
const removedShape = fields({ removed: "boolean" });
/** send_batch: a bare id where no dedup key was given, else what send returns. */
const isSent = listOf((e) => typeof e === "string" || sentShape(e));
const isRun: Shape = (x) => Array.isArray(x) && x.length === 2 && typeof x[0] === "string" && /^[0-9]+$/.test(x[0]) && isCount(x[1]);
const isDup: Shape = (x) => Array.isArray(x) && x.length === 2 && isCount(x[0]) && typeof x[1] === "string";
const isSentRows: Shape = (x) => fields({ ids: "array", dup: "array" })(x) && listOf(isRun)((x as SentRows).ids) && listOf(isDup)((x as SentRows).dup);
const isCreated: Shape = (x) => fields({ created: "boolean" })(x) && queueShape((x as { queue?: unknown }).queue);

/** Every engine function the TypeScript calls, by TS name. */
export const ENGINE: { readonly [K in keyof EngineCalls]: EngineFn<EngineCalls[K][0]> } = {
  createQueue: fn("create_queue", [
    ["queue", "queue", "text"],
    ["settings", "settings", "jsonb"],
  ], isCreated),
  updateQueue: fn("update_queue", [
    ["queue", "queue", "text"],
    ["settings", "settings", "jsonb"],
  ], queueShape),
  dropQueue: fn("drop_queue", [["queue", "queue", "text"]], fields({ dropped: "boolean" })),
  listQueues: fn("list_queues", [], listOf(queueShape)),
  status: fn("status", [
    ["queue", "queue", "text"],
    ["staleAfter", "stale_after", "float8"],
    ["afterQueue", "after_queue", "text"],
    ["maxQueues", "max_queues", "int"],
  ], listOf(statusShape)),
  tick: fn("tick", [["queue", "queue", "text"], ["force", "force", "boolean"]], tickShape),
  maintain: fn("maintain", [
    ["queue", "queue", "text"],
    ["forceRotate", "force_rotate", "boolean"],
  ], fields({ queue: "string", skipped: "boolean" })),
  send: fn("send", [
    ["queue", "queue", "text"],
    ["type", "type", "text"],
    ["payload", "payload", "jsonb"],
    ["key", "key", "text"],
    ["dedupKey", "dedup_key", "text"],
    ["ttl", "ttl", "float8"],
    ["trace", "trace", "text"],
  ], sentShape),
  sendBatch: fn("send_batch", [["queue", "queue", "text"], ["events", "events", "jsonb"], ["trace", "trace", "text"]], isSent),
  sendRows: fn(
    "send_rows",
    [
      ["queue", "queue", "text"],
      ["types", "types", "text[]"],
      ["keys", "keys", "text[]"],
      ["payloads", "payloads", "text"],
      ["dedupKeys", "dedup_keys", "text[]"],
      ["ttls", "ttls", "float8[]"],
      ["trace", "trace", "text"],
    ],
    isSentRows,
    [],
    "text",
  ),
  subscribe: fn("subscribe", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["kind", "kind", "text"],
    ["slots", "slots", "int"],
    ["settings", "settings", "jsonb"],
    ["indexInline", "index_inline", "boolean"],
    ["start", "start", "jsonb"],
  ], fields({ created: "boolean", build: "array|undefined", wait: "boolean|undefined" })),
  seek: fn("seek", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["target", "target", "jsonb"],
    ["slot", "slot", "int"],
  ], fields({ position: "object", slots: "number", retriesDropped: "number", blockedDropped: "number" })),
  keyHistory: fn("key_history", [
    ["queue", "queue", "text"],
    ["key", "key", "text"],
    ["start", "start", "jsonb"],
    ["after", "after", "text"],
    ["limit", "max_rows", "int"],
  ], listOf(historyShape)),
  replayKey: fn("replay_key", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["key", "key", "text"],
    ["start", "start", "jsonb"],
  ], fields({ replayed: "number", slot: "number" })),
  setPaused: fn("set_paused", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["paused", "paused", "boolean"],
  ], fields({ paused: "boolean", changed: "boolean" })),
  settleHead: fn("settle_head", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["key", "key", "text"],
    ["action", "action", "text"],
  ], fields({ key: "string", slot: "number", headId: "string", action: "string" })),
  unsubscribe: fn("unsubscribe", [["queue", "queue", "text"], ["consumer", "consumer", "text"]], removedShape),
  prepareExclusive: fn("prepare_exclusive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["chunkSize", "chunk_size", "int"],
    ["growFrom", "grow_from", "int"],
    ["indexInline", "index_inline", "boolean"],
  ], tickShape),
  startRun: fn("start_run", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["kind", "kind", "text"],
    ["slots", "slots", "int"],
    ["settings", "settings", "jsonb"],
    ["subscribe", "subscribe", "boolean"],
    ["chunkSize", "chunk_size", "int"],
    ["growFrom", "grow_from", "int"],
    ["indexInline", "index_inline", "boolean"],
  ], fields({ tick: "string|null", subscribe: "object|null" })),
  receive: fn("receive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["maxEvents", "max_events", "int"],
  ], receiveShape),
  receivePlain: fn(
    "receive_plain_rows",
    [
      ["queue", "queue", "text"],
      ["consumer", "consumer", "text"],
      ["maxEvents", "max_events", "int"],
      ["waitMs", "wait_ms", "int"],
    ],
    isPlainBatch,
    [],
    "setof text",
    undefined,
    parseLines,
  ),
  receiveExclusive: fn("receive_exclusive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["maxEvents", "max_events", "int"],
  ], receiveShape),
  receiveOrdered: fn(
    "receive_ordered",
    [
      ["queue", "queue", "text"],
      ["consumer", "consumer", "text"],
      ["slots", "slots", "int[]"],
      ["maxEvents", "max_events", "int"],
      ["helpAfter", "help_after", "float8"],
      ["slotCount", "slot_count", "int"],
    ],
    receiveShape,
    [{ sql: "skip_try_lock", type: "boolean" }],
  ),
  receiveOrderedWire: fn(
    "receive_ordered_rows",
    [
      ["queue", "queue", "text"],
      ["consumer", "consumer", "text"],
      ["slots", "slots", "int[]"],
      ["maxEvents", "max_events", "int"],
      ["helpAfter", "help_after", "float8"],
      ["slotCount", "slot_count", "int"],
      ["multiSlot", "multi_slot", "boolean"],
    ],
    isOrderedBatch,
    [{ sql: "skip_try_lock", type: "boolean" }],
    "setof text",
    undefined,
    parseOrderedLines,
  ),
  ack: fn("ack", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["slot", "slot", "int"],
    ["outcome", "outcome", "jsonb"],
  ], fields({ retried: "number", deadLettered: "number", deferred: "number" })),
  fence: fn("fence", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["slot", "slot", "int"],
    ["keys", "keys", "text[]"],
    ["holder", "holder", "text"],
    ["ms", "lease_ms", "float8"],
  ], isStrings),
  unfence: fn("unfence", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["holder", "holder", "text"],
  ], isCount),
  slotOf: fn("consumer_slot_of", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["key", "key", "text"],
    ["slotCount", "slot_count", "int"],
  ], isCount),
  blockedKeys: fn("blocked_keys", [["queue", "queue", "text"], ["consumer", "consumer", "text"]], listOf(blockedShape)),
  dlqList: fn("dlq_list", [["filter", "filter", "jsonb"], ["limit", "max_rows", "int"]], listOf(deadLetterShape)),
  dlqCount: fn("dlq_count", [["filter", "filter", "jsonb"]], isCount),
  dlqReplay: fn("dlq_replay", [["ids", "ids", "jsonb"]], isCount),
  dlqReplayWhere: fn("dlq_replay_where", [["filter", "filter", "jsonb"]], isCount),
  dlqPurge: fn("dlq_purge", [["filter", "filter", "jsonb"]], isCount),
  grant: fn("grant_access", [
    ["role", "role", "text"],
    ["produce", "produce", "text[]"],
    ["consume", "consume", "jsonb"],
    ["operate", "operate", "boolean"],
  ], grantShape),
  revoke: fn("revoke_access", [
    ["role", "role", "text"],
    ["produce", "produce", "text[]"],
    ["consume", "consume", "jsonb"],
    ["operate", "operate", "boolean"],
    ["all", "every_grant", "boolean"],
  ], grantShape),
  grants: fn("list_grants", [], listOf(grantShape)),
};

/**
 * Engine functions the TypeScript never calls: helpers of the functions
 * above, and `tick_all`/`rotate` for SQL callers (pg_cron). The API test
 * requires every function of a migrated schema to be in ENGINE or here.
 */
export const INTERNAL_FUNCTIONS: readonly string[] = [
  "append_rows",
  "apply_queue_settings",
  "array_lines_sql",
  "backoff",
  "batch_lock_class",
  "block_key",
  "check_slots",
  "chunk_events",
  "claim_chunk",
  "claim_dedup",
  "claim_keys",
  "consumer_buckets",
  "dedup_gc",
  "dlq_check",
  "dlq_requeue",
  "dlq_where",
  "ensure_slot_index",
  "event_json",
  "event_row",
  "get_consumer",
  "get_queue",
  "has_pending",
  "key_budget",
  "key_seed",
  "keys_prefix",
  "line_select",
  "lines_sql",
  "lock_key",
  "lock_keys",
  "park_events",
  "plan_chunks",
  "prepared_call",
  "prune_ticks",
  "read_chunk_part",
  "recut_chunks",
  "split_chunks",
  "key_safe_cuts",
  "starved",
  "grow_buckets",
  "queue_json",
  "read_window",
  // receive_plain_rows' and receive_ordered_rows' batches in the one-text
  // form of earlier function sets (a process of an older build calls them
  // during a rolling deploy)
  "receive_plain",
  "receive_ordered_wire",
  "ordered_consumer",
  "release_heads",
  "release_key",
  "resolve_claims",
  "retry_policy",
  "rotate",
  "slot_of",
  "slot_late_sql",
  "slot_range_sql",
  "table_unread",
  "take_retries",
  "tick_all",
  "window_array",
  "window_count",
  "window_events",
  "window_range_sql",
  "window_slot_array",
  "window_slots",
  "window_lines",
  "window_next",
  "window_open",
  "window_save",
  "window_take",
  "xbuckets",
  // least privilege (functions/00_roles.sql)
  "apply_grants",
  "authorize",
  "caller",
  "entry_functions",
  "permits",
  "role_json",
  "role_oid",
  // 07_positions.sql and 05_status.sql helpers
  "floor_after",
  "floor_of",
  "key_events",
  "out_of_range",
  "place_cursors",
  "position_json",
  "resolve_position",
  "retained_json",
  "tick_now",
];
