/**
 * Neon HTTP (`fromNeonHttp(neon(url))`) cases for the conformance suite. The
 * HTTP driver has no interactive transactions: it can produce and inspect, and
 * every consuming call must be refused with `TRANSACTIONS_UNSUPPORTED`. The
 * fixture's schema is migrated through a pg Pool first (migrations need a
 * transaction); `pool(f)` is a second client over a pg Pool that consumes
 * what the HTTP client produced.
 */
import assert from "node:assert/strict";
import pg from "pg";
import { type Keyq, keyq, KeyqError } from "../../mod.ts";
import { fromPg } from "../../src/drivers/pg.ts";
import { type Case, rejects } from "./basic.ts";
import type { Fixture } from "../helpers/keyq.ts";

/** A pg Pool client on the fixture's schema, for consuming; closed by `done()`. */
async function withPool(f: Fixture & { url?: string }, fn: (q: Keyq) => Promise<void>): Promise<void> {
  const pool = new pg.Pool({ connectionString: f.url, max: 2 });
  try {
    await fn(keyq(fromPg(pool), { schema: f.schema }));
  } finally {
    await pool.end();
  }
}

async function refused(p: Promise<unknown>): Promise<void> {
  const err = await rejects(p, "TRANSACTIONS_UNSUPPORTED");
  assert.ok(err instanceof KeyqError);
  assert.match(err.message, /fromNeonPool/, "the message says what to use instead");
}

export const httpCases: Case[] = [
  {
    name: "HTTP: migrate is refused (it needs a transaction); createQueue, updateQueue, listQueues and dropQueue work",
    async run(f) {
      await rejects(f.q.migrate(), "TRANSACTIONS_UNSUPPORTED");
      const a = await f.q.createQueue("files", { maxRetries: 3 });
      assert.equal(a.created, true);
      assert.equal((await f.q.createQueue("files")).created, false);
      assert.equal((await f.q.updateQueue("files", { maxRetries: 4 })).maxRetries, 4);
      await f.q.createQueue("other");
      assert.deepEqual((await f.q.listQueues()).map((q) => q.name).sort(), ["files", "other"]);
      assert.equal(await f.q.dropQueue("other"), true);
      assert.deepEqual((await f.q.listQueues()).map((q) => q.name), ["files"]);
    },
  },
  {
    name: "HTTP: send and sendBatch with keys; a Pool consumer receives them in send order",
    async run(f) {
      await f.q.createQueue("files");
      await withPool(f, async (pool) => {
        await pool.consumer("files", "audit").subscribe();
        const one = await f.q.send("files", { type: "FileCreated", payload: { path: "/a" }, key: "t1" });
        const many = await f.q.sendBatch<unknown>("files", [
          { type: "FileCreated", payload: { path: "/b" }, key: "t2" },
          { type: "FileDeleted", payload: { path: "/a" }, key: "t1" },
          { type: "Note", payload: "plain" },
        ]);
        assert.equal(one.deduped, false);
        assert.equal(many.length, 3);
        const seen: string[] = [];
        await pool.consumer("files", "audit").run({
          handler: (ev) => void seen.push(`${ev.id}:${ev.type}:${ev.key}:${JSON.stringify(ev.payload)}`),
        });
        assert.deepEqual(seen, [
          `${one.id}:FileCreated:t1:{"path":"/a"}`,
          `${many[0]!.id}:FileCreated:t2:{"path":"/b"}`,
          `${many[1]!.id}:FileDeleted:t1:{"path":"/a"}`,
          `${many[2]!.id}:Note:null:"plain"`,
        ]);
      });
    },
  },
  {
    name: "HTTP: dedup — a live key returns the original id; concurrent HTTP sends of one key insert once",
    async run(f) {
      await f.q.createQueue("jobs");
      const first = await f.q.send("jobs", { type: "Migrate", payload: 1, dedupKey: "migrate:t1:v7", ttl: "1h" });
      const dup = await f.q.send("jobs", { type: "Migrate", payload: 2, dedupKey: "migrate:t1:v7", ttl: "1h" });
      assert.deepEqual(dup, { id: first.id, deduped: true });
      const batch = await f.q.sendBatch("jobs", [
        { type: "Migrate", payload: 3, dedupKey: "migrate:t1:v7" },
        { type: "Migrate", payload: 4, dedupKey: "migrate:t2:v7", ttl: "1h" },
      ]);
      assert.deepEqual(batch.map((b) => b.deduped), [true, false]);
      const race = await Promise.all(
        Array.from({ length: 8 }, (_, i) => f.q.send("jobs", { type: "Migrate", payload: i, dedupKey: "migrate:t3:v7", ttl: "1h" })),
      );
      assert.equal(new Set(race.map((r) => r.id)).size, 1, "one id for every racing send");
      assert.equal(race.filter((r) => !r.deduped).length, 1, "exactly one insert");
      const [n] = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(n!.n, 3);
    },
  },
  {
    name: "HTTP: tick and maintain (rotation, dedup GC) run over single statements",
    async run(f) {
      await f.q.createQueue("files");
      assert.equal(await f.q.tick("files"), null, "nothing new, no tick");
      await f.q.send("files", { type: "A", payload: 1, dedupKey: "d", ttl: 1 });
      const t = await f.q.tick("files");
      assert.ok(t, "a tick after an event");
      assert.ok(await f.q.tick("files", { force: true }), "forced");
      await new Promise((r) => setTimeout(r, 20));
      const [m] = await f.q.maintain("files", { forceRotate: true });
      assert.equal(m!.queue, "files");
      assert.equal(m!.skipped, false);
      assert.equal(m!.rotation?.rotated, true, JSON.stringify(m));
      assert.equal(m!.dedupExpired, 1, "the expired dedup key is collected");
      assert.equal((await f.q.maintain()).length, 1);
    },
  },
  {
    name: "HTTP: dlq.count and dlq.list read what a Pool consumer dead-lettered",
    async run(f) {
      await f.q.createQueue("jobs", { maxRetries: 0 });
      await withPool(f, async (pool) => {
        const c = pool.consumer("jobs", "w");
        await c.subscribe();
        await f.q.sendBatch("jobs", [{ type: "Poison", payload: 1, key: "k" }, { type: "Fine", payload: 2 }]);
        const r = await c.run({
          handler: (ev) => {
            if (ev.type === "Poison") throw new Error("poison");
          },
        });
        assert.equal(r.deadLettered, 1);
      });
      assert.equal(await f.q.dlq.count(), 1);
      assert.equal(await f.q.dlq.count({ queue: "jobs", consumer: "w", key: "k" }), 1);
      const [dead] = await f.q.dlq.list();
      assert.equal(dead!.type, "Poison");
      assert.equal(dead!.consumer, "w");
      assert.equal((dead!.error as { message?: string }).message, "poison");
    },
  },
  {
    name: "HTTP: consuming is refused (batch, run, exclusive run) with TRANSACTIONS_UNSUPPORTED naming fromNeonPool; nothing is lost",
    async run(f) {
      await f.q.createQueue("jobs");
      await f.q.consumer("jobs", "audit").subscribe();
      await f.q.exclusive("jobs", "migrator").subscribe();
      await f.q.sendBatch("jobs", [{ type: "A", payload: 1, key: "k" }, { type: "B", payload: 2, key: "k" }]);
      let ran = 0;
      const handler = () => void ran++;
      await refused(f.q.consumer("jobs", "audit").batch({ handler }));
      await refused(f.q.consumer("jobs", "audit").run({ handler }));
      await refused(f.q.exclusive("jobs", "migrator").run({ handler }));
      await refused(f.q.exclusive("jobs", "migrator").batch({ handleBatch: handler }));
      assert.equal(ran, 0, "no handler ran");
      await withPool(f, async (pool) => {
        const seen: string[] = [];
        await pool.consumer("jobs", "audit").run({ handler: (ev) => void seen.push(`audit:${ev.type}`) });
        await pool.exclusive("jobs", "migrator").run({ handler: (ev) => void seen.push(`migrator:${ev.type}`) });
        assert.deepEqual(seen, ["audit:A", "audit:B", "migrator:A", "migrator:B"], "a Pool consumer still gets every event");
      });
    },
  },
];
