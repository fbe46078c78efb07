/**
 * `Bun.SQL` adapter (Bun's built-in Postgres client). Typed structurally;
 * this module does not import `"bun"`.
 *
 * @module
 */
import type { Executor, Row, SqlParam, TxDriver } from "../driver.ts";
import { KeyqError } from "../errors.ts";
import { poolerError, wentAstray } from "./internal/shared.ts";

/** The part of a `Bun.SQL` instance or transaction the adapter uses. */
export interface BunSqlQueryable {
  /** `sql.unsafe(text, values)`; without values the text may hold several statements. */
  unsafe(text: string, values?: SqlParam[]): PromiseLike<unknown[]>;
}

/** The part of a `Bun.SQL` instance the adapter uses. */
export interface BunSqlLike extends BunSqlQueryable {
  /** `sql.begin(fn)`: BEGIN … COMMIT on one reserved connection, ROLLBACK on a throw. */
  begin(fn: (tx: BunSqlQueryable) => Promise<{ value: unknown }>): PromiseLike<{ value: unknown }>;
  /** The client's settings: `max` is its pool size; `prepare` (default true) names its statements. */
  readonly options?: { readonly max?: number; readonly prepare?: boolean };
}

/**
 * Bun puts its own code in `code` (`ERR_POSTGRES_SERVER_ERROR`) and the SQLSTATE
 * in `errno`. Rethrow server errors with `code` = SQLSTATE (and `bunCode`, `cause`).
 */
function normalise(err: unknown): unknown {
  const e = err as { errno?: unknown; code?: unknown; message?: unknown } | null;
  if (!e || typeof e.errno !== "string" || e.code === e.errno) return err;
  const out = new Error(String(e.message), { cause: err });
  return Object.assign(out, { ...e, name: "PostgresError", code: e.errno, bunCode: e.code });
}

/**
 * Bun JSON-encodes a string bound to a `json`/`jsonb` parameter, storing a JSON
 * string scalar instead of the document (oven-sh/bun#28819). Casting through
 * `text` makes the parameter a text one, which Bun sends verbatim.
 */
const viaText = (text: string): string => text.replace(/(\$\d+)\s*::\s*(jsonb?)\b/gi, "$1::text::$2");

/**
 * With `prepare: true` (Bun's default) every statement with values is a
 * named prepared statement ("P0", "P1", … per connection); behind a
 * transaction-mode pooler they go astray (shared.ts), and those errors
 * become PREPARED_STATEMENTS_UNSUPPORTED.
 */
const astray = (err: unknown, prepared: boolean): boolean => prepared && wentAstray(err, true);

const astrayError = (cause: unknown): KeyqError => poolerError("Bun.SQL", "new Bun.SQL(url, { prepare: false })", cause);

/** A tagged-template call of a Bun.SQL instance, transaction or reserved connection. */
type Tag = (strings: TemplateStringsArray) => PromiseLike<unknown[]>;

/**
 * keyq's fixed savepoint texts (savepoint.ts) as tagged templates: Bun sends a
 * tagged query as a (named) prepared statement, and pipelines prepared
 * statements issued together in one write once each is prepared on the
 * connection, while it sends a text without values by the simple protocol
 * and waits for its answer first (measured, Bun 1.4.5). So a handler's
 * SAVEPOINT (and the RELEASE before it) travels with the statement that
 * follows it. Each text of several statements is split. (BEGIN and COMMIT
 * are `sql.begin`'s own, which hears a lost connection at once; a chain of
 * batches on `sql.reserve()` with tagged BEGIN/COMMIT would pipeline them
 * too, but nothing tells a reserved connection's queries that it closed.)
 */
const CONTROL: Record<string, readonly ((t: Tag) => PromiseLike<unknown[]>)[]> = {
  "savepoint keyq_event": [(t) => t`savepoint keyq_event`],
  "release savepoint keyq_event": [(t) => t`release savepoint keyq_event`],
  "release savepoint keyq_event; savepoint keyq_event": [(t) => t`release savepoint keyq_event`, (t) => t`savepoint keyq_event`],
  "rollback to savepoint keyq_event; release savepoint keyq_event": [
    (t) => t`rollback to savepoint keyq_event`,
    (t) => t`release savepoint keyq_event`,
  ],
};

/** Issues a control text's statements together (one write); resolves to the last one's result. */
function control(q: BunSqlQueryable, text: string): PromiseLike<unknown[]> | undefined {
  const parts = typeof q === "function" ? CONTROL[text] : undefined;
  if (!parts) return undefined;
  const sent = parts.map((f) => Promise.resolve(f(q as unknown as Tag)));
  sent.forEach((p) => p.catch(() => {}));
  return Promise.all(sent).then((all) => all.at(-1)!);
}

async function run(q: BunSqlQueryable, text: string, params: readonly SqlParam[] | undefined, prepare: boolean): Promise<Row[]> {
  try {
    const res = params === undefined ? await (control(q, text) ?? q.unsafe(text)) : await q.unsafe(viaText(text), [...params]);
    // Several statements resolve to an array of result arrays: return the last one's rows.
    if (params === undefined && Array.isArray(res[0])) return [...(res.at(-1) as Row[])];
    return [...(res as Row[])];
  } catch (err) {
    const e = normalise(err);
    throw astray(e, prepare && params !== undefined) ? astrayError(e) : e;
  }
}

/**
 * Wraps a `Bun.SQL` instance (Postgres). Transactions use `sql.begin`, which
 * reserves one pooled connection; server errors are rethrown with the SQLSTATE
 * in `code` (Bun's own code moves to `bunCode`, the original is `cause`).
 * Parameters cast as `$n::json`/`$n::jsonb` are sent as `$n::text::jsonb`, so
 * JSON text arrives as a document (a bare `$n` in a jsonb column would not).
 *
 * @example
 * ```ts
 * import { fromBunSql } from "@keyq/keyq/bun-sql";
 * const sql = new Bun.SQL("postgres://postgres@127.0.0.1:5432/test");
 * const db = fromBunSql(sql);
 * await db.transaction((tx) => tx.query("select $1::text as hi", ["hello"]));
 * await sql.close();
 * ```
 */
export function fromBunSql(sql: BunSqlLike): TxDriver {
  const prepare = sql.options?.prepare !== false;
  const transaction = bunTransaction(sql, prepare);
  return {
    name: "bun-sql",
    connections: sql.options?.max,
    query: (text, params) => run(sql, text, params, prepare),
    // A Bun.SQL transaction (the `tx` of sql.begin, or a savepoint scope) has
    // `savepoint`; the top-level `sql`, whose queries autocommit, has not.
    adopt: (native) => {
      const t = native as Record<string, unknown> | null;
      return typeof native === "function" && typeof t!.unsafe === "function" && typeof t!.savepoint === "function"
        ? { query: (text, params) => run(native as unknown as BunSqlQueryable, text, params, prepare) }
        : undefined;
    },
    transaction,
  };
}

function bunTransaction(sql: BunSqlLike, prepare: boolean): TxDriver["transaction"] {
  return async <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => {
    // The first statement that went astray: a handler may catch its error
    // (keyq isolates handler failures), so the transaction reports it.
    let wrong: KeyqError | undefined;
    const query = (tx: BunSqlQueryable): Executor["query"] => (t, p) =>
      run(tx, t, p, prepare).catch((err: unknown) => {
        if (err instanceof KeyqError && err.code === "PREPARED_STATEMENTS_UNSUPPORTED") wrong ??= err;
        throw err;
      });
    // Boxed: `begin` would await the items of an array that `fn` returns.
    try {
      const box = await sql.begin(async (tx) => ({ value: await fn({ query: query(tx) }) }));
      return box.value as T;
    } catch (err) {
      throw wrong ?? normalise(err); // BEGIN/COMMIT failures; errors already normalised pass through
    }
  };
}
