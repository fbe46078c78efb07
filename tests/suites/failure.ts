/**
 * Retries, dead letters and dedup: cases that need one connection only, so
 * they run on Postgres and on PGlite alike.
 */
import assert from "node:assert/strict";
import type { Consumer, KeyqEvent } from "../../mod.ts";
import { type Case, rejects } from "./basic.ts";
import type { Fixture } from "../helpers/keyq.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls single batches until `done()` or the deadline. */
async function pump<P>(
  c: Consumer<P>,
  handler: (ev: KeyqEvent<P>) => void | Promise<void>,
  done: () => boolean | Promise<boolean>,
  ms = 10_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, "timed out waiting for deliveries");
    await c.batch({ maxEvents: 50, handler });
    await sleep(5);
  }
}

async function count(f: Fixture, table: string, where = "true"): Promise<number> {
  return Number((await f.raw(`select count(*)::int as n from "${f.schema}".${table} where ${where}`))[0]!.n);
}

export const failureCases: Case[] = [
  {
    name: "backoff: redelivered no earlier than its growing delay; maxRetries retries, then the DLQ with the last error",
    async run(f) {
      await f.q.createQueue("jobs", { maxRetries: 3, retryBase: 200, retryCap: "10s" });
      const c = f.q.consumer<string>("jobs", "worker");
      await c.subscribe();
      await f.q.sendBatch("jobs", [{ type: "Poison", payload: "p", key: "k" }, { type: "Flaky", payload: "f" }]);
      await f.q.tick("jobs");
      const poison: number[] = [];
      const flaky: number[] = [];
      const delays: number[] = [];
      await pump(c, (ev) => {
        if (ev.type === "Flaky") {
          flaky.push(ev.retry);
          if (ev.retry === 0) throw new Error("flaky once");
          return;
        }
        poison.push(Date.now());
        assert.equal(ev.retry, poison.length - 1, "the handler sees the retry count");
        assert.equal(ev.key, "k", "a retried event keeps its key");
        throw Object.assign(new Error(`poison attempt ${poison.length}`), { code: "E_POISON" });
      }, async () => {
        const due = await f.raw(
          `select extract(epoch from due_at - clock_timestamp()) * 1000 as ms, retry from "${f.schema}".retry where ev_type = 'Poison'`,
        );
        if (due.length && Number(due[0]!.retry) === delays.length + 1) delays.push(Number(due[0]!.ms));
        return (await count(f, "dead_letter")) === 1;
      });
      assert.equal(poison.length, 4, "1 delivery + maxRetries (3) retries");
      const gaps = poison.slice(1).map((t, i) => t - poison[i]!);
      gaps.forEach((gap, i) => assert.ok(gap >= 100 * 2 ** i, `retry ${i + 1} came after ${gap} ms, before its minimum ${100 * 2 ** i} ms`));
      for (let i = 1; i < delays.length; i++) assert.ok(delays[i]! > delays[i - 1]! - 20, `delays grow: ${delays.join(", ")}`);
      const [dead] = await f.q.dlq.list();
      assert.equal(dead!.attempts, 4);
      assert.equal(dead!.consumer, "worker");
      assert.equal(dead!.key, "k");
      assert.deepEqual(dead!.error, { message: "poison attempt 4", code: "E_POISON", name: "Error" });
      assert.deepEqual(flaky, [0, 1], "the flaky event succeeded on its first retry");
      assert.equal(await count(f, "retry"), 0, "no retry rows left");
      assert.equal(await f.q.dlq.count({ queue: "jobs" }), 1, "the successful retry left no DLQ row");
    },
  },
  {
    name: "a failing query in a handler fails only that event; the batch's other writes commit",
    async run(f) {
      await f.q.createQueue("jobs", { retryBase: "1h" });
      const c = f.q.consumer("jobs", "w");
      await c.subscribe();
      await f.raw(`create table "${f.schema}".side (n int)`);
      await f.q.sendBatch("jobs", [1, 0, 2].map((n) => ({ type: "Divide", payload: n })));
      await f.q.tick("jobs");
      const r = await c.batch({
        handler: async (ev, tx) => {
          await tx.query(`insert into "${f.schema}".side values ($1::int)`, [String(ev.payload)]);
          await tx.query("select 10 / $1::int", [String(ev.payload)]); // division by zero for 0
        },
      });
      assert.deepEqual([r.events, r.retried], [3, 1]);
      const side = await f.raw(`select n from "${f.schema}".side order by n`);
      assert.deepEqual(side.map((x) => x.n), [1, 2], "the failed event's insert rolled back, the others committed");
      const [retry] = await f.raw(`select last_error->>'code' as code from "${f.schema}".retry`);
      assert.equal(retry!.code, "22012", "division_by_zero is recorded");
    },
  },
  {
    name: "a retry in a fan-out queue reaches only the consumer that failed it",
    async run(f) {
      await f.q.createQueue("files", { retryBase: 20, retryCap: 50 });
      const a = f.q.consumer("files", "a");
      const b = f.q.consumer("files", "b");
      await a.subscribe();
      await b.subscribe();
      await f.q.send("files", { type: "E", payload: 1 });
      await f.q.tick("files");
      const seenA: number[] = [];
      const seenB: number[] = [];
      await a.batch({
        handler: (ev) => {
          seenA.push(ev.retry);
          if (ev.retry === 0) throw new Error("a fails once");
        },
      });
      await b.batch({ handler: (ev) => void seenB.push(ev.retry) });
      await pump(a, (ev) => void seenA.push(ev.retry), () => seenA.length === 2);
      await sleep(100);
      await b.batch({ handler: (ev) => void seenB.push(ev.retry) });
      assert.deepEqual(seenA, [0, 1]);
      assert.deepEqual(seenB, [0], "b never sees a's retry");
    },
  },
  {
    name: "replayKey: five dead letters of one key come back in original order, to their consumer only",
    async run(f) {
      await f.q.createQueue("files", { maxRetries: 0 });
      const c = f.q.consumer<number>("files", "indexer");
      const other = f.q.consumer<number>("files", "audit");
      await c.subscribe();
      await other.subscribe();
      const events = Array.from({ length: 12 }, (_, i) => ({ type: "E", payload: i, key: i % 2 === 0 ? "K" : `other-${i}` }));
      await f.q.sendBatch("files", events);
      await f.q.tick("files");
      let failing = true;
      const got: string[] = [];
      const handler = (ev: KeyqEvent<number>) => {
        if (failing && ev.key === "K" && ev.payload < 10) throw new Error(`K ${ev.payload}`);
        got.push(`${ev.key}:${ev.payload}:${ev.retry}`);
      };
      const r = await c.batch({ handler });
      assert.equal(r.deadLettered, 5);
      assert.equal(await f.q.dlq.count({ consumer: "indexer", key: "K" }), 5);
      await other.batch({ handler: () => {} });
      failing = false;
      got.length = 0;
      assert.equal(await f.q.dlq.replayKey("files", "indexer", "K"), 5);
      assert.equal(await f.q.dlq.count(), 0);
      await c.batch({ handler });
      assert.deepEqual(got, ["K:0:0", "K:2:0", "K:4:0", "K:6:0", "K:8:0"]);
      const otherGot: number[] = [];
      await other.batch({ handler: (ev) => void otherGot.push(ev.payload) });
      assert.deepEqual(otherGot, [], "the other consumer of the fan-out queue gets no replay");
    },
  },
  {
    name: "dlq: list filters, replay by id, replayAll, purge by age",
    async run(f) {
      await f.q.createQueue("files", { maxRetries: 0 });
      const c = f.q.consumer("files", "indexer");
      await c.subscribe();
      await f.q.sendBatch("files", ["a", "b", "c"].map((key) => ({ type: "E", payload: key, key })));
      await f.q.tick("files");
      await c.batch({
        handler: () => {
          throw new Error("nope");
        },
      });
      const all = await f.q.dlq.list();
      assert.deepEqual(all.map((d) => d.key), ["a", "b", "c"]);
      assert.deepEqual((await f.q.dlq.list({ key: "b" })).map((d) => d.payload), ["b"]);
      assert.equal((await f.q.dlq.list({ limit: 2 })).length, 2);
      assert.deepEqual((await f.q.dlq.list({ afterId: all[0]!.id })).map((d) => d.key), ["b", "c"]);
      assert.equal(await f.q.dlq.count({ olderThan: "1h" }), 0);
      assert.equal(await f.q.dlq.count({ newerThan: "1h" }), 3);
      assert.equal(await f.q.dlq.replay(all[0]!.id), 1);
      const got: string[] = [];
      await c.batch({ handler: (ev) => void got.push(ev.key!) });
      assert.deepEqual(got, ["a"]);
      assert.equal(await f.q.dlq.purge({ olderThan: "1h" }), 0);
      assert.equal(await f.q.dlq.replayAll("files", "indexer"), 2);
      await c.batch({
        handler: () => {
          throw new Error("again");
        },
      });
      assert.equal(await f.q.dlq.purge({ olderThan: 0 }), 2);
      assert.equal(await f.q.dlq.count(), 0);
    },
  },
  {
    name: "dedup: a live key returns the original id and appends nothing; after the ttl it appends again",
    async run(f) {
      await f.q.createQueue("jobs");
      // The live-key checks use an hour's ttl: with 300 ms, a loaded CI run
      // once took longer than that between the two sends, so the key had
      // expired and the second send appended (as it should). Expiry has its
      // own key below, where delay can only make the key more expired.
      const first = await f.q.send("jobs", { type: "Migrate", payload: 1, key: "t1", dedupKey: "migrate:t1:v7", ttl: "1h" });
      const dup = await f.q.send("jobs", { type: "Migrate", payload: 2, key: "t1", dedupKey: "migrate:t1:v7", ttl: "1h" });
      assert.deepEqual(first, { id: first.id, deduped: false });
      assert.deepEqual(dup, { id: first.id, deduped: true });
      const batch = await f.q.sendBatch("jobs", [
        { type: "Migrate", payload: 3, dedupKey: "migrate:t1:v7" },
        { type: "Migrate", payload: 4, dedupKey: "migrate:t2:v7", ttl: "1h" },
        { type: "Migrate", payload: 5, dedupKey: "migrate:t2:v7" },
        { type: "Plain", payload: 6 },
      ]);
      assert.deepEqual(batch.map((b) => b.deduped), [true, false, true, false]);
      assert.equal(batch[0]!.id, first.id);
      assert.equal(batch[2]!.id, batch[1]!.id);
      assert.equal(await count(f, "event"), 3);
      const short = await f.q.send("jobs", { type: "Migrate", payload: 7, dedupKey: "migrate:t3:v7", ttl: 300 });
      assert.equal(short.deduped, false);
      await sleep(350);
      const again = await f.q.send("jobs", { type: "Migrate", payload: 8, dedupKey: "migrate:t3:v7", ttl: 100 });
      assert.equal(again.deduped, false, "after its ttl the key appends again");
      assert.notEqual(again.id, short.id);
      assert.equal(await count(f, "event"), 5);
      await sleep(150);
      const [m] = await f.q.maintain("jobs");
      assert.equal(m!.dedupExpired, 1, "the expired key is collected");
      const left = await f.raw(`select dedup_key from "${f.schema}".dedup order by dedup_key`);
      assert.deepEqual(left.map((r) => r.dedup_key), ["migrate:t1:v7", "migrate:t2:v7"], "the live keys stay");
    },
  },
  {
    name: "bad input for retries, dedup and dead letters: typed errors, nothing written",
    async run(f) {
      await f.q.createQueue("jobs");
      for (const ttl of [-1, 0, "0s", "-5s", "later"]) {
        await rejects(f.q.send("jobs", { type: "E", payload: 1, dedupKey: "k", ttl }), "INVALID_INPUT");
      }
      await rejects(f.q.send("jobs", { type: "E", payload: 1, dedupKey: "" }), "INVALID_INPUT");
      await rejects(f.q.send("jobs", { type: "E", payload: 1, ttl: "1h" }), "INVALID_INPUT");
      await rejects(f.q.sendBatch("jobs", [{ type: "E", payload: 1 }, { type: "E", payload: 1, dedupKey: "" }]), "INVALID_INPUT");
      await rejects(f.q.createQueue("other", { maxRetries: -1 }), "INVALID_INPUT");
      await rejects(f.q.updateQueue("jobs", { maxRetries: -1 }), "INVALID_INPUT");
      await rejects(f.q.updateQueue("jobs", { retryBase: 0 }), "INVALID_INPUT");
      assert.throws(() => f.q.consumer("jobs", "c", { maxRetries: -1 }), (e: unknown) => (e as { code?: string }).code === "INVALID_INPUT");
      await rejects(f.q.dlq.replay("999999"), "DEAD_LETTER_NOT_FOUND");
      await rejects(f.q.dlq.replay("abc"), "INVALID_INPUT");
      await rejects(f.q.dlq.purge({} as never), "INVALID_INPUT");
      assert.equal(await count(f, "event"), 0);
      assert.equal(await count(f, "dedup"), 0);
      assert.equal(await count(f, "consumer"), 0);
      assert.equal((await f.q.listQueues())[0]!.maxRetries, 5);
    },
  },
  {
    name: "replaying a set with one unknown id changes nothing",
    async run(f) {
      await f.q.createQueue("jobs", { maxRetries: 0 });
      const c = f.q.consumer("jobs", "w");
      await c.subscribe();
      await f.q.send("jobs", { type: "E", payload: 1 });
      await f.q.tick("jobs");
      await c.batch({
        handler: () => {
          throw new Error("x");
        },
      });
      const [dead] = await f.q.dlq.list();
      await rejects(f.q.dlq.replay([dead!.id, "987654"]), "DEAD_LETTER_NOT_FOUND");
      assert.equal(await f.q.dlq.count(), 1);
      assert.equal(await count(f, "retry"), 0);
    },
  },
];
