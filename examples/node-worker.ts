/**
 * Node: a long-running worker on a pg Pool. `work({ signal })` loops runs of a
 * Tier A exclusive consumer, backing off while the queue is idle; SIGINT or
 * SIGTERM aborts the signal, the current batch commits what finished, and
 * the process exits cleanly. Lost connections and server restarts are
 * retried by work() itself. Start as many as you like: at most one of them
 * handles a given key at any instant.
 *
 *   DATABASE_URL=postgres://… node --import tsx examples/node-worker.ts
 *
 * KEYQ_SCHEMA picks the schema, WORKER names this worker in the output.
 * In your project: `npm install keyq pg`.
 */
import process from "node:process";
import pg from "pg";
import { keyq } from "keyq";
import { fromPg } from "keyq/pg";

const name = process.env.WORKER ?? `worker-${process.pid}`;
const url = process.env.DATABASE_URL;
if (!url) throw new Error("Set DATABASE_URL to the PostgreSQL to consume from, e.g. postgres://user:password@host:5432/db");
const pool = new pg.Pool({ connectionString: url, max: 4 });
// An idle client whose connection drops (server restart, failover) emits
// `error` on the pool; unheard, Node exits. The pool replaces the client.
pool.on("error", (err) => console.warn(`${name}: idle connection lost: ${err.message}`));
const q = keyq(fromPg(pool), { schema: process.env.KEYQ_SCHEMA ?? "keyq" });
await q.migrate(); // idempotent; in production, migrate once at deploy time
await q.createQueue("jobs");

const stop = new AbortController();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    console.log(`${name}: ${signal}, finishing the current batch`);
    stop.abort();
  });
}

console.log(`${name}: working`);
const total = await q.exclusive("jobs", "node-worker").work({
  signal: stop.signal,
  maxPollMs: 500,
  // Transient faults (lost connection, server restarting…) are retried with backoff.
  onRetry: ({ error, attempt, delayMs }) => console.warn(`${name}: retry ${attempt} in ${delayMs} ms: ${String(error)}`),
  handler: (ev) => console.log(`${name}: consumed ${ev.id} ${ev.type} key=${ev.key} payload=${JSON.stringify(ev.payload)}`),
});
await pool.end();
console.log(`${name}: stopped after ${total.events} events`);
