// run() ends on the batch that took the last of what was ticked, without an
// empty look: a plain (and Tier B slot) batch reads on into newer windows
// when it has room, so a batch that is not full read everything ticked; a
// Tier A batch that found no free chunk says so (drained).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();
const events = (from: number, n: number, key = (i: number) => `k${i % 3}`) =>
  Array.from({ length: n }, (_, i) => ({ type: "E", payload: from + i, key: key(from + i) }));

describe("run() ends without an empty look", () => {
  test("plain: a window left open by an earlier run and a newer tick are read in one batch, in log order", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.consumer<number>("jobs", "p");
      await c.subscribe();
      await f.q.sendBatch("jobs", events(0, 10));
      const first = await c.run({ maxEvents: 4, maxBatches: 1, handler: () => {} }); // leaves the window open after 4
      assert.equal(first.events, 4);
      await f.q.sendBatch("jobs", events(10, 10)); // ticked by the next run's start
      const seen: number[] = [];
      const r = await c.run({ maxEvents: 100, handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen, Array.from({ length: 16 }, (_, i) => i + 4), "the open window's rest, then the newer window's events");
      assert.equal(r.batches, 1, "one batch read across both windows");
      // start_run, then BEGIN, receive, COMMIT: no second look.
      assert.equal(r.statements, 4, `statements ${r.statements}`);
      const again = await c.run({ handler: () => assert.fail("nothing is left") });
      assert.equal(again.events, 0);
    });
  });

  test("plain: a full batch still looks again, and a batch cut inside the newer window resumes there", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.consumer<number>("jobs", "p");
      await c.subscribe();
      await f.q.sendBatch("jobs", events(0, 6));
      await c.run({ maxEvents: 2, maxBatches: 1, handler: () => {} }); // window open after 2
      await f.q.sendBatch("jobs", events(6, 6));
      const got: number[] = [];
      const r = await c.run({ maxEvents: 5, handler: (ev) => void got.push(ev.payload) });
      assert.deepEqual(got, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "2..5 close the old window, 6 opens the newer one, 7..11 resume after it");
      assert.equal(r.batches, 2);
      // start_run, two batches of BEGIN, receive, COMMIT, and the look after the full second batch.
      assert.equal(r.statements, 10, `statements ${r.statements}`);
    });
  });

  test("Tier B: a slot's open window and a newer tick in one batch, FIFO per key", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.ordered<number>("jobs", "o", { slots: 1 });
      await c.subscribe();
      await f.q.sendBatch("jobs", events(0, 10));
      await c.run({ maxEvents: 4, maxBatches: 1, handler: () => {} });
      await f.q.sendBatch("jobs", events(10, 10));
      const seen: number[] = [];
      const r = await c.run({ maxEvents: 100, handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen, Array.from({ length: 16 }, (_, i) => i + 4));
      assert.equal(r.batches, 1);
    });
  });

  test("Tier A: a batch that took the last free chunk ends the run", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "x");
      await c.subscribe();
      await f.q.sendBatch("jobs", events(0, 10, (i) => `k${i}`));
      const seen: number[] = [];
      const r = await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen.sort((a, b) => a - b), Array.from({ length: 10 }, (_, i) => i));
      assert.equal(r.batches, 1);
      assert.equal(r.statements, 4, `start_run, BEGIN, receive, COMMIT; statements ${r.statements}`);
      const again = await c.run({ handler: () => assert.fail("nothing is left") });
      assert.equal(again.events, 0);
    });
  });
});
