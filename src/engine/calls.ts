/**
 * The typed seam to the SQL engine: `engine(exec, schema)` binds every
 * engine function declared in declarations.ts to one executor and schema,
 * as one method per declaration. Nothing outside src/engine/ names an
 * engine function or builds an argument list.
 *
 * The wire is `select "schema".fn(a => $1::text::t, …)::text as r`: every
 * value is a text bind parameter cast by the statement, the reply one JSON
 * text column, checked against the declaration's shape (reply.ts).
 *
 * @module
 */

import type { Executor, SqlParam } from "../driver.ts";
import { mapError, reply } from "./reply.ts";
import { ENGINE, type EngineCalls, type EngineFn, type SqlType } from "./declarations.ts";
export * from "./declarations.ts";
export type { Received, WireEvent } from "./wire.ts";

/** Characters an element of an array literal must escape inside its double quotes. */
const ARRAY_ESCAPE = /["\\]/;

/** One element of a `text[]` literal: quoted (so "NULL" stays text), or NULL for null. */
function textElement(k: string | null): string {
  if (k === null) return "NULL";
  return ARRAY_ESCAPE.test(k) ? `"${k.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"` : `"${k}"`;
}

/** Converts a value to the text a cast of `type` reads. */
function encode(type: SqlType, value: unknown): SqlParam {
  if (type === "jsonb") return JSON.stringify(value) ?? null; // a null payload is JSON null, not SQL NULL
  if (value === null || value === undefined) return null;
  if (type === "int[]") return `{${(value as number[]).join(",")}}`;
  if (type === "float8[]") return `{${(value as (number | null)[]).map((x) => (x === null ? "NULL" : String(x))).join(",")}}`;
  if (type === "text[]") return `{${(value as (string | null)[]).map(textElement).join(",")}}`;
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
 *
 * @example
 * ```ts
 * import { ENGINE, statement } from "./calls.ts";
 * statement("keyq", ENGINE.tick, { queue: "jobs", force: false }).text;
 * // select "keyq".tick(queue => $1::text::text, force => $2::text::boolean)::text as r
 * ```
 */
export function statement<In>(schema: string, f: EngineFn<In>, input: In, local: readonly [string, string][] = []): Statement {
  const list = f.args.map((a, i) => `${a.sql} => $${i + 1}::text::${a.type}`).join(", ");
  const n = f.args.length;
  const params = [...f.args.map((a) => encode(a.type, input[a.key])), ...local.map(([, value]) => value)];
  const settings = local.map(([name], i) => `set_config('${name}', $${n + i + 1}::text, true)`);
  if (f.lines && settings.length > 0) {
    // A set-returning call: settings beside it in the select list would run once per row it returns; from a
    // subquery (offset 0 keeps it one), they run once, before the call.
    return { text: `select "${schema}".${f.name}(${list})::text as r from (select ${settings.join(", ")} offset 0) s`, params };
  }
  const sets = settings.map((s) => `${s}, `).join("");
  return {
    text: `select ${sets}"${schema}".${f.name}(${list})::text as r`,
    params,
  };
}

/** Runs `f` on `exec` and returns its checked reply; engine errors become KeyqErrors. */
async function run<In, Out>(exec: Executor, schema: string, f: EngineFn<In>, input: In, local?: readonly [string, string][]): Promise<Out> {
  const st = statement(schema, f, input, local);
  let rows;
  try {
    rows = await exec.query(st.text, st.params);
  } catch (err) {
    throw mapError(err, schema);
  }
  return reply<Out>(rows, f.name, f.shape, f.parse, f.lines);
}

// ---------------------------------------------------------------- binding

type Name = keyof EngineCalls;
type In<K extends Name> = EngineCalls[K][0];
type Out<K extends Name> = EngineCalls[K][1];
type Receiving = "receive" | "receivePlain" | "receiveExclusive" | "receiveOrdered" | "receiveOrderedWire";

/** Transaction-local settings a receive sets in its own statement. */
export interface LocalTimeouts {
  /** `statement_timeout`, e.g. `"30000ms"`. */
  statement: string;
  /** `idle_in_transaction_session_timeout`. */
  idleInTransaction: string;
}

/** The executor and schema an `Engine` is bound to. */
export interface Bound {
  /** Where the calls run: a pool or one transaction. */
  readonly exec: Executor;
  /** The schema keyq was migrated into. */
  readonly schema: string;
}

/**
 * How a call that is a transaction of its own commits. `"async"` sets
 * `synchronous_commit = off` for that transaction: keyq passes it only for
 * the statements it sends alone on the pool to tick and plan (a worker's
 * tick, `prepare_exclusive`, a `start_run` that does not subscribe). Their
 * commit then does not wait for the WAL flush. Nothing is at risk: a crash
 * can lose only such a transaction whose effects nobody acted on yet, since
 * every batch that reads a tick or claims a chunk commits later,
 * synchronously, and a WAL flush takes all earlier WAL with it. A lost tick
 * or plan is as if it had not run; the next one covers its events.
 */
export type Commit = "async";

/**
 * A bound call of one engine function. Call it as a method (`db.ack(…)`):
 * the compiler refuses a detached call (`this` is the binding).
 */
export type Call<K extends Name> = (this: Bound, input: In<K>, commit?: Commit) => Promise<Out<K>>;

/** A bound receive that also sets the batch's local timeouts (one round trip). */
export type Receive<K extends Name> = (this: Bound, input: In<K>, local: LocalTimeouts) => Promise<Out<K>>;

/** Every engine function bound to one executor and schema. */
export type Engine = Bound & { readonly [K in Name]: K extends Receiving ? Receive<K> : Call<K> };

/**
 * The calls, shared by every binding: each reads its executor and schema
 * from the binding it is called on, so a binding is one small object, not a
 * closure per function (a batch binds its own transaction).
 */
const methods: Record<string, (this: Bound, input: unknown, local?: LocalTimeouts | Commit) => Promise<unknown>> = {};
for (const [k, f] of Object.entries(ENGINE) as [Name, EngineFn<unknown>][]) {
  methods[k] = function (this: Bound, input: unknown, local?: LocalTimeouts | Commit): Promise<unknown> {
    const settings: [string, string][] | undefined = local === "async" ? ASYNC_COMMIT : local && [
      ["statement_timeout", local.statement],
      ["idle_in_transaction_session_timeout", local.idleInTransaction],
    ];
    return run(this.exec, this.schema, f, input, settings);
  };
}

/** The setting of a {@link Commit} `"async"` call. */
const ASYNC_COMMIT: [string, string][] = [["synchronous_commit", "off"]];

/** The last binding of each executor (an executor is used with one schema). */
const bindings = new WeakMap<Executor, Engine>();

/**
 * Binds the engine's functions to `exec` in `schema`. A second call with the
 * same executor and schema returns the same binding.
 *
 * @example
 * ```ts
 * import { engine } from "./calls.ts";
 * const db = engine(driver, "keyq");
 * const { tick } = await db.tick({ queue: "jobs", force: false });
 * ```
 */
export function engine(exec: Executor, schema: string): Engine {
  const had = bindings.get(exec);
  if (had !== undefined && had.schema === schema) return had;
  const db = Object.assign(Object.create(methods) as object, { exec, schema }) as Engine;
  bindings.set(exec, db);
  return db;
}
