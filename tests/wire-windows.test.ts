// The row reads (window_lines: receive_plain_rows for plain consumers, receive_ordered_rows for a
// Tier B slot) read at most maxEvents rows of a window, not one more: a
// window read to exactly maxEvents stays open at its last event, and the
// next read closes it and goes on into the next window. Shown on a real
// database: every event once, in log order, whatever the batch size against
// the window sizes, and the reply is the same events as the SQL callers'
// objects (receive).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Keyq } from "../mod.ts";
import { fromPlain, parseLines, parseWire, type PlainBatch } from "../src/engine/wire.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { readRolledBack } from "./helpers/keyq.ts";
import { gate } from "./helpers/sync.ts";

const skip = await dbSkip();

/** Sends `sizes[i]` events per window, ticking after each; returns every id in log order. */
async function windows(q: Keyq, sizes: number[], key: (i: number) => string | null = () => null): Promise<string[]> {
  const ids: string[] = [];
  let n = 0;
  for (const size of sizes) {
    const got = await q.sendBatch("files", Array.from({ length: size }, () => ({ type: "E", payload: n, key: key(n++) })));
    ids.push(...got.map((r) => r.id));
    assert.ok(await q.tick("files", { force: true }), "each window ends at a tick of its own");
  }
  return ids;
}

describe("wire reads: windows against batch sizes", () => {
  for (const maxEvents of [5, 3, 7, 15]) {
    test(`plain, windows of 5, 5 and 5 events, maxEvents ${maxEvents}: each event once, in order; batches are full until the end`, { skip }, async () => {
      await withPg(async (f) => {
        await f.q.createQueue("files");
        const c = f.q.consumer<number>("files", "audit");
        await c.subscribe();
        const ids = await windows(f.q, [5, 5, 5]);
        const seen: string[] = [];
        const sizes: number[] = [];
        for (let i = 0; i < 20; i++) {
          const b = await c.batch({ maxEvents, handler: (ev) => void seen.push(ev.id) });
          if (b.events === 0) break;
          sizes.push(b.events);
        }
        assert.deepEqual(seen, ids, "every event once, in log order");
        const full = Math.floor(15 / maxEvents);
        assert.deepEqual(sizes.slice(0, full), Array(full).fill(maxEvents), "a batch crosses windows to fill up");
        assert.equal((await c.batch({ maxEvents, handler: () => {} })).events, 0, "nothing more");
        const more = await windows(f.q, [2]);
        const after: string[] = [];
        await c.batch({ maxEvents, handler: (ev) => void after.push(ev.id) });
        assert.deepEqual(after, more, "the next window comes after a window read to its exact end");
      });
    });
  }

  test("plain: a window read to exactly maxEvents stays open at its last event; the next read closes it", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.consumer<number>("files", "audit");
      await c.subscribe();
      const ids = await windows(f.q, [4]);
      const cursor = async () =>
        (await f.raw(`select end_tick_id is not null as open, last_id::text as last from "${f.schema}".cursor c
                        join "${f.schema}".consumer k using (consumer_id) where k.consumer_name = 'audit'`))[0]!;
      assert.equal((await c.batch({ maxEvents: 4, handler: () => {} })).events, 4);
      assert.deepEqual(await cursor(), { open: true, last: ids[3] }, "open at the last event taken");
      assert.equal((await c.batch({ maxEvents: 4, handler: () => {} })).events, 0);
      assert.deepEqual(await cursor(), { open: false, last: null }, "the empty read closed it at its end tick");
    });
  });

  test("plain: receive_plain, the one-text form of earlier builds, answers the batch receive_plain_rows answers", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.consumer<number>("files", "audit");
      await c.subscribe();
      const ids = await windows(f.q, [3, 2]);
      const call = (fn: string) => `"${f.schema}".${fn}(queue => 'files', consumer => 'audit', max_events => 4, wait_ms => 0)`;
      // Each read rolls back, so both read the same batch: 4 events across the two windows.
      const rows = await readRolledBack(f.q, `select array_to_json(array(select ${call("receive_plain_rows")}))::text`);
      const text = await readRolledBack(f.q, `select ${call("receive_plain")}`);
      const byRows = fromPlain(parseLines(JSON.parse(rows) as string[]) as PlainBatch).events;
      const byText = fromPlain(parseWire(text) as PlainBatch).events;
      assert.deepEqual(byRows.map((e) => e.id), ids.slice(0, 4));
      assert.deepEqual(byText, byRows);
      assert.deepEqual(byRows.map((e) => JSON.parse(e.raw!)), [0, 1, 2, 3]);
    });
  });

  for (const maxEvents of [4, 3, 9]) {
    test(`Tier B, 2 slots, windows of 4, 4 and 4 events per slot, maxEvents ${maxEvents}: each event once, in order per slot`, { skip }, async () => {
      await withPg(async (f) => {
        await f.q.createQueue("files");
        const c = f.q.ordered<number>("files", "idx", { slots: 2 });
        await c.subscribe();
        // Two keys, one per slot, found by their slot.
        const k0 = ["a", "b", "c", "d", "e", "f", "g", "h"];
        const slotOf = await Promise.all(k0.map((k) => c.slotOf(k)));
        const keys = [k0[slotOf.indexOf(0)]!, k0[slotOf.indexOf(1)]!];
        const ids = await windows(f.q, [8, 8, 8], (i) => keys[i % 2]!);
        const seen: { id: string; slot: number }[] = [];
        for (let i = 0; i < 40; i++) {
          const b = await c.batch({ worker: 0, workers: 1, maxEvents, handler: (ev) => void seen.push({ id: ev.id, slot: ev.slot! }) });
          if (b.events === 0) break;
        }
        assert.equal(seen.length, 24, "every event once");
        assert.deepEqual(new Set(seen.map((e) => e.id)).size, 24);
        for (const slot of [0, 1]) {
          const mine = ids.filter((_, i) => i % 2 === slot);
          assert.deepEqual(seen.filter((e) => e.slot === slot).map((e) => e.id), mine, `slot ${slot} in log order`);
        }
      });
    });
  }

  test("Tier B: a transaction of no queue that spans a tick (a straggler of the window) leaves each event once, in order", { skip }, async () => {
    await withPg({ max: 4 }, async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered<number>("files", "idx", { slots: 2 });
      await c.subscribe();
      const open = gate();
      const hold = gate();
      // A transaction with a txid and no event: in progress at the first tick, committed before the second.
      const other = f.sql.begin(async (tx) => {
        await tx`select pg_current_xact_id()`;
        open.open();
        await hold.wait;
      });
      await open.wait;
      const first = await windows(f.q, [6], (i) => `k${i % 3}`);
      hold.open();
      await other;
      const second = await windows(f.q, [6], (i) => `k${i % 3}`);
      const stragglers = await f.raw(
        `select count(*)::int as n from "${f.schema}".tick t1, "${f.schema}".tick t2, pg_snapshot_xip(t1.tick_snapshot) x
          where t2.tick_id = (select max(tick_id) from "${f.schema}".tick) and t1.tick_id = t2.tick_id - 1
            and pg_visible_in_snapshot(x, t2.tick_snapshot)`,
      );
      assert.ok((stragglers[0]!.n as number) >= 1, "the last window has a straggler of no queue");
      const seen: string[] = [];
      for (let i = 0; i < 20; i++) {
        const b = await c.batch({ worker: 0, workers: 1, maxEvents: 4, handler: (ev) => void seen.push(ev.id) });
        if (b.events === 0) break;
      }
      const all = [...first, ...second];
      assert.equal(seen.length, all.length, "every event once");
      assert.deepEqual([...seen].sort(), [...all].sort());
      for (const k of ["k0", "k1", "k2"]) {
        const mine = all.filter((_, i) => `k${i % 6 % 3}` === k);
        assert.deepEqual(seen.filter((id) => mine.includes(id)), mine, `key ${k} in log order`);
      }
    });
  });

  test("plain: the wire reply and the SQL callers' objects hold the same events", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      await f.q.consumer("files", "audit").subscribe();
      const payload = { s: 'quote " and \\ and ü\nand a line break', n: [1, 2.5, null] };
      await f.q.sendBatch("files", [{ type: "E", payload: payload as unknown, key: "k1" }, { type: "F", payload: "x" }]);
      await windows(f.q, [1]);
      const read = (fn: string) => readRolledBack(f.q, `select "${f.schema}".${fn}(queue => 'files', consumer => 'audit', max_events => 10)::text`);
      const text = await read("receive_plain");
      const head = JSON.parse(text.slice(0, text.indexOf("\n"))) as { rows: string[][] };
      const payloads = text.slice(text.indexOf("\n") + 1).split("\n").map((p) => JSON.parse(p));
      const o = JSON.parse(await read("receive")) as { events: { id: string; txid: string; type: string; key: string | null; payload: unknown }[] };
      assert.equal(head.rows.length, 3);
      assert.deepEqual(head.rows.map((r) => [r[0], r[1], r[2], r[3]]), o.events.map((e) => [e.id, e.txid, e.type, e.key]));
      assert.deepEqual(payloads, o.events.map((e) => e.payload));
      assert.deepEqual(payloads, [payload, "x", 0]);
    });
  });
});
