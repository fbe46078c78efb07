/**
 * The many-queues scenario: what one consumer's `run()` and one queue's
 * `tick()` cost while the schema holds few or many queues. An app with a
 * queue per tenant pays this on every cron tick, so it must not grow with
 * the number of queues (each statement touches its own queue's partitions).
 *
 * @module
 */

import { keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, dropSchema, freshSchema, type Sql } from "./db.ts";
import { progress } from "./util.ts";

/** Median milliseconds of one warm `run()` (10 events, no-op), one cold `run()` (fresh connection) and one forced `tick()`. */
export interface QueuesResult {
  run: number;
  cold: number;
  tick: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ten = Array.from({ length: 10 }, (_, j) => ({ type: "T", payload: { j } }));

/** A schema with `n` queues, each with a plain consumer; measures queue q0's consumer; drops it all. */
export async function manyQueues(admin: Sql, n: number, samples: number): Promise<QueuesResult> {
  const schema = freshSchema("kqb_queues");
  const sql = connect(`${APP}-queues`, { max: 1 });
  const q = keyq(fromPostgresJs(sql), { schema });
  try {
    await q.migrate();
    for (let i = 0; i < n; i++) {
      await q.createQueue(`q${i}`, { rotationPeriod: "1 hour" });
      await q.consumer(`q${i}`, "c").subscribe();
      if (i % 200 === 199) progress(`    ${i + 1} of ${n} queues made`);
    }
    const c = q.consumer("q0", "c");
    await q.sendBatch("q0", ten);
    await c.run({ handler: () => {} }); // warm the session's caches
    const runs: number[] = [];
    const ticks: number[] = [];
    for (let i = 0; i < samples; i++) {
      await q.sendBatch("q0", ten);
      const t0 = performance.now();
      const r = await c.run({ handler: () => {} });
      runs.push(performance.now() - t0);
      if (r.events !== 10) throw new Error(`run() delivered ${r.events} events, not 10`);
      const t1 = performance.now();
      await q.tick("q0", { force: true });
      ticks.push(performance.now() - t1);
    }
    const colds: number[] = [];
    for (let i = 0; i < Math.max(3, Math.floor(samples / 3)); i++) {
      await q.sendBatch("q0", ten);
      const fresh = connect(`${APP}-queues-cold`, { max: 1 });
      const t0 = performance.now();
      const r = await keyq(fromPostgresJs(fresh), { schema }).consumer("q0", "c").run({ handler: () => {} });
      colds.push(performance.now() - t0);
      await fresh.end({ timeout: 5 });
      if (r.events !== 10) throw new Error(`a cold run() delivered ${r.events} events, not 10`);
    }
    return { run: median(runs), cold: median(colds), tick: median(ticks) };
  } finally {
    // One queue a transaction: dropping a schema of 1,000 queues in one
    // statement takes a lock per table and can fill the shared lock table.
    for (let i = 0; i < n; i++) await q.dropQueue(`q${i}`).catch(() => false);
    await sql.end({ timeout: 5 });
    await dropSchema(admin, schema);
  }
}
