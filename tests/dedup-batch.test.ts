// sendBatch with dedup keys is one set-based claim: what each event gets
// back, which events are appended and in what order, and what concurrent
// batches sharing keys do (several real connections).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { drain } from "./helpers/keyq.ts";

const skip = await dbSkip();

describe("sendBatch with dedup keys", () => {
  test("duplicates inside one batch and against live claims get the first event's id; the rest keep array order", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("jobs");
      await f.q.consumer("jobs", "c").subscribe();
      const [live] = await f.q.sendBatch("jobs", [{ type: "old", payload: 0, dedupKey: "k0" }]);
      const out = await f.q.sendBatch("jobs", [
        { type: "a", payload: 1, dedupKey: "k1" },
        { type: "b", payload: 2 },
        { type: "c", payload: 3, dedupKey: "k1" },
        { type: "d", payload: 4, dedupKey: "k0" },
        { type: "e", payload: 5, dedupKey: "k2" },
        { type: "f", payload: 6, dedupKey: "k0" },
      ]);
      assert.deepEqual(out.map((r) => r.deduped), [false, false, true, true, false, true]);
      assert.equal(out[2]!.id, out[0]!.id, "a duplicate in the batch gets the first one's id");
      assert.equal(out[3]!.id, live!.id, "a live key gets the live event's id");
      assert.equal(out[5]!.id, live!.id);
      const fresh = [out[0]!, out[1]!, out[4]!].map((r) => BigInt(r.id));
      assert.ok(fresh[0]! < fresh[1]! && fresh[1]! < fresh[2]!, `appended ids follow array order: ${fresh.join(", ")}`);
      const seen = await drain(f.q, "jobs", "c");
      assert.deepEqual(seen.map((e) => e.type), ["old", "a", "b", "e"], "each key once, in send order");
    });
  });

  test("an expired claim is claimed again by a batch", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("jobs");
      const [first] = await f.q.sendBatch("jobs", [{ type: "a", payload: 1, dedupKey: "k", ttl: "1s" }]);
      await f.raw(`update "${f.schema}".dedup set expires_at = now() - interval '1 second'`);
      const [again, dup] = await f.q.sendBatch("jobs", [
        { type: "b", payload: 2, dedupKey: "k" },
        { type: "c", payload: 3, dedupKey: "k" },
      ]);
      assert.equal(again!.deduped, false, "the expired key is free again");
      assert.notEqual(again!.id, first!.id);
      assert.deepEqual(dup, { id: again!.id, deduped: true });
      const [n] = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(n!.n, 2);
    });
  });

  // 1,500 keys: a large batch tries a plain insert first (claim_keys), then the ON CONFLICT claim.
  for (const size of [400, 1500]) {
    test(`4 connections send the same ${size} keys in different orders at once: one event per key, one id per key, no deadlock`, { skip }, async () => {
      await withPg({ max: 4 }, async (f) => {
        await f.q.createQueue("jobs");
        const keys = Array.from({ length: size }, (_, i) => `key-${i}`);
        const orders = [keys, [...keys].reverse(), keys.filter((_, i) => i % 2).concat(keys.filter((_, i) => i % 2 === 0)), [...keys].sort()];
        const results = await Promise.all(orders.map((order, w) => f.q.sendBatch("jobs", order.map((k) => ({ type: "E", payload: { w }, dedupKey: k })))));
        const idOf = new Map<string, string>();
        for (const [w, order] of orders.entries()) {
          order.forEach((k, i) => {
            const id = results[w]![i]!.id;
            if (!idOf.has(k)) idOf.set(k, id);
            assert.equal(id, idOf.get(k), `key ${k}: every sender is told the same id`);
          });
        }
        const inserted = results.flat().filter((r) => !r.deduped).length;
        assert.equal(inserted, size, "exactly one sender appended each key");
        const [n] = await f.raw(`select count(*)::int as n, count(distinct ev_id)::int as ids from "${f.schema}".event`);
        assert.deepEqual(n, { n: size, ids: size });
      });
    });
  }
});
