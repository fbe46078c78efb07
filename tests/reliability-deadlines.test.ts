// Reliability on the shared server, deadlines and budgets: budgetMs bounds
// run(), handlers that outlive the server's idle timeout within keyq's
// deadline, batches past their deadline, COMMITs that do not answer, and
// eventTimeout. Handler starts and ends are recorded in the handlers themselves.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pg from "pg";
import { keyq, KeyqError } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();
import { sleep, slowCommit } from "./helpers/reliability.ts";
describe("reliability", () => {
  test("budgetMs bounds run(): it stops starting events, commits what finished, the rest come again in order", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.ordered<number>("jobs", "b", { slots: 1 });
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 100 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 3}` })));
      const seen: number[] = [];
      const t0 = Date.now();
      const first = await c.run({
        budgetMs: 2000,
        maxEvents: 100,
        handler: async (ev) => {
          await sleep(200);
          seen.push(ev.payload);
        },
      });
      const took = Date.now() - t0;
      console.log(`run({ budgetMs: 2000 }) with a 200 ms handler over 100 events returned after ${took} ms, ${first.events} events handled`);
      assert.ok(first.events > 0 && first.events < 100, `handled ${first.events} of 100 in the first run`);
      assert.equal(seen.length, first.events);
      assert.ok(took < 2000 + 200 + 3000, `returned within the budget plus one handler call (loosely): ${took} ms`);
      const rest = await c.run({ budgetMs: 60_000, handler: (ev) => void seen.push(ev.payload) });
      assert.equal(rest.events, 100 - first.events, "the events not started come again");
      assert.deepEqual(seen, Array.from({ length: 100 }, (_, i) => i), "none lost, none doubled, in order");
      const again = await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.equal(again.events, 0);
    });
  });

  test("budgetMs on Tier A: events not started are released to other workers, not lost", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "x");
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 40 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 4}` })));
      const seen: number[] = [];
      const first = await c.run({ budgetMs: 300, maxEvents: 40, handler: async (ev) => void (await sleep(50), seen.push(ev.payload)) });
      assert.ok(first.events < 40, `first run handled ${first.events}`);
      await c.run({ budgetMs: 60_000, handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual([...seen].sort((a, b) => a - b), Array.from({ length: 40 }, (_, i) => i));
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
      assert.equal(row!.n, 0, "released events left no retry rows behind");
    });
  });

  test("a handler silent for longer than the server-side idle timeout, within keyq's deadline, commits", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "s");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [{ type: "E", payload: 1, key: "a" }, { type: "E", payload: 2, key: "b" }]);
      // An idleTimeout shorter than the deadline is refused, not silently raised.
      await assert.rejects(
        c.run({ idleTimeout: 300, batchTimeout: 5000, handler: () => {} }),
        (e) => e instanceof KeyqError && e.code === "INVALID_INPUT" && e.details.field === "idleTimeout" && /shorter than "batchTimeout"/.test(e.message),
      );
      const done: number[] = [];
      const idle: string[] = [];
      const r = await c.run({
        idleTimeout: 1500, // honoured as given: the server's backstop, no shorter than the deadline
        batchTimeout: 1500,
        handler: async (ev, tx) => {
          await sleep(1200); // silent: no query for most of the deadline
          const [row] = await tx.query("select current_setting('idle_in_transaction_session_timeout') as i");
          idle.push(String(row!.i));
          done.push(ev.payload);
        },
        maxEvents: 1,
      });
      assert.equal(r.events, 2);
      assert.deepEqual(done.sort(), [1, 2]);
      assert.deepEqual(idle, ["1500ms", "1500ms"]);
      const again = await c.run({ handler: () => assert.fail("committed events must not come again") });
      assert.equal(again.events, 0);
    });
  });

  test("a batch past its deadline rolls back and rejects with BATCH_ABORTED; no further handler starts", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "d");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
      const started: number[] = [];
      let aborted = 0;
      const t0 = Date.now();
      await assert.rejects(
        c.run({
          batchTimeout: 500,
          handler: async (ev, _tx, { signal, deadline }) => {
            started.push(ev.payload);
            assert.ok(deadline.getTime() <= Date.now() + 500);
            await sleep(5000, signal);
            if (signal.aborted) aborted++;
          },
        }),
        (e: unknown) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.reason === "deadline",
      );
      assert.ok(Date.now() - t0 < 3000, "rejected at the deadline, not after the handler");
      assert.deepEqual(started, [1], "no handler started after the deadline");
      assert.equal(aborted, 1, "the handler saw its signal");
      const seen: number[] = [];
      await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen.sort(), [1, 2, 3], "rolled back: every event comes again");
    });
  });

  for (const driverName of ["postgres-js", "pg"] as const) {
    test(`${driverName}: a COMMIT still running at the deadline is waited for; the batch reports what it committed`, { skip }, async () => {
      await withPg(async (f, defer) => {
        const pool = new pg.Pool({ connectionString: f.url, max: 2 });
        defer(() => pool.end());
        const q = driverName === "pg" ? keyq(fromPg(pool), { schema: f.schema }) : f.q;
        await slowCommit(f, 1.0);
        await q.createQueue("jobs");
        const c = q.exclusive<number>("jobs", "late");
        await c.subscribe();
        await q.send("jobs", { type: "E", payload: 1, key: "a" });
        let commitStarted = 0;
        const r = await c.run({
          batchTimeout: 2000,
          handler: async (ev, tx, { deadline }) => {
            await sleep(deadline.getTime() - Date.now() - 600); // the handler finishes 600 ms before its deadline
            await tx.query(`insert into "${f.schema}".slow_commit values ($1::int)`, [String(ev.payload)]);
            commitStarted = Date.now();
          },
        });
        const committedAt = Date.now();
        assert.ok(committedAt - commitStarted >= 900, `COMMIT took ${committedAt - commitStarted} ms: it ran past the deadline`);
        assert.equal(r.events, 1, "reported as committed");
        assert.deepEqual((await f.raw(`select n from "${f.schema}".slow_commit`)).map((x) => x.n), [1]);
        const again = await c.run({ handler: () => assert.fail("a committed event must not come again") });
        assert.equal(again.events, 0);
      });
    });
  }

  test("a COMMIT that does not answer within the grace after the deadline is reported as 'commit unknown', not as rolled back", { skip }, async () => {
    await withPg(async (f) => {
      await slowCommit(f, 3.5); // COMMIT ends 2.9 s after the deadline; keyq waits 2 s, the server's statement timeout 3.4 s
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "late");
      await c.subscribe();
      await f.q.send("jobs", { type: "E", payload: 7, key: "a" });
      await assert.rejects(
        c.run({
          batchTimeout: 2000,
          handler: async (ev, tx, { deadline }) => {
            await sleep(deadline.getTime() - Date.now() - 600);
            await tx.query(`insert into "${f.schema}".slow_commit values ($1::int)`, [String(ev.payload)]);
          },
        }),
        (e: unknown) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.commit === "unknown" && /may have committed/.test(e.message),
      );
      // And it did commit, later: why "rolled back" would have been a lie.
      let rows: Record<string, unknown>[] = [];
      for (let i = 0; i < 50 && rows.length === 0; i++) {
        await sleep(100);
        rows = await f.raw(`select n from "${f.schema}".slow_commit`);
      }
      assert.deepEqual(rows.map((x) => x.n), [7]);
    });
  });

  test("eventTimeout fails the hung event, starts no further event of its batch, and its late writes are refused", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs", { retryBase: "1h" });
      await f.raw(`create table "${f.schema}".marks (n int)`);
      const c = f.q.exclusive<number>("jobs", "e");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
      const started: number[] = [];
      let lateWrite: unknown;
      let release!: () => void;
      const lateDone = new Promise<void>((r) => (release = r));
      const r = await c.run({
        eventTimeout: 200,
        handler: async (ev, tx, { signal }) => {
          started.push(ev.payload);
          if (ev.payload === 2) {
            await sleep(700); // ignores its signal
            assert.ok(signal.aborted, "its signal fired at the event timeout");
            await tx.query(`insert into "${f.schema}".marks values (2)`).catch((e) => (lateWrite = e));
            release();
            return;
          }
          await tx.query(`insert into "${f.schema}".marks values ($1::int)`, [String(ev.payload)]);
        },
      });
      await lateDone;
      // Each event runs in its own savepoint: the timed-out event rolls back alone, and no
      // handler is called a second time (event 1's writes commit from its one call).
      assert.deepEqual(started, [1, 2, 3]);
      assert.equal(r.batches, 2, "event 3 was released by the timed-out batch and came in the next one");
      assert.equal(r.retried, 1, "the hung event failed");
      assert.equal(r.events, 3);
      assert.ok(lateWrite instanceof Error, "the late write was refused");
      const marks = await f.raw(`select n from "${f.schema}".marks order by n`);
      assert.deepEqual(marks.map((m) => m.n), [1, 3], "nothing of the timed-out call was written");
      const [row] = await f.raw(`select last_error->>'name' as name from "${f.schema}".retry`);
      assert.equal(row!.name, "TimeoutError");
    });
  });
});
