/**
 * What `{ tx }` accepts: keyq's own executor (the `tx` of
 * `q.driver.transaction`, or of a handler), or a native transaction object
 * the client's driver adapter recognises (`Driver.adopt`: the `tx` of a
 * postgres.js `sql.begin`, a `pg` client inside BEGIN). Anything else is
 * refused before a query runs: an event written outside the caller's
 * transaction would break the outbox pattern silently.
 *
 * @module
 */

import type { Driver, Executor } from "../driver.ts";
import { KeyqError } from "../errors.ts";
import { show } from "../text.ts";

const HOW = "pass the transaction itself: keyq's (q.driver.transaction(async (tx) => …)) or your driver's " +
  "(postgres.js sql.begin(async (tx) => …), a pg client after BEGIN)";

/** Why `tx` is no transaction keyq can join, judged by its shape only. */
function problem(tx: unknown): string | undefined {
  if (tx === null || (typeof tx !== "object" && typeof tx !== "function")) return `is ${show(tx)}, not a transaction`;
  const t = tx as Record<string, unknown>;
  const has = (k: string) => typeof t[k] === "function";
  if (has("connect") && "totalCount" in t) return "is a connection pool: its queries run in autocommit, outside your transaction";
  if (has("begin")) return "is a database client, not a transaction: its queries run in autocommit";
  if (has("transaction")) return "is a driver or database instance, not a transaction";
  // Native objects whose transaction state the adapter could not confirm (a pg
  // client of another driver, an older pg or Neon Client without getTransactionStatus).
  if (has("unsafe") || has("getTransactionStatus") || has("exec") || has("connect") || has("escapeLiteral")) {
    return "is a native driver object this client's driver adapter does not recognise as an open transaction";
  }
  if (!has("query")) return "has no query(text, params) function";
  return undefined;
}

/** The executor for `{ tx }`, or a KeyqError INVALID_INPUT saying what to pass instead. */
export function txExecutor(driver: Driver, tx: unknown): Executor {
  const adopted = driver.adopt?.(tx);
  if (adopted) return adopted;
  const why = problem(tx);
  if (why) throw new KeyqError("INVALID_INPUT", `Option "tx" ${why}; ${HOW}.`, { field: "tx" });
  return tx as Executor;
}
