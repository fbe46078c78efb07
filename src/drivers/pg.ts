/**
 * node-postgres (`pg`) adapter, typed structurally: it imports nothing from `pg`.
 * @module
 */
import { type Driver, type Executor, pairChain, type Row, type SqlParam, type TxChain, type TxDriver } from "../driver.ts";
import { KeyqError } from "../errors.ts";

/** The part of a `pg` `Client` the adapter uses. */
export interface PgClientLike {
  /** Without values: the simple protocol, an array of results for several statements. */
  query(text: string, values?: SqlParam[]): Promise<{ rows: Row[] } | { rows: Row[] }[]>;
  /** A `Client` emits `error` when its connection is lost: a transaction then aborts its `signal`. */
  on?(event: "error", listener: (err: Error) => void): unknown;
  /** Removes the listener again. */
  removeListener?(event: "error", listener: (err: Error) => void): unknown;
}

/** A notification as pg emits it on a client. */
interface Notice {
  channel: string;
  payload?: string;
}

/** A client that emits `notification` (every pg `Client`). */
interface Notifying {
  on(event: "notification", listener: (m: Notice) => void): unknown;
  removeListener(event: "notification", listener: (m: Notice) => void): unknown;
}

/** A client checked out of a pool. */
export interface PgPoolClientLike extends PgClientLike {
  /** Back to the pool; with an error the pool discards the connection. */
  release(err?: Error | boolean): void;
  /** A connection lost while checked out emits `error`: unheard, it crashes the process. */
  on(event: "error", listener: (err: Error) => void): unknown;
  /** Removes the listener again. */
  removeListener(event: "error", listener: (err: Error) => void): unknown;
}

/** The part of a `pg` `Pool` the adapter uses (`totalCount` tells it from a `Client`). */
export interface PgPoolLike extends PgClientLike {
  /** Checks one client out. */
  connect(): Promise<PgPoolClientLike>;
  /** The number of connections. */
  readonly totalCount: number;
  /** The pool's settings; `max` is its size. */
  readonly options?: { readonly max?: number };
  /** An idle client that loses its connection emits `error` on the pool: unheard, it crashes Node. */
  on?(event: "error", listener: (err: Error) => void): unknown;
  /** How many listeners an event has. */
  listenerCount?(event: "error"): number;
}

async function run(c: PgClientLike, text: string, params?: readonly SqlParam[]): Promise<Row[]> {
  const res = params === undefined ? await c.query(text) : await c.query(text, [...params]);
  return Array.isArray(res) ? (res.at(-1)?.rows ?? []) : res.rows; // several statements: the last one's rows
}

/** pg's protocol connection, as a submittable query sees it (pg and Neon's bundled copy alike). */
interface PgConnectionLike {
  parse(q: { text: string }): void;
  bind(b: Record<string, never>): void;
  execute(e: Record<string, never>): void;
  stream?: { cork?(): void; uncork?(): void };
}

/** pg's `Query`, the class a `Client` exports as `Client.Query`. */
interface PgQueryLike {
  submit(con: PgConnectionLike): Error | null;
  handleCommandComplete(msg: unknown, con: PgConnectionLike): void;
  [handler: string]: unknown;
}
type PgQueryClass = new (
  config: { text: string; values: SqlParam[] },
  values: undefined,
  cb: (err: Error | null, res?: { rows: Row[] }) => void,
) => PgQueryLike;

/** What a client's extended-protocol query passes through to pg's own `Query` unchanged. */
const DELEGATED = [
  "handleRowDescription",
  "handleDataRow",
  "handleEmptyQuery",
  "handleError",
  "handleReadyForQuery",
  "handlePortalSuspended",
  "handleCopyInResponse",
  "handleCopyData",
];

/**
 * `Client.Query` of a client that can take a submittable query object: not in
 * pg's `pipeline` mode (which refuses them; it pipelines queries by itself)
 * nor `binary` mode. Undefined for anything else (a stand-in client).
 */
function queryClass(c: PgClientLike): PgQueryClass | undefined {
  const x = c as { constructor?: { Query?: unknown }; pipeline?: unknown; binary?: unknown; connection?: { parse?: unknown } };
  const Q = x.constructor?.Query;
  // pg's JavaScript client only (pg-native's client has no protocol connection to write to).
  const js = typeof x.connection?.parse === "function";
  return typeof Q === "function" && js && x.pipeline !== true && !x.binary ? (Q as PgQueryClass) : undefined;
}

/**
 * Runs `prefix` (statements without parameters and results: BEGIN,
 * SAVEPOINT, RELEASE) and then `text` in one network write and one answer:
 * Parse/Bind/Execute of each prefix statement, then pg's own `Query` for
 * `text` (Parse/Bind/Describe/Execute/Sync). node-postgres waits for
 * ReadyForQuery between queries (pg's `pipeline` mode aside, which Neon's
 * copy lacks), so two queries cost two round trips; one Sync here costs one.
 * When a prefix statement fails the server skips the rest up to the Sync,
 * and the query rejects with that error. `tags` gets the command tag of
 * each prefix statement that completed (a held COMMIT's answer).
 */
function prefixed(
  c: PgClientLike,
  Q: PgQueryClass,
  prefix: readonly string[],
  text: string,
  params: readonly SqlParam[],
  tags: string[] = [],
): Promise<{ rows: Row[] }> {
  return new Promise((resolve, reject) => {
    const inner = new Q({ text, values: [...params] }, undefined, (err, res) => (err ? reject(err) : resolve(res!)));
    // The client's own type parsers, as it sets them on the queries it is given.
    const result = inner._result as { _types?: unknown } | undefined;
    if (result && !result._types) result._types = (c as { _types?: unknown })._types;
    let skip = prefix.length; // the prefix statements' CommandComplete messages
    const q: Record<string, unknown> = {
      text,
      submit(con: PgConnectionLike) {
        con.stream?.cork?.();
        try {
          for (const p of prefix) con.parse({ text: p }), con.bind({}), con.execute({});
          return inner.submit(con);
        } finally {
          con.stream?.uncork?.();
        }
      },
      handleCommandComplete: (msg: unknown, con: PgConnectionLike) =>
        skip > 0 ? void (skip--, tags.push(String((msg as { text?: unknown }).text))) : inner.handleCommandComplete(msg, con),
    };
    for (const h of DELEGATED) q[h] = (...args: unknown[]) => (inner[h] as (...a: unknown[]) => unknown)(...args);
    (c.query as unknown as (q: unknown) => unknown)(q);
  });
}

/**
 * The executor of a transaction on `c` whose BEGIN has not been sent: it
 * travels with the first statement (one round trip for both). A SAVEPOINT
 * (and the RELEASE before it) that keyq sends right before a statement
 * (savepoint.ts) waits a microtask for that statement and travels with it.
 */
function lazyBegin(c: PgClientLike, prior?: Held): { query: Executor["query"]; begun(): boolean; flush(): Promise<void> } {
  const Q = queryClass(c);
  let begun = false;
  /** Sends the previous transaction's held COMMIT alone (when the first statement cannot carry it). */
  const flush = async (): Promise<void> => {
    const h = prior;
    prior = undefined;
    if (h) await commitAlone(c, h);
  };
  let held: { parts: string[]; settle: (p: Promise<unknown>) => void } | undefined;
  const send = (prefix: string[], text: string, params?: readonly SqlParam[]): Promise<Row[]> => {
    if (prefix.length === 0) return run(c, text, params);
    if (!params?.length) return run(c, `${prefix.join("; ")}; ${text}`, params?.length === 0 ? undefined : params); // the simple protocol: one text
    if (Q) return prefixed(c, Q, prefix, text, params).then((r) => r.rows);
    // pg's pipeline mode sends queued queries at once; otherwise one round trip each.
    const first = run(c, prefix.join("; "));
    first.catch(() => {});
    const out = run(c, text, params);
    out.catch(() => {});
    return first.then(() => out);
  };
  const query: Executor["query"] = async (text, params) => {
    if (!begun && prior && Q && params?.length && !held) {
      // The held COMMIT, BEGIN and this statement: one write, one Sync.
      const h = prior;
      prior = undefined;
      begun = true;
      const tags: string[] = [];
      const out = prefixed(c, Q, ["commit", "begin"], text, params, tags).then((r) => r.rows);
      return await out.then((rows) => (h.answered(tags[0], undefined), rows), (err) => {
        h.answered(tags[0], err);
        throw err;
      });
    }
    // Otherwise the held COMMIT goes first, not awaited: pg sends queued queries in order (all at once in its pipeline mode).
    if (!begun && prior) void flush();
    const prefix = begun ? [] : ["begin"];
    begun = true;
    if (held) {
      const h = held;
      held = undefined;
      const out = send([...prefix, ...h.parts], text, params);
      h.settle(out);
      return out;
    }
    if (params === undefined && SAVEPOINTS.test(text) && prefix.length === 0) {
      return new Promise<Row[]>((resolve, reject) => {
        const mine = { parts: text.split(/;\s*/), settle: (p: Promise<unknown>) => p.then(() => resolve([]), reject) };
        held = mine;
        queueMicrotask(() => {
          if (held !== mine) return;
          held = undefined;
          mine.settle(run(c, text));
        });
      });
    }
    return send(prefix, text, params);
  };
  return { query, begun: () => begun, flush };
}

/** A transaction whose COMMIT is held until the next one's first statement (chain). */
interface Held {
  /** The COMMIT's command tag (undefined when it did not complete) and the error of the write that carried it. */
  answered(tag: string | undefined, err: unknown): void;
}

/** Sends a held COMMIT by itself. */
async function commitAlone(c: PgClientLike, h: Held): Promise<void> {
  try {
    const r = (await c.query("commit")) as { command?: string };
    h.answered(r.command ?? "COMMIT", undefined);
  } catch (err) {
    h.answered(undefined, err);
  }
}

/** keyq's own savepoint texts (savepoint.ts) that may wait for the statement they open. */
const SAVEPOINTS = /^(release savepoint \w+;\s*)?savepoint \w+$/i;

/**
 * BEGIN … COMMIT on `c`; ROLLBACK when anything throws; `broken` hears of a
 * failed ROLLBACK. `signal` (aborted when the connection is lost) is handed
 * to the transaction's executor. BEGIN goes with the first statement; a
 * transaction that ran none sends nothing.
 */
async function inTx<T>(
  c: PgClientLike,
  fn: (tx: Executor) => Promise<T>,
  broken: (e: Error) => void,
  signal?: AbortSignal,
): Promise<T> {
  const tx = lazyBegin(c);
  try {
    const out = await fn({ query: tx.query, ...(signal ? { signal } : {}) });
    if (tx.begun()) await c.query("commit");
    return out;
  } catch (e) {
    if (tx.begun()) await c.query("rollback").catch(broken);
    throw e;
  }
}

/** The error of a held COMMIT that answered ROLLBACK (the transaction had failed). */
function rolledBack(tag: string): Error {
  return Object.assign(new Error(`keyq: the transaction's COMMIT answered ${tag}: it was aborted and rolled back.`), { code: "25P02" });
}

/**
 * Transactions in a row on one checked-out client of `pool` (Driver.chain):
 * each COMMIT is held and sent with the next transaction's BEGIN and first
 * statement in one Sync (lazyBegin), or alone by `end()`. When the COMMIT
 * fails there, the server skips that BEGIN and statement, which reject
 * with the COMMIT's error. A lost connection (the client's `error`) rejects
 * the held COMMIT's transaction and aborts the running one's signal.
 */
function poolChain(pool: PgPoolLike): TxChain {
  let client: PgPoolClientLike | undefined;
  let failure: Error | undefined;
  let ctl = new AbortController();
  let held: (Held & { fail(e: unknown): void }) | undefined;
  const broken = (e: Error) => {
    failure ??= e;
    ctl.abort(e);
    held?.fail(e);
    held = undefined;
  };
  const checkout = async (): Promise<PgPoolClientLike> => {
    if (!client) {
      client = await pool.connect();
      client.on("error", broken);
    }
    if (failure) throw failure;
    return client;
  };
  return {
    async transaction<T>(fn: (tx: Executor) => Promise<T>, onHeld: () => void): Promise<T> {
      const prior = held;
      held = undefined;
      let c: PgPoolClientLike;
      try {
        c = await checkout();
      } catch (err) {
        prior?.fail(err);
        throw err;
      }
      ctl = new AbortController();
      const tx = lazyBegin(c, prior);
      let out: T;
      try {
        out = await fn({ query: tx.query, signal: ctl.signal });
      } catch (e) {
        await tx.flush(); // a held COMMIT this transaction did not carry
        if (tx.begun() && !failure) await c.query("rollback").catch(broken);
        throw e;
      }
      await tx.flush();
      if (!tx.begun()) return out;
      if (failure) throw failure;
      return await new Promise<T>((resolve, reject) => {
        const fail = (e: unknown) => reject(e);
        held = {
          fail,
          answered: (tag, err) => (tag === "COMMIT" ? resolve(out) : fail(tag === undefined ? err : rolledBack(tag))),
        };
        onHeld();
      });
    },
    async end(): Promise<void> {
      const h = held;
      held = undefined;
      const c = client;
      client = undefined;
      if (!c) return;
      try {
        if (h && !failure) await commitAlone(c, h);
        else if (h) h.fail(failure);
      } finally {
        c.removeListener("error", broken);
        c.release(failure);
      }
    },
  };
}

/** Reports an idle pool client's lost connection instead of letting it crash the process. */
function idleError(err: Error): void {
  console.warn(`keyq/pg: an idle pool connection was lost (${err.message}); the pool replaces it.`);
}

/**
 * A `pg` client (pooled or not) joins the caller's transaction when its
 * protocol status says one is open ("T"); pg reports it as
 * `getTransactionStatus()` (pg 8.23 has it; a client without it is refused). A pool is no transaction.
 */
function adopt(native: unknown): Executor | undefined {
  const c = native as { query?: unknown; getTransactionStatus?: unknown; totalCount?: unknown } | null;
  if (!c || typeof c !== "object" || typeof c.query !== "function" || typeof c.getTransactionStatus !== "function") return undefined;
  if ("totalCount" in c) return undefined;
  const status = (c.getTransactionStatus as () => unknown).call(c);
  if (status === "T") return { query: (text, params) => run(c as PgClientLike, text, params) };
  throw new KeyqError(
    "INVALID_INPUT",
    status === "E"
      ? 'Option "tx" is a pg client whose transaction has failed; roll it back and start again.'
      : 'Option "tx" is a pg client that is not inside a transaction, so the event would commit on its own; run BEGIN on it first.',
    { field: "tx", status },
  );
}

/** A channel name as a quoted identifier. */
const ident = (s: string) => `"${s.replaceAll('"', '""')}"`;

/**
 * LISTEN for a driver on one connection shared by every channel and caller
 * (`open` gives it and the function that hands it back); the connection is
 * returned when the last caller unlistens.
 */
function sharedListen(
  open: (lost: () => void) => Promise<{ c: PgClientLike & Notifying; q: (text: string) => Promise<unknown>; close: () => void }>,
): NonNullable<Driver["listen"]> {
  const subs = new Map<string, Set<(payload: string) => void>>();
  let conn: ReturnType<typeof open> | undefined;
  const hear = (m: Notice) => subs.get(m.channel)?.forEach((f) => f(m.payload ?? ""));
  return async (channel, fn) => {
    // A lost connection is forgotten: its listeners hear nothing more (work() polls on as its backstop).
    const lost = () => {
      if (conn === mine) conn = undefined;
      subs.clear();
    };
    const mine = conn ??= open(lost).then((x) => (x.c.on("notification", hear), x));
    const it = mine;
    const { c, q, close } = await it;
    let set = subs.get(channel);
    if (!set) {
      subs.set(channel, set = new Set());
      await q(`listen ${ident(channel)}`);
    }
    set.add(fn);
    return async () => {
      if (!set.delete(fn) || set.size > 0) return;
      subs.delete(channel);
      await q(`unlisten ${ident(channel)}`).catch(() => {});
      if (subs.size === 0 && conn === it) {
        conn = undefined;
        c.removeListener("notification", hear);
        close();
      }
    };
  };
}

function poolDriver(pool: PgPoolLike): TxDriver {
  const transaction = poolTransaction(pool);
  if (pool.on && pool.listenerCount && pool.listenerCount("error") === 0) pool.on("error", idleError);
  return {
    name: "pg",
    connections: pool.options?.max,
    adopt,
    query: (text, params) => run(pool, text, params),
    // One checked-out client listens for every caller of this driver.
    listen: sharedListen(async (forget) => {
      const c = await pool.connect();
      let gone = false;
      const lost = (e: Error) => {
        idleError(e);
        if (gone) return;
        gone = true;
        forget();
        c.release(e);
      };
      c.on("error", lost);
      return {
        c: c as PgPoolClientLike & Notifying,
        q: (text) => c.query(text),
        close: () => {
          c.removeListener("error", lost);
          c.release();
        },
      };
    }),
    chain: pairChain(transaction, () => poolChain(pool)),
    transaction,
  };
}

function poolTransaction(pool: PgPoolLike): TxDriver["transaction"] {
  return async <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => {
    const client = await pool.connect();
    let failure: Error | undefined;
    const lost = new AbortController();
    const broken = (e: Error) => {
      failure ??= e;
      lost.abort(e);
    };
    client.on("error", broken);
    try {
      return await inTx(client, fn, broken, lost.signal);
    } finally {
      client.removeListener("error", broken);
      client.release(failure);
    }
  };
}

function clientDriver(client: PgClientLike): TxDriver {
  let turn: Promise<unknown> = Promise.resolve();
  const serial = <T>(job: () => Promise<T>): Promise<T> => {
    const next = turn.then(job, job);
    turn = next.catch(() => undefined);
    return next;
  };
  return {
    name: "pg",
    connections: 1,
    adopt,
    query: (text, params) => serial(() => run(client, text, params)),
    // The client itself listens: notifications arrive between its queries.
    ...(typeof (client as Partial<Notifying>).removeListener === "function"
      ? {
        listen: sharedListen(() => Promise.resolve({ c: client as PgClientLike & Notifying, q: (text) => serial(() => client.query(text)), close: () => {} })),
      }
      : {}),
    // The owner listens for the client's errors too; this listener only tells the
    // running transaction that its connection is gone, so no further handler starts.
    transaction: <T>(fn: (tx: Executor) => Promise<T>): Promise<T> =>
      serial(async () => {
        const lost = new AbortController();
        const broken = (e: Error) => lost.abort(e);
        client.on?.("error", broken);
        try {
          return await inTx(client, fn, () => {}, lost.signal);
        } finally {
          client.removeListener?.("error", broken);
        }
      }),
  };
}

/**
 * Wraps a node-postgres `Pool` or connected `Client`. With a `Pool` each
 * transaction runs on one checked-out client, and a broken one is discarded;
 * a client lost mid-transaction aborts the transaction's `signal` at once.
 * When the pool has no `error` listener, one is added that logs a warning:
 * without it an idle client that loses its connection crashes Node.
 * A `Client` is one connection: the driver serialises its queries and
 * transactions (inside `transaction(fn)` use only `tx`); its owner handles its `error` events.
 *
 * @example
 * ```ts
 * import pg from "pg";
 * import { fromPg } from "@keyq/keyq/pg";
 * const pool = new pg.Pool({ connectionString: "postgres://postgres@127.0.0.1:5432/test" });
 * console.log(await fromPg(pool).query("select $1::text as hi", ["hello"]));
 * await pool.end();
 * ```
 */
export function fromPg(poolOrClient: PgPoolLike | PgClientLike): TxDriver {
  return "totalCount" in poolOrClient ? poolDriver(poolOrClient) : clientDriver(poolOrClient);
}
