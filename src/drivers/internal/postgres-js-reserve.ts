/**
 * postgres.js reserved connections: taking one (`reserver`) and handing it
 * back after its last statement (`finish`), around two behaviours of
 * postgres.js 3.4 that otherwise leave a transaction pending forever.
 * @module
 */
import type { PostgresJsConnection, PostgresJsLike, PostgresJsReservedLike } from "../postgres-js.ts";

/**
 * `sql.reserve()`, made safe from a postgres.js 3.4 bug: when a connection
 * closes while a reserve() waits for one, postgres.js reconnects it with
 * that waiter as its first query, then drops it (a reserve is not a query),
 * and the waiter never settles (a transaction waiting for a connection that
 * was killed, timed out idle or restarted hung forever; conformance hung under
 * load in the fixtures' `idle_timeout: 1` pool). So each waiter reserves again
 * after every close it sees (heard through `options.onclose`, chained to the
 * caller's own); the first connection to arrive is kept, any later one is
 * handed straight back.
 *
 * @example
 * ```ts ignore
 * const reserve = reserver(sql);
 * const r = await reserve();
 * ```
 */
export function reserver(sql: PostgresJsLike & { reserve(): Promise<PostgresJsReservedLike> }): () => Promise<PostgresJsReservedLike> {
  const waiting = new Set<() => void>();
  const options = sql.options as { onclose?: (id: number) => void } | undefined;
  if (options) {
    const theirs = options.onclose;
    // After postgres.js's own onclose has run (it may be reconnecting this very connection).
    options.onclose = (id) => (theirs?.(id), waiting.forEach((again) => queueMicrotask(again)));
  }
  return () =>
    new Promise((resolve, reject) => {
      let done = false;
      const settle = (f: () => void) => (done = true, waiting.delete(attempt), f());
      const attempt = () => {
        sql.reserve().then((r) => (done ? r.release() : settle(() => resolve(r))), (err) => done || settle(() => reject(err)));
      };
      waiting.add(attempt);
      attempt();
    });
}

/**
 * Sends COMMIT or ROLLBACK on `r`, the transaction's last statement. The
 * connection must not go back (`r.release()`) before postgres.js has written
 * it: a statement of `r` is handed to the connection a microtask after it is
 * issued, and while the connection is "full" (a statement that describes
 * first, e.g. an unnamed one with parameters, is in flight) it waits in `r`'s
 * own queue, which a released connection never reads again — the COMMIT was
 * never sent and the transaction never settled (conformance hung under load).
 * Nor after its answer: a connection released then is never ended, so
 * `sql.end()` called meanwhile waited forever. So `r` is left to hand itself
 * back as postgres.js's own `begin()` does: on the ReadyForQuery that says
 * idle, i.e. the answer of this statement, ending the connection then when
 * `sql.end()` was called (`handedBack` marks it released for the caller).
 * Without the connection (never heard of) it is released after the answer.
 *
 * @example
 * ```ts ignore
 * const commit = finish(r, heard, "commit", () => (released = true));
 * ```
 */
export function finish(r: PostgresJsReservedLike, heard: { conn?: PostgresJsConnection }, text: string, handedBack: () => void): Promise<unknown> {
  const own = heard.conn?.reserved;
  if (own) {
    heard.conn!.onclose = null;
    own.release = false;
    handedBack();
  }
  return Promise.resolve(r.unsafe(text).simple());
}
