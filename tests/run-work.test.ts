// run() and work(): budgets, batch timeouts, and clean shutdown on AbortSignal.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

describe("run and work", () => {
  test("each batch runs with its own local statement and idle timeouts", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "m").subscribe(); // from "latest": subscribe before sending
      await f.q.send("jobs", { type: "E", payload: 1, key: "k" });
      const seen: string[] = [];
      await f.q.exclusive("jobs", "m").run({
        statementTimeout: "2s",
        idleTimeout: "5s",
        batchTimeout: "3s", // the idle backstop is the larger of idleTimeout and the deadline plus 2 s
        handler: async (_ev, tx) => {
          const [r] = await tx.query(
            "select current_setting('statement_timeout') as s, current_setting('idle_in_transaction_session_timeout') as i",
          );
          seen.push(`${r!.s}/${r!.i}`);
        },
      });
      assert.deepEqual(seen, ["2s/5s"]);
      const [after] = await f.raw("select current_setting('statement_timeout') as s");
      assert.equal(after!.s, "0", "the settings were local to the batch transaction");
    });
  });

  test("a handler stuck past statementTimeout fails its event instead of holding the key", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs", { retryBase: "1h" });
      await f.q.exclusive("jobs", "m").subscribe(); // from "latest": subscribe before sending
      await f.q.send("jobs", { type: "E", payload: 1, key: "k" });
      const r = await f.q.exclusive("jobs", "m").run({
        statementTimeout: 200,
        handler: async (_ev, tx) => void (await tx.query("select pg_sleep(5)")),
      });
      assert.equal(r.retried, 1, "the timed-out event went to retry");
      const [row] = await f.raw(`select last_error->>'code' as code from "${f.schema}".retry`);
      assert.equal(row!.code, "57014", "query_canceled by statement_timeout");
    });
  });

  test("run stops at maxBatches and reports round trips", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive("jobs", "m");
      await c.subscribe(); // from "latest": subscribe before sending (a run's first subscribe is a round trip of its own)
      await f.q.sendBatch("jobs", Array.from({ length: 50 }, (_, i) => ({ type: "E", payload: i, key: `k${i}` })));
      const r = await c.run({ maxEvents: 10, maxBatches: 2, handler: () => {} });
      assert.equal(r.batches, 2);
      // A Tier A batch ends where its next key bucket would not fit whole (it
      // holds only what it reads), so it may take fewer than maxEvents.
      assert.ok(r.events >= 2 && r.events <= 20, `events ${r.events}`);
      assert.ok(r.roundTrips <= 2 + 2 * 4, `round trips ${r.roundTrips}`);
      const rest = await c.run({ maxEvents: 50, handler: () => {} });
      assert.equal(r.events + rest.events, 50, "the run that follows takes the rest: nothing skipped, nothing twice");
    });
  });

  test("work() consumes what arrives and stops cleanly when the signal aborts", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const ctl = new AbortController();
      const got: number[] = [];
      const c = f.q.ordered<number>("jobs", "w", { slots: 2 });
      await c.subscribe();
      const working = c.work({
        signal: ctl.signal,
        minPollMs: 10,
        maxPollMs: 50,
        handler: (ev) => {
          got.push(ev.payload);
          if (got.length === 30) ctl.abort();
        },
      });
      for (let i = 0; i < 3; i++) {
        await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, j) => ({ type: "E", payload: i * 10 + j, key: `k${j % 3}` })));
        await new Promise((r) => setTimeout(r, 30));
      }
      const report = await working;
      assert.equal(report.events, 30);
      assert.ok(report.batches >= 1 && report.batches <= 30, `batches are counted (${report.batches})`);
      assert.deepEqual([...got].sort((a, b) => a - b), Array.from({ length: 30 }, (_, i) => i));
      const idle = new AbortController();
      idle.abort();
      const none = await c.work({ signal: idle.signal, handler: () => {} });
      assert.equal(none.events, 0, "an aborted signal stops before the first batch");
    });
  });
});
