/**
 * The single-connection part of the suite: every case needs one connection
 * only, so it runs on PGlite too, and on every driver (conformance).
 */
import assert from "node:assert/strict";
import * as v from "valibot";
import { KeyqError } from "../../mod.ts";
import { drain, type Fixture } from "../helpers/keyq.ts";
import { refused } from "../helpers/refused.ts";

/** One case: a name and a body over a fresh fixture. */
export interface Case {
  name: string;
  options?: Parameters<typeof import("../helpers/keyq.ts").pgFixture>[0];
  run(f: Fixture): Promise<void>;
}

const payloadSchema = v.object({ path: v.string(), size: v.number() });

/** The suites' name for `refused` (tests/helpers/refused.ts). */
const rejects = refused;

async function eventCount(f: Fixture): Promise<number> {
  const rows = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
  return Number(rows[0]!.n);
}

export { rejects };

export const basicCases: Case[] = [
  {
    name: "migrate is idempotent and records one version row per migration",
    async run(f) {
      const again = await f.q.migrate();
      assert.deepEqual(again.applied, []);
      assert.ok(again.to >= 1);
      const rows = await f.raw(`select version from "${f.schema}".migration`);
      assert.equal(rows.length, again.to);
    },
  },
  {
    name: "queues: create is idempotent, list shows settings, drop removes",
    async run(f) {
      const a = await f.q.createQueue("files", { maxRetries: 7, rotationPeriod: "30m" });
      assert.equal(a.created, true);
      assert.equal(a.queue.maxRetries, 7);
      assert.equal(a.queue.rotationPeriod, 1_800_000, "durations are reported in milliseconds");
      const b = await f.q.createQueue("files");
      assert.equal(b.created, false);
      const updated = await f.q.updateQueue("files", { maxRetries: 2 });
      assert.equal(updated.maxRetries, 2);
      assert.deepEqual((await f.q.listQueues()).map((q) => q.name), ["files"]);
      assert.equal(await f.q.dropQueue("files"), true);
      assert.equal(await f.q.dropQueue("files"), false);
      assert.deepEqual(await f.q.listQueues(), []);
      const tables = await f.raw(
        `select count(*)::int as n from pg_tables where schemaname = $1 and tablename like 'event\\_%'`,
        [f.schema],
      );
      assert.equal(tables[0]!.n, 0);
    },
  },
  {
    name: "send and sendBatch keep send order; a consumer gets every event once",
    async run(f) {
      await f.q.createQueue("files");
      await f.q.consumer("files", "audit").subscribe();
      const one = await f.q.send("files", { type: "FileCreated", payload: { path: "/a" }, key: "t1" });
      const many = await f.q.sendBatch<unknown>("files", [
        { type: "FileCreated", payload: { path: "/b" }, key: "t2" },
        { type: "FileDeleted", payload: { path: "/a" }, key: "t1" },
        { type: "Note", payload: "plain string" },
      ]);
      const seen = await drain(f.q, "files", "audit");
      assert.deepEqual(seen.map((e) => e.id), [one.id, ...many.map((m) => m.id)]);
      assert.deepEqual(seen.map((e) => e.key), ["t1", "t2", "t1", null]);
      assert.deepEqual(seen[3]!.payload, "plain string");
      assert.deepEqual(await drain(f.q, "files", "audit"), [], "nothing is delivered twice");
    },
  },
  {
    name: "fan-out: two consumers each see every event",
    async run(f) {
      await f.q.createQueue("files");
      await f.q.consumer("files", "a").subscribe();
      await f.q.consumer("files", "b").subscribe();
      const sent = await f.q.sendBatch("files", Array.from({ length: 25 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 3}` })));
      const a = await drain(f.q, "files", "a", 7);
      const b = await drain(f.q, "files", "b", 100);
      assert.deepEqual(a.map((e) => e.id), sent.map((s) => s.id));
      assert.deepEqual(b.map((e) => e.id), sent.map((s) => s.id));
    },
  },
  {
    name: "events sent in a caller transaction commit or roll back with it",
    async run(f) {
      await f.q.createQueue("files");
      await f.q.consumer("files", "audit").subscribe();
      const driver = f.q.driver;
      await assert.rejects(
        driver.transaction(async (tx) => {
          await f.q.send("files", { type: "Lost", payload: 1 }, { tx });
          await f.q.sendBatch("files", [{ type: "Lost", payload: 2 }], { tx });
          throw new Error("business write failed");
        }),
        /business write failed/,
      );
      await driver.transaction(async (tx) => {
        await f.q.send("files", { type: "Kept", payload: 3 }, { tx });
      });
      const seen = await drain(f.q, "files", "audit");
      assert.deepEqual(seen.map((e) => e.type), ["Kept"]);
    },
  },
  {
    name: "a big window is consumed over several batches with durable progress",
    async run(f) {
      await f.q.createQueue("files");
      const c = f.q.consumer<number>("files", "audit");
      await c.subscribe();
      await f.q.sendBatch("files", Array.from({ length: 50 }, (_, i) => ({ type: "E", payload: i })));
      await f.q.tick("files");
      const got: number[] = [];
      const first = await c.batch({ maxEvents: 20, handler: (ev) => void got.push(ev.payload) });
      assert.equal(first.events, 20);
      // A failing batch in the middle rolls back and does not lose its place.
      await assert.rejects(
        c.batch({
          maxEvents: 20,
          handleBatch: () => {
            throw new Error("boom");
          },
        }),
        /boom/,
      );
      const second = await c.batch({ maxEvents: 20, handler: (ev) => void got.push(ev.payload) });
      const third = await c.batch({ maxEvents: 20, handler: (ev) => void got.push(ev.payload) });
      assert.deepEqual([second.events, third.events], [20, 10]);
      assert.deepEqual(got, Array.from({ length: 50 }, (_, i) => i));
      const cursor = await f.raw(`select end_tick_id, last_id from "${f.schema}".cursor`);
      assert.equal(cursor[0]!.end_tick_id, null, "the window is closed after its last batch");
    },
  },
  {
    name: "a batch handler that throws rolls the whole batch back; the same events come again",
    async run(f) {
      await f.q.createQueue("files");
      const c = f.q.consumer("files", "audit");
      await c.subscribe();
      await f.q.sendBatch("files", [{ type: "A", payload: 1 }, { type: "B", payload: 2 }]);
      await f.q.tick("files");
      await assert.rejects(
        c.batch({
          handleBatch: async (events, { tx, fail }) => {
            await tx.query(`create table "${f.schema}".side (id text)`);
            for (const ev of events) await tx.query(`insert into "${f.schema}".side values ($1)`, [ev.id]);
            fail(events[0]!, new Error("recorded, then rolled back"));
            throw new Error("whole batch failed");
          },
        }),
        /whole batch failed/,
      );
      const side = await f.raw(`select to_regclass('"${f.schema}".side')::text as t`);
      assert.equal(side[0]!.t, null, "the handler's writes rolled back with the batch");
      const retries = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
      assert.equal(retries[0]!.n, 0, "nothing half-recorded: no retry row");
      const again: string[] = [];
      const r = await c.batch({ handler: (ev) => void again.push(`${ev.type}:${ev.retry}`) });
      assert.deepEqual(again, ["A:0", "B:0"]);
      assert.equal(r.retried, 0);
    },
  },
  {
    name: "a handler that throws fails only its event: its writes roll back, the others commit",
    async run(f) {
      await f.q.createQueue("files", { retryBase: "1h" });
      const c = f.q.consumer("files", "audit");
      await c.subscribe();
      await f.raw(`create table "${f.schema}".side (id text)`);
      await f.q.sendBatch("files", ["A", "B", "C"].map((type) => ({ type, payload: null })));
      await f.q.tick("files");
      const errors: string[] = [];
      const r = await c.batch({
        onError: (err, ev) => errors.push(`${ev.type}:${(err as Error).message}`),
        handler: async (ev, tx) => {
          await tx.query(`insert into "${f.schema}".side values ($1)`, [ev.type]);
          if (ev.type === "B") throw new Error("B failed");
        },
      });
      assert.deepEqual({ events: r.events, retried: r.retried, deadLettered: r.deadLettered }, { events: 3, retried: 1, deadLettered: 0 });
      assert.deepEqual(errors, ["B:B failed"]);
      const side = await f.raw(`select id from "${f.schema}".side order by id`);
      assert.deepEqual(side.map((x) => x.id), ["A", "C"]);
      const retry = await f.raw(`select ev_type, retry, last_error->>'message' as msg from "${f.schema}".retry`);
      assert.deepEqual(retry, [{ ev_type: "B", retry: 1, msg: "B failed" }]);
    },
  },
  {
    name: "payload schemas are checked at send (nothing written) and at receive",
    options: { payloads: { files: payloadSchema } },
    async run(f) {
      await f.q.createQueue("files");
      const c = f.q.consumer<v.InferOutput<typeof payloadSchema>>("files", "audit");
      await c.subscribe();
      const err = await rejects(f.q.send("files", { type: "A", payload: { path: "/x", size: "big" } }), "INVALID_PAYLOAD");
      assert.match(err.message, /payload\.size/);
      await rejects(f.q.sendBatch("files", [{ type: "A", payload: { path: "/ok", size: 1 } }, { type: "A", payload: {} }]), "INVALID_PAYLOAD");
      assert.equal(await eventCount(f), 0);
      await f.q.send("files", { type: "A", payload: { path: "/ok", size: 1 } });
      // A row written by an older producer without the schema: receive-side check fails the handler.
      await f.raw(
        `select "${f.schema}".send(queue => 'files', type => 'A', payload => '{"path": 5}'::jsonb)`,
      );
      await f.q.tick("files");
      const sizes: number[] = [];
      const r = await c.batch({ handler: (ev) => void sizes.push(ev.payload.size) });
      assert.deepEqual(sizes, [1], "the handler never sees the bad payload");
      assert.equal(r.retried, 1, "a receive-side mismatch is a failure of that event");
      const retry = await f.raw(`select last_error->>'message' as msg from "${f.schema}".retry`);
      assert.match(String(retry[0]!.msg), /payload\.path/);
    },
  },
  {
    name: "bad input gets typed errors and writes nothing",
    async run(f) {
      await f.q.createQueue("files");
      for (const bad of ['files"; drop table x; --', "a'b", "x".repeat(64), "", "1abc", "has space", 42]) {
        await rejects(f.q.createQueue(bad as string), "INVALID_IDENTIFIER");
        await rejects(f.q.send(bad as string, { type: "A", payload: 1 }), "INVALID_IDENTIFIER");
        assert.throws(() => f.q.consumer("files", bad as string), (e: unknown) => e instanceof KeyqError && e.code === "INVALID_IDENTIFIER");
      }
      await rejects(f.q.send("nope", { type: "A", payload: 1 }), "QUEUE_NOT_FOUND");
      await rejects(f.q.send("files", { type: "A", payload: 10n }), "INVALID_PAYLOAD");
      await rejects(f.q.send("files", { type: "A", payload: { f: () => 1 } }), "INVALID_PAYLOAD");
      await rejects(f.q.send("files", { type: "A", payload: Number.NaN }), "INVALID_PAYLOAD");
      await rejects(f.q.send("files", { type: "A" } as never), "INVALID_PAYLOAD");
      await rejects(f.q.send("files", { type: "", payload: 1 }), "INVALID_INPUT");
      await rejects(f.q.send("files", { type: "A", payload: 1, key: 5 } as never), "INVALID_INPUT");
      await rejects(f.q.send("files", { type: "A", payload: 1, extra: true } as never), "INVALID_INPUT");
      await rejects(f.q.sendBatch<unknown>("files", [{ type: "A", payload: 1 }, { type: "B", payload: 1n }]), "INVALID_PAYLOAD");
      const c = f.q.consumer("files", "audit");
      for (const maxEvents of [0, -1, 1.5, 10_001]) {
        const err = await rejects(c.batch({ maxEvents, handler: () => {} }), "INVALID_INPUT");
        assert.match(err.message, /maxEvents/);
      }
      await rejects(c.batch({ handler: "nope" } as never), "INVALID_INPUT");
      await rejects(f.q.createQueue("other", { maxRetries: -1 }), "INVALID_INPUT");
      await rejects(f.q.createQueue("other", { rotationPeriod: "soon" }), "INVALID_INPUT");
      await rejects(f.q.createQueue("other", { tables: 1 }), "INVALID_INPUT");
      await rejects(c.batch({ handler: () => {} }), "CONSUMER_NOT_FOUND");
      assert.equal(await eventCount(f), 0);
      assert.deepEqual((await f.q.listQueues()).map((q) => q.name), ["files"]);
      const consumers = await f.raw(`select count(*)::int as n from "${f.schema}".consumer`);
      assert.equal(consumers[0]!.n, 0);
    },
  },
  {
    name: "rotation truncates old tables once consumers pass them; a lagging consumer pins it and loses nothing",
    async run(f) {
      await f.q.createQueue("files");
      const fast = f.q.consumer<number>("files", "fast");
      const slow = f.q.consumer<number>("files", "slow");
      await fast.subscribe();
      await slow.subscribe();
      const sizeOf = async () => Number((await f.raw(`select count(*)::int as n from "${f.schema}".event`))[0]!.n);
      const sent: number[] = [];
      let n = 0;
      const slowSeen: number[] = [];
      // Four rounds of: send, fast drains, rotate. The slow consumer never reads.
      for (let round = 0; round < 4; round++) {
        const batch = Array.from({ length: 30 }, () => ({ type: "E", payload: n++ }));
        sent.push(...batch.map((b) => b.payload));
        await f.q.sendBatch("files", batch);
        await drain(f.q, "files", "fast");
        await f.q.maintain("files", { forceRotate: true });
      }
      const pinned = await f.q.maintain("files", { forceRotate: true });
      assert.equal(pinned[0]!.rotation?.rotated, false);
      assert.equal(pinned[0]!.rotation?.reason, "lagging consumer");
      await slow.run({ budgetMs: 60_000, handler: (ev) => void slowSeen.push(ev.payload) });
      assert.deepEqual(slowSeen, sent, "the lagging consumer lost nothing");
      // Everyone caught up: a full ring of rotations empties every table.
      for (let i = 0; i < 3; i++) {
        const r = await f.q.maintain("files", { forceRotate: true });
        assert.equal(r[0]!.rotation?.rotated, true, JSON.stringify(r));
      }
      assert.equal(await sizeOf(), 0);
      const ticks = await f.raw(`select count(*)::int as n from "${f.schema}".tick`);
      assert.ok(Number(ticks[0]!.n) <= 2, `ticks are pruned (${ticks[0]!.n} left)`);
    },
  },
  {
    name: "status: per queue tick and backlog, per consumer and slot lag, retries, dead letters, stale cursors",
    async run(f) {
      await f.q.createQueue("files", { maxRetries: 0 });
      await f.q.createQueue("other");
      const c = f.q.ordered("files", "idx", { slots: 2 });
      await c.subscribe();
      await f.q.sendBatch("files", [{ type: "A", payload: 1, key: "x" }, { type: "B", payload: 2, key: "y" }]);
      let st = await f.q.status({ queue: "files" });
      assert.equal(st.length, 1);
      assert.equal(st[0]!.eventsSinceTick, 2);
      assert.deepEqual(st[0]!.consumers[0]!.cursors.map((x) => x.lagEvents), [2, 2]);
      await c.run({
        handler: (ev) => {
          if (ev.type === "A") throw new Error("no");
        },
      });
      st = await f.q.status({ queue: "files", staleAfter: "1h" });
      const cons = st[0]!.consumers[0]!;
      assert.deepEqual([cons.kind, cons.slots, cons.deadLetters, cons.retries], ["ordered", 2, 1, 0]);
      assert.deepEqual(cons.cursors.map((x) => [x.lagEvents, x.stale]), [[0, false], [0, false]]);
      assert.equal(st[0]!.eventsSinceTick, 0);
      await new Promise((r) => setTimeout(r, 30));
      const stale = await f.q.status({ queue: "files", staleAfter: 10 });
      assert.ok(stale[0]!.consumers[0]!.cursors.every((x) => x.stale), "cursors not polled for 10 ms are flagged");
      assert.deepEqual((await f.q.status()).map((s) => s.queue), ["files", "other"]);
      await rejects(f.q.status({ queue: "no such;queue" }), "INVALID_IDENTIFIER");
      const ticks = await f.raw(`select "${f.schema}".tick_all()::text as t`);
      assert.ok(JSON.parse(String(ticks[0]!.t)).files !== undefined);
    },
  },
  {
    name: "the ticker ticks only when something committed since the last tick (or when forced)",
    async run(f) {
      await f.q.createQueue("files");
      assert.equal(await f.q.tick("files"), null, "no events, no tick");
      await f.q.send("files", { type: "A", payload: 1 });
      const t1 = await f.q.tick("files");
      assert.ok(t1);
      assert.equal(await f.q.tick("files"), null);
      const t2 = await f.q.tick("files", { force: true });
      assert.ok(t2 && BigInt(t2) > BigInt(t1));
      await rejects(f.q.tick("missing"), "QUEUE_NOT_FOUND");
    },
  },
];
