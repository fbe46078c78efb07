// A run's batches on one connection (Driver.chain: pg and Neon pools): each
// COMMIT travels with the next batch's BEGIN and receive. What a batch
// reports must be what committed: a COMMIT that fails there (here a deferred
// unique constraint that a handler broke) rejects the run with its error, that
// batch's events come again, and no handler of the next batch runs. Every
// pooled driver runs the same checks (postgres.js and Bun.SQL without a chain).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { type Keyq, keyq } from "../mod.ts";
import pg from "pg";
import { chainOf, type Executor } from "../src/driver.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { driverSpecs, runtimeName, setupNeon, teardownNeon } from "./helpers/drivers.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();
type Spec = Pick<(typeof driverSpecs)[number], "id" | "label" | "skip" | "open">;
const pooled: Spec[] = driverSpecs.filter((d) => ["postgres-js", "pg-pool", "neon-pool", "bun-sql"].includes(d.id));
// pg's own pipeline mode: the held COMMIT, BEGIN and the receive go out at once with a Sync each, so
// the receive answers even when the COMMIT failed; the batch must then stop before its handlers.
pooled.push({
  id: "pg-pool",
  label: "pg Pool, pipeline: true",
  skip: false,
  open: (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 1, pipeline: true } as pg.PoolConfig);
    return Promise.resolve({ driver: fromPg(pool), close: () => pool.end() });
  },
});

for (const d of pooled) {
  describe(`chained batches: ${d.label} on ${runtimeName()}`, { skip: skip || d.skip }, () => {
    let f: Fixture;
    let q: Keyq;
    let close: () => Promise<unknown>;

    before(async () => {
      await requireDatabase();
      f = await pgFixture({ max: 2 });
      if (d.id === "neon-pool") await setupNeon();
      const opened = await d.open((f as unknown as { url: string }).url, { max: 1 });
      close = opened.close;
      q = keyq(opened.driver, { schema: f.schema });
      await f.q.createQueue("jobs");
      // Checked at COMMIT: a duplicate fails the transaction's COMMIT, not the handler's insert.
      await f.raw(`create table "${f.schema}".once (k text, constraint once_k unique (k) deferrable initially deferred)`);
    });

    after(async () => {
      await close?.();
      if (d.id === "neon-pool") await teardownNeon();
      await f?.close();
    });

    test("the driver chains a run's transactions where expected", () => {
      const chained = d.id === "pg-pool" || d.id === "neon-pool";
      assert.equal(chainOf(q.driver) !== undefined, chained);
    });

    test("batches commit one by one, each counted once its COMMIT answered", async () => {
      const c = q.consumer("jobs", "ok");
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 9 }, (_, i) => ({ type: "E", payload: i })));
      await f.q.tick("jobs", { force: true });
      const r = await c.run({
        maxEvents: 3,
        handler: async (ev, tx) => void (await tx.query(`insert into "${f.schema}".once values ($1)`, [`ok${ev.payload}`])),
      });
      assert.equal(r.events, 9);
      assert.equal(r.batches, 3);
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".once where k like 'ok%'`);
      assert.equal(row!.n, 9);
      const again = await c.run({ handler: () => assert.fail("nothing is left") });
      assert.equal(again.events, 0);
    });

    test("a COMMIT that fails rejects the run; its batch's events come again and no handler of a later batch ran", async () => {
      const c = q.consumer("jobs", "bad");
      await c.subscribe();
      await f.q.sendBatch("jobs", [{ type: "E", payload: "dup" }, { type: "E", payload: "dup" }, { type: "E", payload: "later" }]);
      await f.q.tick("jobs", { force: true });
      const calls: unknown[] = [];
      // Batch 1 (two events) inserts "dup" twice: its COMMIT fails on the deferred constraint.
      const handler = async (ev: { payload: unknown }, tx: Executor) => {
        calls.push(ev.payload);
        await tx.query(`insert into "${f.schema}".once values ($1)`, [`bad-${String(ev.payload)}`]);
      };
      const err = await c.run({ maxEvents: 2, handler }).then(() => undefined, (e: unknown) => e);
      assert.ok(err, "the run rejected");
      assert.equal((err as { code?: unknown }).code, "23505", String(err));
      assert.deepEqual(calls, ["dup", "dup"], "the batch after the failed COMMIT ran no handler");
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".once where k like 'bad-%'`);
      assert.equal(row!.n, 0, "nothing of the failed batch committed");
      // Its events come again (the cursor did not move): the failed batch is read again, whole.
      const seen: unknown[] = [];
      const r = await c.run({ maxEvents: 2, maxBatches: 1, handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen, ["dup", "dup"]);
      assert.equal(r.events, 2);
    });
  });
}
