// A Tier B batch that finds fewer events in its first slot than it has room
// for goes on to the next slots: a sparse window costs one batch, not one per
// slot. Each event carries the slot that delivered it, order within a key
// holds, and a failure is retried, dead-lettered or blocks its key in its own
// slot, as when a batch read one slot. A fenced batch (it leases one slot)
// still reads one.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { OrderedConsumer } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { type PgFixture, withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

/** Two keys per slot of `c` (found with slotOf), slot by slot. */
async function keysPerSlot(c: OrderedConsumer<unknown>, slots: number): Promise<Map<number, string[]>> {
  const by = new Map<number, string[]>();
  for (let i = 0; [...by.values()].filter((ks) => ks.length >= 2).length < slots; i++) {
    const key = `key-${i}`;
    const s = await c.slotOf(key);
    const ks = by.get(s) ?? [];
    if (ks.length < 2) by.set(s, [...ks, key]);
  }
  return by;
}

/** The slot column of the consumer's retry rows and dead letters, by key. */
async function storedSlots(f: PgFixture, table: "retry" | "dead_letter"): Promise<Record<string, number>> {
  const rows = await f.sql.unsafe(`select ev_key as key, slot from "${f.schema}".${table} order by ev_key`);
  return Object.fromEntries(rows.map((r) => [r.key as string, r.slot as number]));
}

describe("Tier B: a batch reads several slots while it has room", () => {
  test("16 events over 4 slots in one batch; each event has its own slot, each key its order; a smaller batch fills from the next slot", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered<number>("files", "idx", { slots: 4 });
      await c.subscribe();
      const keys = [...(await keysPerSlot(c, 4)).values()].flat();
      assert.equal(keys.length, 8);
      const send = () => f.q.sendBatch("files", Array.from({ length: 16 }, (_, i) => ({ type: "E", payload: i, key: keys[i % 8]! })));
      await send();
      const seen: { key: string; slot: number | undefined; payload: number }[] = [];
      const r = await c.run({ maxEvents: 100, handler: (ev) => void seen.push({ key: ev.key!, slot: ev.slot, payload: ev.payload }) });
      assert.deepEqual([r.batches, r.events], [1, 16], "one batch took the events of all 4 slots");
      for (const e of seen) assert.equal(e.slot, await c.slotOf(e.key), `event of ${e.key} carries its own slot`);
      assert.equal(new Set(seen.map((e) => e.slot)).size, 4);
      for (const k of keys) {
        const mine = seen.filter((e) => e.key === k).map((e) => e.payload);
        assert.deepEqual(mine, [...mine].sort((a, b) => a - b), `key ${k} in order`);
        assert.equal(mine.length, 2);
      }
      // maxEvents 6: a batch fills from as many slots as it needs (4 events a slot): 6 + 6 + 4.
      await send();
      const later: { key: string; payload: number }[] = [];
      const r2 = await c.run({ maxEvents: 6, handler: (ev) => void later.push({ key: ev.key!, payload: ev.payload }) });
      assert.deepEqual([r2.batches, r2.events], [3, 16]);
      for (const k of keys) {
        const mine = later.filter((e) => e.key === k).map((e) => e.payload);
        assert.deepEqual(mine, [...mine].sort((a, b) => a - b), `key ${k} in order across batches`);
      }
    });
  });

  test("failures in a batch of several slots are retried, dead-lettered and block their keys each in its own slot", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files", { retryBase: "1h", retryCap: "1h", maxRetries: 1 });
      const skipC = f.q.ordered<number>("files", "skip", { slots: 4 });
      const pause = f.q.ordered<number>("files", "pause", { slots: 4, onFailure: "pause" });
      await skipC.subscribe();
      await pause.subscribe();
      const keys = [...(await keysPerSlot(skipC, 4)).values()].map((ks) => ks[0]!);
      const slotOf = Object.fromEntries(await Promise.all(keys.map(async (k) => [k, await skipC.slotOf(k)] as const)));
      // Failing keys in different slots: whichever slot a batch starts from, most are not its first.
      const failing = (bad: string[]) => (ev: { key: string | null }) => bad.includes(ev.key!) ? Promise.reject(new Error("bad key")) : undefined;
      await f.q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: i, key })));
      const r = await skipC.run({ maxEvents: 100, handler: failing(keys) });
      assert.deepEqual([r.batches, r.events, r.retried], [1, 4, 4]);
      assert.deepEqual(await storedSlots(f, "retry"), slotOf, "each retry row is in its key's slot");
      // Due again (the backoff skipped): each fails a second time and is dead-lettered in its slot.
      await f.sql.unsafe(`update "${f.schema}".retry set due_at = now()`);
      const again: Record<string, number | undefined> = {};
      const r2 = await skipC.run({ maxEvents: 100, handler: (ev) => (again[ev.key!] = ev.slot, failing(keys)(ev)) });
      assert.equal(r2.deadLettered, 4);
      assert.deepEqual(again, slotOf, "each retry delivered with its own slot");
      assert.deepEqual(await storedSlots(f, "dead_letter"), slotOf);
      assert.deepEqual(
        Object.fromEntries((await f.q.dlq.list({ consumer: "skip" })).map((d) => [d.key, d.slot])),
        slotOf,
        "dlq.list reports each key's slot",
      );
      // Pause: two keys fail and are blocked each in its slot; their next events are held there, the other keys flow.
      const bad = [keys[0]!, keys[2]!];
      const p = await pause.run({ maxEvents: 100, handler: failing(bad) });
      assert.deepEqual([p.batches, p.events, p.retried], [1, 4, 2]);
      assert.deepEqual((await pause.blockedKeys()).map((b) => [b.key, b.slot]).sort(), bad.map((k) => [k, slotOf[k]]).sort());
      await f.q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: 10 + i, key })));
      const flowed: string[] = [];
      await pause.run({ maxEvents: 100, handler: (ev) => void flowed.push(ev.key!) });
      assert.deepEqual(flowed.sort(), keys.filter((k) => !bad.includes(k)).sort(), "the other slots' keys flow");
      assert.deepEqual((await pause.blockedKeys()).map((b) => [b.key, b.slot, b.held]).sort(), bad.map((k) => [k, slotOf[k], 1]).sort(), "held in their slots");
    });
  });

  test("a window of one event reads one slot's rows: the other slots, closed at the same tick, close without a read of their own", { skip }, async () => {
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered<number>("files", "sparse", { slots: 8 });
      await c.subscribe();
      /** Scans of the consumer's slot index (one per ring table a read visits) and its ring tables, flushed from this (the only) connection. */
      const slotScans = async () => {
        await f.raw("select pg_stat_force_next_flush()");
        await f.raw("select pg_stat_clear_snapshot()");
        const [r] = await f.raw(
          `select coalesce(sum(idx_scan), 0)::bigint::text as n, count(*)::int as tables
             from pg_stat_user_indexes where schemaname = $1 and indexrelname like '%\\_slots8'`,
          [f.schema],
        );
        return { scans: Number(r!.n), tables: r!.tables as number };
      };
      await f.q.send("files", { type: "E", payload: 0, key: "warm" });
      await c.run({ handler: () => {} });
      const before = await slotScans();
      let handled = 0;
      for (let i = 0; i < 20; i++) {
        await f.q.send("files", { type: "E", payload: i, key: `key-${i}` });
        handled += (await c.run({ handler: () => {} })).events;
      }
      const after = await slotScans();
      const reads = (after.scans - before.scans) / after.tables / 20;
      console.log(
        `20 runs of one event over 8 slots: ${after.scans - before.scans} scans of the slot index on ${after.tables} ring tables, ${reads} slot reads a run`,
      );
      assert.equal(handled, 20);
      assert.ok(after.tables > 0, "the slot index exists");
      assert.equal(reads, 1, "one slot read a run, not eight");
    });
  });

  test("a fenced batch reads one slot (it leases that slot)", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered<number>("files", "fenced", { slots: 4, fenced: true });
      await c.subscribe();
      const keys = [...(await keysPerSlot(c, 4)).values()].map((ks) => ks[0]!);
      await f.q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: i, key })));
      const first: number[] = [];
      const r = await c.run({ maxEvents: 100, maxBatches: 1, handler: (ev) => void first.push(ev.slot!) });
      assert.deepEqual([r.events, first.length], [1, 1], "one slot's one event");
      const rest = await c.run({ maxEvents: 100, handler: () => {} });
      assert.deepEqual([rest.events, rest.batches], [3, 3], "a batch per slot");
    });
  });
});
