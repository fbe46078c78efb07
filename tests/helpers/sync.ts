/**
 * Small concurrency helpers for tests: sleeps, gates, and workers that each
 * hold their own tagged connection (visible in pg_stat_activity).
 */
import { type Keyq, keyq } from "../../mod.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import { connect, type Sql } from "./db.ts";

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A promise a test opens by hand: `await g.wait` blocks until `g.open()`. */
export function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/** A worker: its own connection and client, with application_name `${app}-${i}`. */
export function worker(url: string, schema: string, i: number, app = "kq-worker"): { q: Keyq; sql: Sql } {
  const sql = connect(`${url}${url.includes("?") ? "&" : "?"}application_name=${app}-${i}`);
  return { q: keyq(fromPostgresJs(sql), { schema }), sql };
}

/**
 * Kills backend `pid` through `raw` and waits until it has ended.
 * `pg_terminate_backend` only signals: the client of the killed session can
 * hear of it (the server's FATAL message) a moment before that backend's
 * transaction is rolled back and its locks are released.
 */
export async function terminate(raw: (text: string, params: string[]) => Promise<unknown[]>, pid: string): Promise<void> {
  await raw("select pg_terminate_backend($1::int)", [pid]);
  for (let i = 0; i < 250; i++) {
    if ((await raw("select 1 from pg_stat_activity where pid = $1::int", [pid])).length === 0) return;
    await sleep(20);
  }
  throw new Error(`backend ${pid} did not end`);
}
