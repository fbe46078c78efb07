/**
 * The typed seam to the SQL engine: every engine function the TypeScript
 * calls is declared here once, with its SQL argument names and types, its
 * return type, the check its reply must pass and a TypeScript result type.
 * Nothing outside this module names an engine function or builds an
 * argument list; tests/engine-api.test.ts compares `ENGINE` with the
 * functions a migrated schema really has, so a renamed or retyped SQL
 * argument fails the suite.
 *
 * The wire is `select "schema".fn(a => $1::text::t, …)::text as r`: every
 * value is a text bind parameter cast by the statement, the reply one JSON
 * text column.
 *
 * @module
 */

import type { Executor, SqlParam } from "../driver.ts";
import { fields, mapError, reply, type Shape } from "./reply.ts";
import { isPlainBatch, type PlainBatch, type Received } from "./wire.ts";
export type { Received, WireEvent } from "./wire.ts";
import type {
  BlockedKey,
  DeadLetter,
  HistoryEvent,
  LogPosition,
  SeekResult,
  MaintainReport,
  QueueInfo,
  QueueStatus,
  RoleGrants,
  SendResult,
} from "../types.ts";

/** SQL types the engine's arguments use, as written in the cast. */
export type SqlType = "text" | "int" | "int[]" | "text[]" | "jsonb" | "boolean" | "float8";

/** The `format_type()` spelling of each cast type, as pg_proc reports it. */
export const FORMAT_TYPE: Readonly<Record<SqlType, string>> = {
  text: "text",
  int: "integer",
  "int[]": "integer[]",
  "text[]": "text[]",
  jsonb: "jsonb",
  boolean: "boolean",
  float8: "double precision",
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
}

/** Any JSON value but a missing one. */
const present: Shape = (x) => x !== undefined;
const isNumber: Shape = (x) => typeof x === "number";
const isStrings: Shape = (x) => Array.isArray(x) && x.every((k) => typeof k === "string");
const isSent: Shape = (x) => Array.isArray(x) && x.every((e) => typeof e === "string" || typeof e?.id === "string");

function fn<In>(
  name: string,
  args: readonly (readonly [key: keyof In & string, sql: string, type: SqlType])[],
  shape: Shape = present,
  defaulted: readonly { sql: string; type: SqlType }[] = [],
  returns = "jsonb",
): EngineFn<In> {
  return { name, args: args.map(([key, sql, type]) => ({ key, sql, type })), defaulted, returns, shape };
}

/** Converts a value to the text a cast of `type` reads. */
function encode(type: SqlType, value: unknown): SqlParam {
  if (type === "jsonb") return JSON.stringify(value) ?? null; // a null payload is JSON null, not SQL NULL
  if (value === null || value === undefined) return null;
  if (type === "int[]") return `{${(value as number[]).join(",")}}`;
  if (type === "text[]") {
    return `{${(value as string[]).map((k) => `"${k.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`).join(",")}}`;
  }
  return String(value);
}

/** A statement calling `f`: its text and its parameters. */
export interface Statement {
  text: string;
  params: SqlParam[];
}

/**
 * Builds the call of `f`. `local` settings (name → value) are set for the
 * transaction in the same statement, before the call runs.
 */
export function statement<In>(schema: string, f: EngineFn<In>, input: In, local: readonly [string, string][] = []): Statement {
  const list = f.args.map((a, i) => `${a.sql} => $${i + 1}::text::${a.type}`).join(", ");
  const n = f.args.length;
  const sets = local.map(([name], i) => `set_config('${name}', $${n + i + 1}::text, true), `).join("");
  return {
    text: `select ${sets}"${schema}".${f.name}(${list})::text as r`,
    params: [...f.args.map((a) => encode(a.type, input[a.key])), ...local.map(([, value]) => value)],
  };
}

/** A text literal that reads the same whatever `standard_conforming_strings` says (`E'…'` when it holds a backslash). */
function literal(v: SqlParam): string {
  if (v === null) return "null";
  const quoted = v.replaceAll("'", "''");
  return v.includes("\\") ? `E'${quoted.replaceAll("\\", "\\\\")}'` : `'${quoted}'`;
}

/**
 * The statement with each `$n::text` parameter written as a text literal, for
 * the simple protocol: one round trip on every driver, nothing prepared.
 * Only for statements a run sends once per connection (tick, maintenance,
 * subscribe): a prepared one costs postgres.js and Bun.SQL a Parse/Describe
 * round trip of its own on a fresh connection, which only its later uses
 * on that connection repay. The text is the engine's own (`statement`):
 * every parameter is a `$n::text` cast, so the literal reads the same.
 *
 * @example
 * ```ts
 * inlined({ text: "select $1::text::int as r", params: ["it's"] }); // "select 'it''s'::text::int as r"
 * ```
 */
export function inlined(st: Statement): string {
  return st.text.replace(/\$(\d+)::text\b/g, (_, n: string) => `${literal(st.params[Number(n) - 1] ?? null)}::text`);
}

/** Runs `f` on `exec` and returns its checked reply; engine errors become KeyqErrors. `simple`: parameters inlined. */
async function run<In, Out>(exec: Executor, schema: string, f: EngineFn<In>, input: In, local?: readonly [string, string][], simple = false): Promise<Out> {
  const st = statement(schema, f, input, local);
  let rows;
  try {
    rows = simple ? await exec.query(inlined(st)) : await exec.query(st.text, st.params);
  } catch (err) {
    throw mapError(err, schema);
  }
  return reply<Out>(rows, f.name, f.shape);
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
  status: [{ queue: string | null; staleAfter: number }, QueueStatus[]];
  tick: [{ queue: string; force: boolean }, { tick: string | null }];
  maintain: [{ queue: string; forceRotate: boolean }, MaintainReport];
  send: [{ queue: string; type: string; payload: unknown; key: string | null; dedupKey: string | null; ttl: number | null; trace: string | null }, SendResult];
  /** An entry per event: a bare id when it could not be deduplicated (no dedup key), else `{ id, deduped }`. */
  sendBatch: [{ queue: string; events: readonly unknown[]; trace: string | null }, (string | SendResult)[]];
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
  prepareExclusive: [QC & { chunkSize: number }, { tick: string | null }];
  /** A plain batch as JSON objects (SQL callers and tests; the client reads receivePlain). */
  receive: [QC & { maxEvents: number }, Received];
  /** Plain batches in the compact wire form (wire.ts); waits up to `waitMs` for a held cursor. */
  receivePlain: [QC & { maxEvents: number; waitMs: number }, PlainBatch];
  receiveExclusive: [QC & { maxEvents: number }, Received];
  receiveOrdered: [QC & { slots: number[]; maxEvents: number; helpAfter: number | null; slotCount: number }, Received];
  ack: [QC & { slot: number; outcome: AckOutcome }, AckReply];
  fence: [QC & { slot: number; keys: string[]; holder: string; ms: number }, string[]];
  unfence: [QC & { holder: string }, number];
  slotOf: [QC & { key: string | null; n: number }, number];
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

/** Every engine function the TypeScript calls, by TS name. */
export const ENGINE: { readonly [K in keyof EngineCalls]: EngineFn<EngineCalls[K][0]> } = {
  createQueue: fn("create_queue", [
    ["queue", "queue", "text"],
    ["settings", "settings", "jsonb"],
  ]),
  updateQueue: fn("update_queue", [
    ["queue", "queue", "text"],
    ["settings", "settings", "jsonb"],
  ]),
  dropQueue: fn("drop_queue", [["queue", "queue", "text"]]),
  listQueues: fn("list_queues", []),
  status: fn("status", [
    ["queue", "queue", "text"],
    ["staleAfter", "stale_after", "float8"],
  ]),
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
  ]),
  sendBatch: fn("send_batch", [["queue", "queue", "text"], ["events", "events", "jsonb"], ["trace", "trace", "text"]], isSent),
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
    ["limit", "lim", "int"],
  ], (x) => Array.isArray(x)),
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
  unsubscribe: fn("unsubscribe", [["queue", "queue", "text"], ["consumer", "consumer", "text"]]),
  prepareExclusive: fn("prepare_exclusive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["chunkSize", "chunk_size", "int"],
  ], tickShape),
  receive: fn("receive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["maxEvents", "max_events", "int"],
  ], receiveShape),
  receivePlain: fn("receive_plain", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["maxEvents", "max_events", "int"],
    ["waitMs", "wait_ms", "int"],
  ], isPlainBatch, [], "text"),
  receiveExclusive: fn("receive_exclusive", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["maxEvents", "max_events", "int"],
  ], receiveShape),
  receiveOrdered: fn("receive_ordered", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["slots", "slots", "int[]"],
    ["maxEvents", "max_events", "int"],
    ["helpAfter", "help_after", "float8"],
    ["slotCount", "slot_count", "int"],
  ], receiveShape, [{ sql: "skip_try_lock", type: "boolean" }]),
  ack: fn("ack", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["slot", "s", "int"],
    ["outcome", "outcome", "jsonb"],
  ], fields({ retried: "number", deadLettered: "number", deferred: "number" })),
  fence: fn("fence", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["slot", "s", "int"],
    ["keys", "keys", "text[]"],
    ["holder", "holder", "text"],
    ["ms", "ms", "float8"],
  ], isStrings),
  unfence: fn("unfence", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["holder", "holder", "text"],
  ], isNumber),
  slotOf: fn("consumer_slot_of", [
    ["queue", "queue", "text"],
    ["consumer", "consumer", "text"],
    ["key", "key", "text"],
    ["n", "n", "int"],
  ]),
  blockedKeys: fn("blocked_keys", [["queue", "queue", "text"], ["consumer", "consumer", "text"]]),
  dlqList: fn("dlq_list", [["filter", "filter", "jsonb"], ["limit", "lim", "int"]]),
  dlqCount: fn("dlq_count", [["filter", "filter", "jsonb"]]),
  dlqReplay: fn("dlq_replay", [["ids", "ids", "jsonb"]]),
  dlqReplayWhere: fn("dlq_replay_where", [["filter", "filter", "jsonb"]]),
  dlqPurge: fn("dlq_purge", [["filter", "filter", "jsonb"]]),
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
  grants: fn("list_grants", [], (x) => Array.isArray(x) && x.every(grantShape)),
};

/**
 * Engine functions the TypeScript never calls: helpers of the functions
 * above, and `tick_all`/`rotate` for SQL callers (pg_cron). The API test
 * requires every function of a migrated schema to be in ENGINE or here.
 */
export const INTERNAL_FUNCTIONS: readonly string[] = [
  "apply_queue_settings", "backoff", "block_key", "check_slots", "chunk_events", "claim_chunk", "claim_dedup",
  "consumer_buckets", "dedup_gc", "dlq_check", "dlq_requeue", "dlq_where", "ensure_slot_index", "event_json", "event_row",
  "get_consumer", "get_queue", "has_pending", "key_budget", "key_seed", "keys_prefix", "lock_key", "lock_keys",
  "park_events", "plan_chunks", "prune_ticks", "read_chunk_part",
  "queue_json", "read_window", "release_heads", "release_key", "retry_policy", "rotate", "slot_of",
  "table_unread", "take_retries", "tick_all", "window_count", "window_events", "window_events_slot", "window_take", "xbuckets",
  // least privilege (functions/00_roles.sql)
  "apply_grants", "authorize", "caller", "entry_functions", "permits", "role_json", "role_oid",
  // 07_positions.sql and 05_status.sql helpers
  "floor_after", "floor_of", "key_events", "out_of_range", "place_cursors", "position_json", "resolve_position",
  "retained_json", "tick_now",
];

// ---------------------------------------------------------------- typed calls

type Name = keyof EngineCalls;
type In<K extends Name> = EngineCalls[K][0];
type Out<K extends Name> = EngineCalls[K][1];
type Receiving = "receive" | "receivePlain" | "receiveExclusive" | "receiveOrdered";

/** A typed call of one engine function. */
export type Call<K extends Name> = (exec: Executor, schema: string, input: In<K>) => Promise<Out<K>>;

/** Transaction-local settings a receive sets in its own statement. */
export interface LocalTimeouts {
  /** `statement_timeout`, e.g. `"30000ms"`. */
  statement: string;
  /** `idle_in_transaction_session_timeout`. */
  idleInTransaction: string;
}

/** A receive call that also sets the batch's local timeouts (one round trip). */
export type Receive<K extends Name> = (exec: Executor, schema: string, input: In<K>, local: LocalTimeouts) => Promise<Out<K>>;

const call = <K extends Name>(k: K): Call<K> => (exec, schema, input) => run<In<K>, Out<K>>(exec, schema, ENGINE[k] as EngineFn<In<K>>, input);

/** A call a run sends once per connection: by the simple protocol, parameters inlined (see `inlined`). */
const once = <K extends Name>(k: K): Call<K> => (exec, schema, input) => run<In<K>, Out<K>>(exec, schema, ENGINE[k] as EngineFn<In<K>>, input, undefined, true);

const receiveCall = <K extends Receiving>(k: K): Receive<K> => (exec, schema, input, local) =>
  run<In<K>, Out<K>>(exec, schema, ENGINE[k] as EngineFn<In<K>>, input, [
    ["statement_timeout", local.statement],
    ["idle_in_transaction_session_timeout", local.idleInTransaction],
  ]);

/** The typed engine calls, one per declaration. */
export const engine: { readonly [K in Name]: K extends Receiving ? Receive<K> : Call<K> } = {
  createQueue: call("createQueue"),
  updateQueue: call("updateQueue"),
  dropQueue: call("dropQueue"),
  listQueues: call("listQueues"),
  status: call("status"),
  tick: once("tick"),
  maintain: once("maintain"),
  send: call("send"),
  sendBatch: call("sendBatch"),
  subscribe: once("subscribe"),
  unsubscribe: call("unsubscribe"),
  seek: call("seek"),
  keyHistory: call("keyHistory"),
  replayKey: call("replayKey"),
  setPaused: call("setPaused"),
  settleHead: call("settleHead"),
  prepareExclusive: once("prepareExclusive"),
  receive: receiveCall("receive"),
  receivePlain: receiveCall("receivePlain"),
  receiveExclusive: receiveCall("receiveExclusive"),
  receiveOrdered: receiveCall("receiveOrdered"),
  ack: call("ack"),
  fence: call("fence"),
  unfence: call("unfence"),
  slotOf: call("slotOf"),
  blockedKeys: call("blockedKeys"),
  dlqList: call("dlqList"),
  dlqCount: call("dlqCount"),
  dlqReplay: call("dlqReplay"),
  dlqReplayWhere: call("dlqReplayWhere"),
  dlqPurge: call("dlqPurge"),
  grant: call("grant"),
  revoke: call("revoke"),
  grants: call("grants"),
};
