// The log read again, part 2: start positions (a Date, an event id), seek
// back and forward on plain, Tier A and Tier B consumers (all slots or one),
// a seek refused while a batch holds the consumer, bad positions refused
// with typed errors and nothing changed, and one key's history replayed into
// one consumer while others run.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Consumer, KeyqEvent } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { type PgFixture, withPg } from "./helpers/fixture.ts";
import { worker } from "./helpers/sync.ts";

const skip = await dbSkip();

async function drain(c: Consumer, into: string[] = []): Promise<string[]> {
  for (let i = 0; i < 50; i++) {
    const r = await c.run({ maxEvents: 500, handler: (ev: KeyqEvent) => void into.push(ev.id) });
    if (r.events === 0) break;
  }
  return into;
}

const events = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ type: "E", payload: { i: from + i }, key: `k${(from + i) % 5}` }));
const ids = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => String(from + i));
const sorted = (list: string[]) => [...list].sort((a, b) => Number(a) - Number(b));

/** Cursor rows and chunks of a consumer, to show that a refused call changed nothing. */
async function state(f: PgFixture, name: string): Promise<string> {
  const rows = await f.raw(
    `select cu.slot, cu.tick_id, cu.end_tick_id, cu.last_txid::text, cu.last_id,
            (select count(*) from "${f.schema}".chunk k where k.consumer_id = c.consumer_id) as chunks,
            (select count(*) from "${f.schema}".retry r where r.consumer_id = c.consumer_id) as retries
       from "${f.schema}".consumer c join "${f.schema}".cursor cu using (consumer_id)
      where c.consumer_name = $1 order by cu.slot`,
    [name],
  );
  return JSON.stringify(rows);
}

/** Two batches of 20 events with a tick after each; `between` is a time after the first tick. */
async function twoWindows(f: PgFixture): Promise<{ between: Date; second: string[] }> {
  await f.q.sendBatch("files", events(20));
  await f.q.tick("files", { force: true });
  await new Promise((r) => setTimeout(r, 20));
  const between = new Date();
  await new Promise((r) => setTimeout(r, 20));
  const sent = await f.q.sendBatch("files", events(20, 20));
  await f.q.tick("files", { force: true });
  return { between, second: sent.map((s) => s.id) };
}

describe("start positions and seek", () => {
  test("from a Date and from an event id, on plain, Tier A and Tier B consumers", { skip, timeout: 120_000 }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files", { retention: "1 hour" });
      const { between, second } = await twoWindows(f);
      const kinds = (
        name: string,
      ) => [f.q.consumer("files", `${name}-p`), f.q.exclusive("files", `${name}-a`), f.q.ordered("files", `${name}-b`, { slots: 3 })];
      for (const c of kinds("date")) {
        await c.subscribe({ from: between });
        assert.deepEqual(sorted(await drain(c)), second, `${c.name}: the events committed after the time`);
      }
      for (const c of kinds("id")) {
        await c.subscribe({ from: second[5]! });
        const got = await drain(c);
        assert.deepEqual(sorted(got), second.slice(5), `${c.name}: that event first, then the rest`);
      }
      const plain = f.q.consumer("files", "order");
      await plain.subscribe({ from: "3" });
      assert.deepEqual(await drain(plain), ids(3, 40), "log order from event 3");
    });
  });

  test(
    "seek back and forward on plain, Tier A and Tier B; one slot of Tier B; retries of the moved range are dropped",
    { skip, timeout: 120_000 },
    async () => {
      await withPg(async (f) => {
        await f.q.createQueue("files", { retention: "1 hour" });
        const cs = [f.q.consumer("files", "p"), f.q.exclusive("files", "a"), f.q.ordered("files", "b", { slots: 3 })];
        for (const c of cs) await c.subscribe();
        await f.q.sendBatch("files", events(40));
        for (const c of cs) assert.equal((await drain(c)).length, 40);
        let total = 40;
        for (const c of cs) {
          const back = await c.seek("earliest");
          assert.equal(back.slots, c.name === "b" ? 3 : 1);
          assert.deepEqual(sorted(await drain(c)), ids(1, total), `${c.name}: back to earliest, everything again`);
          await c.seek("31");
          assert.deepEqual(sorted(await drain(c)), ids(31, total), `${c.name}: to an id`);
          await f.q.sendBatch("files", events(5, 100));
          total += 5;
          await c.seek("latest");
          assert.deepEqual(await drain(c), [], `${c.name}: forward to latest skips what was pending`);
        }
        // One slot of the ordered consumer goes back; the other slots stay.
        const b = f.q.ordered("files", "b", { slots: 3 });
        const slotOf = new Map<string, number>();
        for (let k = 0; k < 5; k++) slotOf.set(`k${k}`, await b.slotOf(`k${k}`));
        const one = [...slotOf.values()][0]!;
        await b.seek("earliest", { slot: one });
        const again: KeyqEvent[] = [];
        for (let i = 0; i < 20; i++) {
          const r = await b.run({ handler: (ev: KeyqEvent) => void again.push(ev) });
          if (r.events === 0) break;
        }
        assert.ok(again.length > 0);
        assert.deepEqual([...new Set(again.map((e) => slotOf.get(e.key!)))], [one], "only the sought slot's keys come again");
        const expected = (await f.raw(`select count(*)::int as n from "${f.schema}".event_1 where "${f.schema}".slot_of(ev_key, 3) = ${one}`))[0]!.n;
        assert.equal(again.length, expected);
        await assert.rejects(b.seek("earliest", { slot: 3 }), { code: "INVALID_INPUT" });
        await assert.rejects(f.q.seek("files", "p", "earliest", { slot: 0 }), { code: "INVALID_INPUT" }, "slots are for ordered consumers");

        // A failing event leaves a retry; a seek past it drops the retry (the stated rule).
        let fail = true;
        await f.q.send("files", { type: "E", payload: 0, key: "k1" });
        await f.q.consumer("files", "p").run({
          handler: () => {
            if (fail) throw new Error("no");
          },
        });
        const pending = (await f.q.status({ queue: "files" }))[0]!.consumers.find((c) => c.name === "p")!.retries;
        assert.equal(pending, 11, "the 10 events sent since p's last seek and this one failed");
        const r = await f.q.seek("files", "p", "latest");
        assert.equal(r.retriesDropped, 11);
        assert.equal((await f.q.status({ queue: "files" }))[0]!.consumers.find((c) => c.name === "p")!.retries, 0);
        fail = false;
      });
    },
  );

  test("a seek while a batch holds the consumer is CONSUMER_BUSY and changes nothing", { skip, timeout: 120_000 }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const other = worker(f.url, f.schema, 0, "kq-seek");
      defer(() => other.sql.end());
      await f.q.createQueue("files");
      for (const c of [f.q.consumer("files", "p"), f.q.exclusive("files", "a"), f.q.ordered("files", "b", { slots: 1 })]) {
        await c.subscribe();
        await f.q.sendBatch("files", events(3));
        const before = await state(f, c.name);
        let refused: unknown;
        let calls = 0;
        await c.run({
          maxEvents: 100,
          handler: async () => {
            if (calls++ > 0) return;
            refused = await other.q.seek("files", c.name, "earliest").catch((e) => e);
          },
        });
        assert.equal((refused as { code?: string })?.code, "CONSUMER_BUSY", `${c.name}: ${String(refused)}`);
        assert.notEqual(await state(f, c.name), before, "the batch itself moved on");
        const after = await state(f, c.name);
        await other.q.seek("files", c.name, "latest"); // no batch now: allowed
        assert.notEqual(await state(f, c.name), after);
      }
    });
  });

  test(
    "bad positions: future dates, unknown ids, ids of another queue, a passed range; typed errors, nothing changed",
    { skip, timeout: 120_000 },
    async () => {
      await withPg(async (f) => {
        await f.q.createQueue("files");
        await f.q.createQueue("other");
        const c = f.q.consumer("files", "c");
        await c.subscribe();
        await f.q.sendBatch("files", events(10));
        await f.q.sendBatch("other", events(50));
        await drain(c);
        for (let i = 0; i < 3; i++) await f.q.maintain("files", { forceRotate: true }); // events 1–10 are gone
        await f.q.sendBatch("files", events(5, 10));
        const before = await state(f, "c");
        const cases: [unknown, string][] = [
          [new Date(Date.now() + 3_600_000), "POSITION_OUT_OF_RANGE"],
          [new Date("2001-01-01"), "POSITION_OUT_OF_RANGE"],
          ["40", "EVENT_NOT_FOUND"], // an id of queue "other", beyond this queue's ids
          ["3", "POSITION_OUT_OF_RANGE"], // truncated by rotation
          [new Date("nope"), "INVALID_INPUT"],
          ["first", "INVALID_INPUT"],
          [12, "INVALID_INPUT"],
        ];
        for (const [to, code] of cases) {
          await assert.rejects(c.seek(to as string), { code }, `seek ${String(to)}`);
          await assert.rejects(f.q.consumer("files", "new").subscribe({ from: to as string }), { code }, `subscribe from ${String(to)}`);
        }
        assert.equal(await state(f, "c"), before, "the cursor did not move");
        assert.equal(await state(f, "new"), "[]", "no consumer was created");
        await assert.rejects(f.q.history("files", "k1", { from: new Date(Date.now() + 60_000) }), { code: "POSITION_OUT_OF_RANGE" });
      });
    },
  );
});

describe("key history", () => {
  test("replays one key's retained events in order into one consumer while other consumers run; nobody else moves", { skip, timeout: 120_000 }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      await f.q.createQueue("files", { retention: "1 hour" });
      const w = [worker(f.url, f.schema, 0, "kq-audit"), worker(f.url, f.schema, 1, "kq-proj")];
      defer(() => Promise.all(w.map((x) => x.sql.end())));
      const audit = w[0]!.q.consumer("files", "audit");
      const proj = w[1]!.q.ordered("files", "proj", { slots: 4 });
      await audit.subscribe();
      await proj.subscribe();
      const seenAudit: string[] = [];
      const seenProj: KeyqEvent[] = [];
      const stop = new AbortController();
      const loops = [
        audit.work({ signal: stop.signal, minPollMs: 20, maxPollMs: 100, handler: (ev: KeyqEvent) => void seenAudit.push(ev.id) }),
        proj.work({ signal: stop.signal, minPollMs: 20, maxPollMs: 100, handler: (ev: KeyqEvent) => void seenProj.push(ev) }),
      ];
      defer(async () => {
        stop.abort();
        await Promise.allSettled(loops);
      });
      const sent: string[] = [];
      for (let i = 0; i < 6; i++) {
        sent.push(...(await f.q.sendBatch("files", events(30, i * 30))).map((s) => s.id));
        if (i === 3) {
          await f.q.tick("files", { force: true }); // history is what ticks cover
          const replayed = await f.q.replayKey("files", "k2", { into: "proj" });
          assert.equal(replayed, 24, "k2's history so far");
        }
        await new Promise((r) => setTimeout(r, 30));
      }
      for (let i = 0; i < 200 && (seenAudit.length < 180 || seenProj.length < 180 + 24); i++) await new Promise((r) => setTimeout(r, 50));
      stop.abort();
      await Promise.allSettled(loops);
      assert.deepEqual(sorted(seenAudit), sorted(sent), "the other consumer got every event exactly once");
      const k2 = seenProj.filter((e) => e.key === "k2");
      const replays = k2.filter((e) => e.retry === 0 && seenProj.indexOf(e) !== seenProj.findIndex((x) => x.id === e.id));
      const firstTime = [...new Map(k2.map((e) => [e.id, e])).keys()];
      assert.equal(replays.length, 24, "k2's history came again, once");
      assert.deepEqual(replays.map((e) => e.id), [...replays.map((e) => e.id)].sort((a, b) => Number(a) - Number(b)), "in order");
      const others = seenProj.filter((e) => e.key !== "k2").map((e) => e.id);
      assert.equal(new Set(others).size, others.length, "no other key came twice");
      assert.equal(firstTime.length, 36, "every k2 event was delivered");
    });
  });
});
