// Engine guarantees that need several real connections.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyq, latestVersion, migrationSql } from "../mod.ts";
import type { Executor } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { connect, dbSkip } from "./helpers/db.ts";
import { drain } from "./helpers/keyq.ts";
import { withPg, withSchema } from "./helpers/fixture.ts";
import { gate } from "./helpers/sync.ts";

const skip = await dbSkip();

describe("engine under concurrency", () => {
  test("out-of-order commits: a late commit lands in a later window, once", { skip }, async () => {
    await withPg({ max: 3 }, async (f) => {
      await f.q.createQueue("files");
      await f.q.consumer("files", "audit").subscribe();
      const hold = gate();
      const sentA = gate();
      let idA = "";
      const a = f.q.transaction(async (tx: Executor) => {
        idA = (await f.q.send("files", { type: "E", payload: "first, commits late" }, { tx })).id;
        sentA.open();
        await hold.wait;
      });
      await sentA.wait;
      const idB = (await f.q.send("files", { type: "E", payload: "second, commits first" })).id;
      assert.ok(BigInt(idA) < BigInt(idB), "A's event has the lower id");
      const first = await drain(f.q, "files", "audit");
      assert.deepEqual(first.map((e) => e.id), [idB], "only the committed event is delivered");
      hold.open();
      await a;
      const second = await drain(f.q, "files", "audit");
      assert.deepEqual(second.map((e) => e.id), [idA], "the late commit arrives in the next window");
      assert.deepEqual(await drain(f.q, "files", "audit"), []);
    });
  });

  test("out-of-order commits, Tier B: a late commit of the slot (a straggler of its window) lands in the next window, once", { skip }, async () => {
    await withPg({ max: 3 }, async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered<string>("files", "audit", { slots: 2 });
      await c.subscribe();
      const read = async () => {
        const seen: string[] = [];
        await c.run({ worker: 0, workers: 1, budgetMs: 60_000, handler: (ev) => void seen.push(`${ev.key}:${ev.payload}`) });
        return seen;
      };
      const hold = gate();
      const sentA = gate();
      const a = f.q.transaction(async (tx: Executor) => {
        await f.q.send("files", { type: "E", payload: "a1", key: "k" }, { tx });
        await f.q.send("files", { type: "E", payload: "a2", key: "j" }, { tx });
        sentA.open();
        await hold.wait;
      });
      await sentA.wait;
      await f.q.sendBatch("files", [{ type: "E", payload: "b1", key: "k" }, { type: "E", payload: "b2", key: "j" }]);
      assert.deepEqual((await read()).sort(), ["j:b2", "k:b1"], "only the committed events are delivered");
      hold.open();
      await a;
      await f.q.sendBatch("files", [{ type: "E", payload: "c1", key: "k" }]);
      // A was in progress when the first window closed: its events are the next window's stragglers, read before C's.
      const second = await read();
      assert.deepEqual(second.filter((e) => e.startsWith("k:")), ["k:a1", "k:c1"], "per key: the late commit first, then the newer event");
      assert.deepEqual(second.filter((e) => e.startsWith("j:")), ["j:a2"]);
      assert.deepEqual(await read(), []);
    });
  });

  test("many concurrent tickers, producers and a consumer: no event missing or duplicated", { skip }, async () => {
    await withPg({ max: 10 }, async (f) => {
      await f.q.createQueue("files");
      const c = f.q.consumer<number>("files", "audit");
      await c.subscribe();
      const committed = new Set<string>();
      const delivered: string[] = [];
      let producing = true;
      let n = 0;
      const producer = async (w: number) => {
        for (let i = 0; i < 40; i++) {
          const roll = (w * 31 + i * 17) % 4;
          if (roll === 0) committed.add((await f.q.send("files", { type: "E", payload: n++, key: `k${i % 5}` })).id);
          else if (roll === 1) {
            const ids = await f.q.sendBatch("files", [1, 2, 3].map(() => ({ type: "E", payload: n++ })));
            for (const r of ids) committed.add(r.id);
          } else if (roll === 2) {
            const ids: string[] = [];
            await f.q.transaction(async (tx) => {
              ids.push((await f.q.send("files", { type: "E", payload: n++ }, { tx })).id);
              await new Promise((r) => setTimeout(r, (i % 3) * 3));
              ids.push((await f.q.send("files", { type: "E", payload: n++ }, { tx })).id);
            });
            for (const id of ids) committed.add(id);
          } else {
            await assert.rejects(f.q.transaction(async (tx) => {
              await f.q.send("files", { type: "Rolled back", payload: n++ }, { tx });
              throw new Error("rollback");
            }));
          }
        }
      };
      const ticker = async () => {
        while (producing) await f.q.tick("files", { force: Math.random() < 0.3 });
      };
      const consumer = async () => {
        while (producing) {
          await c.batch({ maxEvents: 7, handler: (ev) => void delivered.push(ev.id) });
        }
      };
      const tickers = [ticker(), ticker(), ticker(), ticker()];
      const reader = consumer();
      await Promise.all([producer(0), producer(1), producer(2), producer(3)]);
      producing = false;
      await Promise.all([...tickers, reader]);
      await f.q.tick("files", { force: true });
      await c.run({ maxEvents: 50, budgetMs: 60_000, handler: (ev) => void delivered.push(ev.id) });
      assert.equal(new Set(delivered).size, delivered.length, "no event delivered twice");
      assert.deepEqual([...delivered].sort(), [...committed].sort(), "exactly the committed events");
      const ticks = await f.raw(`select count(*)::int as n from "${f.schema}".tick`);
      assert.ok(Number(ticks[0]!.n) >= 1);
    });
  });

  test("migrate from two connections at once applies once and leaves one row per version", { skip }, async () => {
    await withSchema(async ({ url, schema }, defer) => {
      const a = defer.use(connect(url), (s) => s.end());
      const b = defer.use(connect(url), (s) => s.end());
      const [ra, rb] = await Promise.all([
        keyq(fromPostgresJs(a), { schema }).migrate(),
        keyq(fromPostgresJs(b), { schema }).migrate(),
      ]);
      const applied = [ra.applied, rb.applied].sort((x, y) => y.length - x.length);
      assert.equal(applied[0]!.length, latestVersion);
      assert.deepEqual(applied[1], []);
      const rows = await a.unsafe(`select version from "${schema}".migration order by version`);
      assert.deepEqual(rows.map((r) => r.version), Array.from({ length: latestVersion }, (_, i) => i + 1));
    });
  });

  test("migrationSql() is the same engine: applied by hand, migrate() then finds nothing to do", { skip }, async () => {
    await withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url), (s) => s.end());
      await sql.unsafe(migrationSql(schema)).simple();
      const q = keyq(fromPostgresJs(sql), { schema });
      assert.deepEqual((await q.migrate()).applied, []);
      await q.createQueue("files");
      assert.equal((await q.send("files", { type: "E", payload: 1 })).id, "1");
    });
  });

  test("calls against an unmigrated schema say to migrate", { skip }, async () => {
    await withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url), (s) => s.end());
      const q = keyq(fromPostgresJs(sql), { schema });
      await assert.rejects(q.send("files", { type: "E", payload: 1 }), (e: unknown) => (e as { code?: string }).code === "NOT_MIGRATED");
    });
  });
});

describe("producer dedup under concurrency", () => {
  test("50 concurrent sends of one dedupKey from 10 connections append exactly one event", { skip }, async () => {
    await withPg({ max: 10 }, async (f) => {
      await f.q.createQueue("jobs");
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => f.q.send("jobs", { type: "Migrate", payload: { attempt: i }, key: "t1", dedupKey: "migrate:t1:v7", ttl: "1h" })),
      );
      const connections = await f.raw(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'postgres.js'`,
      );
      assert.ok(Number(connections[0]!.n) >= 8, `used ${connections[0]!.n} connections`);
      assert.equal(new Set(results.map((r) => r.id)).size, 1, "every caller gets the same id");
      assert.equal(results.filter((r) => !r.deduped).length, 1, "exactly one caller appended");
      const events = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(events[0]!.n, 1);
    });
  });
});
