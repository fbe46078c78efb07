// Tier B: ordered per key over N fixed slots, shown with real connections.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as v from "valibot";
import { KeyqError } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { gate, sleep, worker } from "./helpers/sync.ts";

const skip = await dbSkip();

describe("Tier B: ordered consumer", () => {
  test("pinned routing at N = 4: tenant-1…5 → slots 1, 3, 2, 3, 3; a null key → slot 0", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered("files", "idx", { slots: 4 });
      await c.subscribe();
      const slots = [];
      for (const k of ["tenant-1", "tenant-2", "tenant-3", "tenant-4", "tenant-5", null]) slots.push(await c.slotOf(k));
      assert.deepEqual(slots, [1, 3, 2, 3, 3, 0]);
      await f.q.sendBatch("files", [{ type: "E", payload: 1, key: "tenant-2" }, { type: "E", payload: 2 }]);
      const seen: string[] = [];
      await c.run({ handler: (ev) => void seen.push(`${ev.key}@${ev.slot}`) });
      assert.deepEqual(seen.sort(), ["null@0", "tenant-2@3"]);
    });
  });

  test("G1: 10,000 interleaved events of 100 keys, 4 workers on 4 connections — send order per key, own slot only, every event once", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const workers = Array.from({ length: 4 }, (_, i) => worker(f.url, f.schema, i));
      defer(() => Promise.all(workers.map((w) => w.sql.end())));
      await f.q.createQueue("files");
      await f.raw(`create table "${f.schema}".log (seq bigserial, ev_id bigint, key text, n int, slot int, worker int)`);
      await f.q.ordered("files", "indexer", { slots: 8 }).subscribe();
      const N = 10_000;
      // One producer, in sequence: A, B, A, A, B… keys from a skewed, interleaved pattern.
      for (let i = 0; i < N; i += 500) {
        await f.q.sendBatch(
          "files",
          Array.from({ length: 500 }, (_, j) => {
            const n = i + j;
            return { type: "FileEvent", payload: n, key: `tenant-${(n * 7 + (n >> 3)) % 100}` };
          }),
        );
      }
      const handled = { n: 0 };
      await Promise.all(workers.map(async ({ q }, w) => {
        const c = q.ordered<number>("files", "indexer", { slots: 8 });
        for (let idle = 0; handled.n < N && idle < 50;) {
          const r = await c.run({
            maxEvents: 40,
            budgetMs: 60_000,
            handler: async (ev, tx) => {
              await tx.query(`insert into "${f.schema}".log (ev_id, key, n, slot, worker) values ($1::bigint, $2, $3::int, $4::int, $5::int)`, [
                ev.id,
                ev.key,
                String(ev.payload),
                String(ev.slot),
                String(w),
              ]);
            },
          });
          handled.n += r.events;
          if (r.events === 0) {
            idle++;
            await sleep(10);
          } else idle = 0;
        }
      }));
      const [count] = await f.raw(`select count(*)::int as rows, count(distinct ev_id)::int as events from "${f.schema}".log`);
      const [wrongSlot] = await f.raw(
        `select count(*)::int as n from "${f.schema}".log where slot <> "${f.schema}".slot_of(key, 8)`,
      );
      const [outOfOrder] = await f.raw(
        `select count(*)::int as n from (
           select n < lag(n) over (partition by key order by seq) as bad from "${f.schema}".log) x where bad`,
      );
      const [spread] = await f.raw(
        `select count(distinct worker)::int as workers, count(distinct slot)::int as slots from "${f.schema}".log`,
      );
      console.log(
        `G1: events=${N} keys=100 slots=8 workers=4 delivered=${count!.events} rows=${count!.rows} wrongSlot=${wrongSlot!.n} outOfOrder=${
          outOfOrder!.n
        } busyWorkers=${spread!.workers}`,
      );
      assert.equal(count!.events, N, "the union of the slots is the whole stream");
      assert.equal(count!.rows, N, "pairwise disjoint: no event delivered twice");
      assert.equal(wrongSlot!.n, 0, "each key only ever on its own slot");
      assert.equal(outOfOrder!.n, 0, "each key's events in send order");
      assert.equal(spread!.slots, 8);
      assert.ok(Number(spread!.workers) >= 3, `slots spread over workers (${spread!.workers})`);
    });
  });

  test(
    "G2: two workers on one slot — one gets the batch, the other skips; a client that skips the try-lock blocks, then sees no duplicate",
    { skip },
    async () => {
      await withPg({ max: 2 }, async (f, defer) => {
        const a = worker(f.url, f.schema, 0);
        const b = worker(f.url, f.schema, 1);
        const c = worker(f.url, f.schema, 2);
        const release = gate();
        defer(async () => {
          release.open(); // never leave the first batch hanging when an assertion fails
          await Promise.all([a, b, c].map((w) => w.sql.end()));
        });
        await f.q.createQueue("files");
        const opts = { slots: 4, helpAfter: "1h" };
        const consumer = f.q.ordered("files", "idx", opts);
        await consumer.subscribe();
        // tenant-1 → slot 1.
        await f.q.sendBatch("files", Array.from({ length: 6 }, (_, i) => ({ type: "E", payload: i, key: "tenant-1" })));
        await f.q.tick("files");
        const inside = gate();
        const aSeen: string[] = [];
        const aBatch = a.q.ordered("files", "idx", opts).batch({
          worker: 1,
          workers: 4,
          maxEvents: 3,
          handler: async (ev) => {
            aSeen.push(ev.id);
            inside.open();
            await release.wait;
          },
        });
        await inside.wait;
        const bReport = await b.q.ordered("files", "idx", opts).batch({ worker: 1, workers: 4, maxEvents: 3, handler: () => {} });
        assert.deepEqual({ events: bReport.events, busy: bReport.busy }, { events: 0, busy: true }, "B skipped the held slot");
        // C bypasses the try-lock: it must block on the cursor row, not read the same events.
        const cResult = c.sql.begin(async (tx) => {
          const [row] = await tx.unsafe(
            `select "${f.schema}".receive_ordered(queue => 'files', consumer => 'idx', slots => '{1}', max_events => 3, skip_try_lock => true)::text as r`,
          );
          return JSON.parse(row!.r) as { events: { id: string }[] };
        });
        let waiting = 0;
        for (let i = 0; i < 100 && waiting === 0; i++) {
          await sleep(50);
          const [w] = await f.raw(
            `select count(*)::int as n from pg_stat_activity where application_name = 'kq-worker-2' and wait_event_type = 'Lock'`,
          );
          waiting = Number(w!.n);
        }
        assert.equal(waiting, 1, "the bypassing client is blocked on the slot's cursor row");
        release.open();
        await aBatch;
        const cEvents = (await cResult).events.map((e) => e.id);
        assert.equal(aSeen.length, 3);
        assert.equal(cEvents.length, 3);
        assert.deepEqual(cEvents.filter((id) => aSeen.includes(id)), [], "no duplicate after the first committed");
      });
    },
  );

  test("static assignment: 3 workers cover 8 slots; with one absent its slots are drained by help-out and rotation is not pinned", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("files");
      const opts = { slots: 8, helpAfter: 1500 };
      const c = f.q.ordered<number>("files", "idx", opts);
      await c.subscribe();
      const keys = Array.from({ length: 64 }, (_, i) => `tenant-${i}`);
      await f.q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: i, key })));
      const bySlot = new Map<number, number>();
      const seen: Record<number, Set<number>> = { 0: new Set(), 1: new Set(), 2: new Set() };
      // All three present: each reads exactly its own slots {w, w+3, w+6}.
      for (const w of [0, 1, 2]) {
        await c.run({ worker: w, workers: 3, handler: (ev) => void seen[w]!.add(ev.slot!) });
      }
      for (const w of [0, 1, 2]) {
        for (const s of seen[w]!) assert.equal(s % 3, w, `worker ${w} read only its own slots`);
      }
      const covered = new Set([...seen[0]!, ...seen[1]!, ...seen[2]!]);
      assert.equal(covered.size, 8, "the three workers cover every slot");
      // Worker 1 goes missing. Its slots (1, 4, 7) get events; 0 and 2 help once they go unpolled.
      await f.q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: 100 + i, key })));
      const late: number[] = [];
      for (const w of [0, 2]) await c.run({ worker: w, workers: 3, handler: (ev) => void late.push(ev.payload) });
      const before = late.length;
      assert.ok(before < 64, "before the bound, nobody reads the absent worker's slots");
      await sleep(1600);
      for (const w of [0, 2]) {
        await c.run({
          worker: w,
          workers: 3,
          handler: (ev) => {
            late.push(ev.payload);
            bySlot.set(ev.slot!, (bySlot.get(ev.slot!) ?? 0) + 1);
          },
        });
      }
      assert.equal(late.length, 64, `every event drained (${before} before help-out)`);
      for (const s of [1, 4, 7]) assert.ok((bySlot.get(s) ?? 0) > 0, `slot ${s} was helped`);
      for (let i = 0; i < 3; i++) {
        const [m] = await f.q.maintain("files", { forceRotate: true });
        assert.equal(m!.rotation?.rotated, true, `rotation ${i} not pinned: ${JSON.stringify(m)}`);
      }
    });
  });

  test("retry affinity: a failed keyed event is redelivered to its own slot only", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files", { retryBase: 20, retryCap: 40 });
      const c = f.q.ordered<number>("files", "idx", { slots: 4 });
      await c.subscribe();
      await f.q.sendBatch("files", Array.from({ length: 20 }, (_, i) => ({ type: "E", payload: i, key: `tenant-${i % 5 + 1}` })));
      const deliveries: { n: number; slot: number; retry: number }[] = [];
      const handler = (ev: { payload: number; slot?: number; retry: number }) => {
        deliveries.push({ n: ev.payload, slot: ev.slot!, retry: ev.retry });
        if (ev.payload === 7 && ev.retry === 0) throw new Error("fail once");
      };
      await c.run({ handler });
      await sleep(60);
      await c.run({ handler });
      const seven = deliveries.filter((d) => d.n === 7);
      assert.deepEqual(seven.map((d) => d.retry), [0, 1]);
      const own = await c.slotOf("tenant-3");
      assert.deepEqual(seven.map((d) => d.slot), [own, own]);
      // The failure reruns its batch with savepoints: the events before 7 in that batch run
      // twice (their first writes rolled back), so count distinct deliveries.
      assert.equal(new Set(deliveries.map((d) => `${d.n}:${d.retry}`)).size, 21);
      assert.ok(deliveries.every((d) => d.n === 7 || d.retry === 0), "only 7 was retried");
    });
  });

  for (const ending of ["succeeds", "is dead-lettered"] as const) {
    test(`pause: K's head fails twice then ${ending} → K's later events wait, then arrive in order, once, retry 0; other keys flow`, { skip }, async () => {
      await withPg(async (f) => {
        // A long backoff, so the checks below cannot race it; "later" is made by
        // moving the head's retry due time to now, as time passing would.
        await f.q.createQueue("files", { retryBase: "1h", retryCap: "1h", maxRetries: ending === "succeeds" ? 5 : 1 });
        const later = () => f.raw(`update "${f.schema}".retry set due_at = now() where due_at <> 'infinity'`);
        const c = f.q.ordered<number>("files", "idx", { slots: 1, onFailure: "pause" });
        await c.subscribe();
        const seen: string[] = [];
        let headFailures = 0;
        const handler = (ev: { key: string | null; payload: number; retry: number }) => {
          if (ev.key === "K" && ev.payload === 0 && (ending === "is dead-lettered" || headFailures < 2)) {
            headFailures++;
            throw new Error(`head fails (${headFailures})`);
          }
          seen.push(`${ev.key}${ev.payload}:${ev.retry}`);
        };
        await f.q.sendBatch("files", [
          { type: "E", payload: 0, key: "K" },
          { type: "E", payload: 0, key: "L" },
          { type: "E", payload: 1, key: "K" },
          { type: "E", payload: 1, key: "L" },
        ]);
        await c.run({ handler });
        assert.deepEqual(seen, ["L0:0", "L1:0"], "L flows while K is blocked");
        const blocked = await c.blockedKeys();
        assert.deepEqual(blocked.map((b) => [b.slot, b.key, b.held]), [[0, "K", 1]]);
        await f.q.sendBatch("files", [{ type: "E", payload: 2, key: "K" }, { type: "E", payload: 2, key: "L" }]);
        await c.run({ handler });
        assert.deepEqual(seen, ["L0:0", "L1:0", "L2:0"], "K2 is held too; L2 is not delayed");
        const [held] = await f.raw(
          `select count(*)::int as n from "${f.schema}".retry where ev_key = 'K' and due_at = 'infinity' and retry = 0`,
        );
        assert.equal(held!.n, 2, "K1 and K2 are held, without spending retries");
        for (let i = 0; i < 5 && !seen.includes("K2:0"); i++) {
          await later();
          await c.run({ handler });
        }
        const k = seen.filter((s) => s.startsWith("K"));
        if (ending === "succeeds") {
          assert.equal(headFailures, 2);
          assert.deepEqual(k, ["K0:2", "K1:0", "K2:0"], "head, then the held events in order, exactly once, retry 0");
          assert.equal(await f.q.dlq.count(), 0);
        } else {
          assert.equal(headFailures, 2);
          assert.deepEqual(k, ["K1:0", "K2:0"], "the held events flow in order after the head is dead-lettered");
          assert.equal(await f.q.dlq.count({ key: "K" }), 1);
        }
        assert.deepEqual(await c.blockedKeys(), []);
        const [left] = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
        assert.equal(left!.n, 0);
      });
    });
  }

  test(
    "pause: a head dead-lettered on its first failure (bad payload, maxRetries 0) releases the events held behind it in the same batch",
    { skip },
    async () => {
      await withPg({ payloads: { files: v.object({ n: v.number() }) } }, async (f) => {
        await f.q.createQueue("files", { maxRetries: 0 });
        const c = f.q.ordered<{ n: number }>("files", "idx", { slots: 1, onFailure: "pause" });
        await c.subscribe();
        // The head bypasses the send-side schema check (an older producer): it fails at receive.
        await f.raw(`select "${f.schema}".send(queue => 'files', type => 'E', payload => '{"n": "bad"}'::jsonb, key => 'K')`);
        await f.q.sendBatch("files", [{ type: "E", payload: { n: 1 }, key: "K" }, { type: "E", payload: { n: 0 }, key: "L" }]);
        await f.q.tick("files");
        const seen: string[] = [];
        const first = await c.batch({ handler: (ev) => void seen.push(`${ev.key}${ev.payload.n}`) });
        assert.deepEqual(seen, ["L0"], "K1 is held behind its failed head in the same batch");
        assert.deepEqual([first.events, first.deadLettered], [1, 1]);
        await c.run({ handler: (ev) => void seen.push(`${ev.key}${ev.payload.n}`) });
        assert.deepEqual(seen, ["L0", "K1"], "then released: delivered once, after the head");
        assert.deepEqual(await c.blockedKeys(), []);
        const [left] = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
        assert.equal(left!.n, 0);
      });
    },
  );

  test("N invariant: another slot count is rejected and nothing changes", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      await f.q.ordered("files", "idx", { slots: 8 }).subscribe();
      await assert.rejects(
        f.q.ordered("files", "idx", { slots: 4 }).subscribe(),
        (e: unknown) => e instanceof KeyqError && e.code === "SLOT_COUNT_MISMATCH" && /has 8 slots/.test(e.message),
      );
      const [row] = await f.raw(`select slots, (select count(*)::int from "${f.schema}".cursor) as cursors from "${f.schema}".consumer`);
      assert.deepEqual(row, { slots: 8, cursors: 8 });
      assert.throws(() => f.q.ordered("files", "x", { slots: 0 }), (e: unknown) => e instanceof KeyqError && e.code === "INVALID_INPUT");
      assert.throws(
        () => f.q.ordered("files", "x", { slots: 8, onFailure: "halt" as "skip" }),
        (e: unknown) => e instanceof KeyqError && e.code === "INVALID_INPUT",
      );
      await assert.rejects(f.q.exclusive("files", "idx").subscribe(), (e: unknown) => e instanceof KeyqError && e.code === "CONSUMER_KIND_MISMATCH");
    });
  });
});
