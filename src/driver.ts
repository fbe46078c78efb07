/**
 * The one contract every database driver adapter implements.
 *
 * The core speaks to Postgres only through these two shapes, so it imports no
 * driver and runs wherever `fetch`-era JavaScript runs. An adapter is a tiny
 * file in `src/drivers/` that wraps the user's own client.
 *
 * Rules the core relies on (an adapter must keep them):
 * - Parameters arrive as `string | null` only; the SQL casts them
 *   (`$1::int`), so no driver-specific type inference is involved.
 * - Every column the core reads is `text` (the engine returns JSON as text),
 *   so adapters need no type parsers.
 * - `query` without `params` may contain several statements (simple query
 *   protocol); migrations use that.
 *
 * @module
 */

import { KeyqError } from "./errors.ts";

/**
 * Statements from keyq's ORM helpers (`kyselyDialect`, `drizzleProxy`) start
 * with this comment. Their parameters are the ORM's own values (numbers,
 * Dates, objects), not the core's text: an adapter that types the core's
 * parameters as text (postgres.js) passes these as they are, for the server
 * and the driver to type, as the ORM's own driver would.
 */
export const ORM_STATEMENT: string = "/* keyq:orm */ ";

/** A parameter value as the core sends it: always text or SQL NULL. */
export type SqlParam = string | null;

/** One result row, keyed by column name. */
export type Row = Record<string, unknown>;

/**
 * Runs SQL. Inside a transaction it is bound to that transaction.
 *
 * @example
 * ```ts
 * import type { Executor } from "@keyq/keyq";
 * async function count(sql: Executor): Promise<number> {
 *   const rows = await sql.query("select count(*)::text as n from pg_class");
 *   return Number(rows[0]!.n);
 * }
 * ```
 */
export interface Executor {
  /** Runs `text` with bind parameters and resolves to the result rows. */
  query(text: string, params?: readonly SqlParam[]): Promise<Row[]>;
  /**
   * Optional, inside a transaction: runs `fn` in a savepoint; when `fn`
   * throws, its writes are undone, the error is rethrown and the transaction
   * stays usable. Adapters whose driver refuses to commit after any failed
   * query (postgres.js) must provide it; without it keyq issues SAVEPOINT
   * statements itself.
   */
  savepoint?<T>(fn: (sp: Executor) => Promise<T>): Promise<T>;
  /**
   * Optional, inside a transaction: true when plain SAVEPOINT and ROLLBACK
   * TO statements keep the transaction committable after a failed
   * statement (the adapter commits such a transaction itself). keyq then
   * uses them for its per-event savepoints rather than `savepoint`: they
   * travel with the next statement instead of costing a round trip.
   */
  readonly savepointStatements?: boolean;
  /**
   * Optional, inside a transaction: aborts when the driver learns that the
   * transaction's connection is lost (pg emits `error` on the client,
   * postgres.js ends `begin()`), so keyq stops the batch at once instead of
   * at its next query.
   */
  readonly signal?: AbortSignal;
}

/**
 * A database connection or pool as the core sees it. Its `transaction` is
 * optional: a driver without interactive transactions (Neon's HTTP `neon()`)
 * can produce and inspect; consumers, `migrate()` and `q.transaction()` need
 * a {@link TxDriver}, which every other adapter returns.
 *
 * @example
 * ```ts
 * import type { Driver } from "@keyq/keyq";
 * const fake: Driver = { name: "fake", query: async () => [] };
 * console.log(fake.name);
 * ```
 */
export interface Driver extends Executor {
  /** A short name for messages and reports, e.g. `"postgres-js"`. */
  readonly name: string;
  /**
   * Optional: the most connections the driver opens at once (a pool's
   * `max`; 1 for a single client or PGlite), when the adapter knows it.
   * A fenced consumer needs 2 (it leases on a second connection while its
   * batch's transaction holds one) and is refused on a driver with 1.
   */
  readonly connections?: number;
  /**
   * Runs `fn` inside one transaction (BEGIN … COMMIT, ROLLBACK when `fn`
   * throws) on one connection, and resolves to what `fn` returned. Absent
   * on a driver without interactive transactions; a {@link TxDriver} has it.
   */
  transaction?<T>(fn: (tx: Executor) => Promise<T>): Promise<T>;
  /**
   * Optional: transactions in a row on one connection, each one's COMMIT
   * sent in the same network write as the next one's BEGIN and first
   * statement (see {@link TxChain}). A run's batches use it where the
   * adapter offers it; without it each batch is a `transaction`. keyq uses
   * it only when it was made for this driver's very `transaction`
   * ({@link pairChain}): a wrapper that replaces `transaction` and copies
   * the rest of a driver is not bypassed.
   */
  chain?(): TxChain;
  /**
   * Optional: {@link TxDriver.transaction} whose connection first runs what
   * `lead` issues, outside the transaction, in the same network write as
   * BEGIN and `fn`'s first statement. `lead(exec)` is called before `fn`;
   * each statement it issues on `exec` before `fn`'s first runs in its own
   * autocommit transaction, committed before BEGIN; one issued later is
   * refused (rejects). A failed lead statement leaves the transaction to
   * run. A worker woken by a notification ticks this way: the tick commits
   * before the batch's snapshot is taken, and costs no round trip of its
   * own. keyq uses it only when it was made for this driver's very
   * `transaction` ({@link pairChain}), as `chain`.
   */
  transactionAfter?<T>(lead: (exec: Executor) => unknown, fn: (tx: Executor) => Promise<T>): Promise<T>;
  /**
   * Optional: wraps a native transaction object of this driver (the `tx` of
   * postgres.js `sql.begin`, a `pg` client inside BEGIN) as an Executor, so
   * `send(…, { tx })` can join it. Returns undefined for anything else;
   * throws `KeyqError` for this driver's objects that are no open transaction.
   */
  adopt?(native: unknown): Executor | undefined;
  /**
   * Optional, for drivers with a long-lived session: LISTENs on `channel`
   * and calls `onNotify` with each notification's payload until the
   * returned function is called. `work()` uses it to wake up when producers
   * commit; it probes that a notification really arrives (a transaction
   * pooler swallows them) and polls otherwise, so an adapter need not know
   * what sits between it and the server.
   */
  listen?(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
}

/**
 * Transactions in a row on one connection of a driver (`Driver.chain`),
 * whose COMMITs travel with what follows: when a transaction's `fn`
 * resolves, its COMMIT is held and `held` is called; the COMMIT is then
 * sent in the same network write as the next transaction's BEGIN and first
 * statement, or alone by `end()`. Each `transaction` resolves (or rejects)
 * only when its own COMMIT answers, so what it reports is what committed.
 * A COMMIT that fails rejects its transaction; the next transaction then
 * learns it from its own first statement or from the caller. A lost
 * connection rejects the held COMMIT's transaction and the running one.
 * The next `transaction` may be called once `held` was called, before the
 * previous one resolved; `end()` must be called last (it hands the
 * connection back).
 */
export interface TxChain {
  /** Runs `fn` in a transaction on the chain's connection; calls `held` once its COMMIT is held. */
  transaction<T>(fn: (tx: Executor) => Promise<T>, held: () => void): Promise<T>;
  /** Sends a held COMMIT (if any), waits for its answer, and hands the connection back. */
  end(): Promise<void>;
}

/**
 * A driver with interactive transactions: what consumers, `migrate()` and
 * `q.transaction(fn)` need. Every adapter but Neon's HTTP `neon()` returns
 * one, so `keyq(driver)` over it has the whole client.
 *
 * @example
 * ```ts
 * import type { TxDriver } from "@keyq/keyq";
 * const fake: TxDriver = {
 *   name: "fake",
 *   query: async () => [],
 *   transaction: async (fn) => await fn({ query: async () => [] }),
 * };
 * console.log(await fake.transaction((tx) => tx.query("select 1")));
 * ```
 */
export interface TxDriver extends Driver {
  /**
   * Runs `fn` inside one transaction (BEGIN … COMMIT, ROLLBACK when `fn`
   * throws) on one connection, and resolves to what `fn` returned.
   */
  transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T>;
}

/**
 * The driver as a {@link TxDriver}, or `TRANSACTIONS_UNSUPPORTED` when it has
 * no interactive transactions: the one refusal of consumers, `migrate()` and
 * `q.transaction()` (the types refuse such a driver already; this is for
 * JavaScript callers and drivers typed loosely).
 *
 * @example
 * ```ts
 * import { transactional } from "./driver.ts";
 * const http = { name: "neon-http", query: async () => [] };
 * try {
 *   transactional(http);
 * } catch (err) {
 *   console.log((err as { code?: string }).code); // "TRANSACTIONS_UNSUPPORTED"
 * }
 * ```
 */
export function transactional(driver: Driver): TxDriver {
  if (typeof driver.transaction === "function") return driver as TxDriver;
  throw new KeyqError(
    "TRANSACTIONS_UNSUPPORTED",
    `The ${driver.name} driver has no interactive transactions, so it cannot consume, migrate or run q.transaction(); use a Pool or Client driver (for Neon: fromNeonPool), or apply migrationSql() by hand.`,
    { driver: driver.name },
  );
}

const PAIRED: unique symbol = Symbol.for("keyq.chain.transaction");

/**
 * Marks `chain` as the chain of `transaction` (an adapter's own pair), so
 * {@link chainOf} uses it only while the driver's `transaction` is that one.
 *
 * @example
 * ```ts
 * import { chainOf, pairChain, type TxChain, type TxDriver } from "./driver.ts";
 * const transaction: TxDriver["transaction"] = async (fn) => await fn({ query: async () => [] });
 * const chain = (): TxChain => ({ transaction: (fn) => transaction(fn), end: async () => {} });
 * const d: TxDriver = { name: "fake", query: async () => [], transaction, chain: pairChain(transaction, chain) };
 * console.log(chainOf(d) !== undefined, chainOf({ ...d, transaction: (fn) => transaction(fn) }) === undefined); // true true
 * ```
 */
export function pairChain<F extends () => TxChain>(transaction: TxDriver["transaction"], chain: F): F {
  return Object.assign(chain, { [PAIRED]: transaction });
}

/**
 * Marks `after` as the {@link Driver.transactionAfter} of `transaction`, so
 * {@link leadOf} uses it only while the driver's `transaction` is that one
 * (a wrapper that replaces `transaction` and copies the rest is not bypassed).
 * @example
 * ```ts
 * import { type Executor, leadOf, pairLead, type TxDriver } from "./driver.ts";
 * const exec: Executor = { query: async () => [] };
 * const transaction: TxDriver["transaction"] = async (fn) => await fn(exec);
 * const after = pairLead(transaction, async <T>(lead: (e: Executor) => unknown, fn: (tx: Executor) => Promise<T>) => {
 *   lead(exec);
 *   return await transaction(fn);
 * });
 * const d: TxDriver = { name: "fake", query: async () => [], transaction, transactionAfter: after };
 * console.log(leadOf(d) !== undefined, leadOf({ ...d, transaction: (fn) => transaction(fn) }) === undefined); // true true
 * ```
 */
export function pairLead<F extends NonNullable<Driver["transactionAfter"]>>(transaction: TxDriver["transaction"], after: F): F {
  return Object.assign(after, { [PAIRED]: transaction });
}

/** The driver's transactionAfter, bound, when it was made for the driver's own `transaction`, else undefined. */
export function leadOf(driver: Driver): NonNullable<Driver["transactionAfter"]> | undefined {
  const f = driver.transactionAfter as (NonNullable<Driver["transactionAfter"]> & { [PAIRED]?: unknown }) | undefined;
  return f && f[PAIRED] === driver.transaction ? f.bind(driver) : undefined;
}

/** The driver's chain (Driver.chain) when it was made for the driver's own `transaction`, else undefined. */
export function chainOf(driver: Driver): TxChain | undefined {
  const c = driver.chain as ((() => TxChain) & { [PAIRED]?: unknown }) | undefined;
  return c && c[PAIRED] === driver.transaction ? c.call(driver) : undefined;
}
