// Tier A at scale: work cut by key (no deferral when no key is held across
// windows) and handlers without per-event savepoints on the happy path.
// Both assert counts, never times.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyq } from "../mod.ts";
import type { Executor, TxDriver } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { connect, dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { sleep, worker } from "./helpers/sync.ts";

const skip = await dbSkip();

/** Wraps a driver: records every statement a batch transaction sends and every driver savepoint it opens. */
function counting(driver: TxDriver): { driver: TxDriver; log: string[][] } {
  const log: string[][] = [];
  const wrap = (tx: Executor, mine: string[]): Executor => ({
    ...tx,
    query: (text, params) => (mine.push(text.trim().split(/\s+/)[0]!.toLowerCase()), tx.query(text, params)),
    savepoint: tx.savepoint ? (fn) => (mine.push("savepoint"), tx.savepoint!((sp) => fn(wrap(sp, mine)))) : undefined,
  });
  return {
    log,
    driver: {
      ...driver,
      transaction: (fn) => {
        const mine: string[] = [];
        log.push(mine);
        return driver.transaction((tx) => fn(wrap(tx, mine)));
      },
    },
  };
}

describe("Tier A at scale", () => {
  test("4 workers, one window, 200 keys: no key lies in two chunks, so nothing is deferred or dropped", { skip }, () =>
    withPg({ max: 2 }, async (f, defer) => {
      const workers = Array.from({ length: 4 }, (_, i) => defer.use(worker(f.url, f.schema, i, "kq-tierafast"), (w) => w.sql.end()));
      await f.q.createQueue("jobs");
      await f.raw(`create table "${f.schema}".sink (id bigint primary key)`);
      await f.q.exclusive("jobs", "m").subscribe();
      const N = 2000;
      // Uniform keys in a fixed pseudo-random order: cut by position, concurrent chunks would share keys.
      let x = 42;
      const next = () => (x = (x * 1103515245 + 12345) % 2 ** 31);
      await f.q.sendBatch("jobs", Array.from({ length: N }, (_, i) => ({ type: "E", payload: i, key: `k${next() % 200}` })));
      await f.q.tick("jobs");
      let deferred = 0;
      let dropped = 0;
      const perWorker = [0, 0, 0, 0];
      await Promise.all(workers.map(async ({ q }, w) => {
        const c = q.exclusive("jobs", "m", { idempotent: w % 2 === 0 }); // drop or defer: both count contention
        for (let idle = 0; idle < 20;) {
          const r = await c.run({
            maxEvents: 25,
            maxBatches: 1,
            handler: async (ev, tx) => {
              await tx.query(`insert into "${f.schema}".sink values ($1::bigint)`, [ev.id]);
              await sleep(1);
            },
          });
          deferred += r.deferred;
          dropped += r.dropped;
          perWorker[w]! += r.events;
          if (r.events === 0) {
            idle++;
            await sleep(10);
          } else idle = 0;
        }
      }));
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".sink`);
      console.log(`key-affine: per worker ${perWorker.join(", ")}; deferred ${deferred}, dropped ${dropped}`);
      assert.equal(row!.n, N, "every event handled once");
      assert.equal(deferred + dropped, 0, "no contention inside one window");
      assert.ok(perWorker.filter((n) => n > 0).length >= 2, `work spread over workers: ${perWorker.join(", ")}`);
    }));

  test(
    "each event in its own savepoint, opened with its first statement; a failure rolls back that event only, with no rerun",
    { skip },
    () =>
      withPg({ max: 2 }, async (f, defer) => {
        const sql = defer.use(connect(f.url), (s) => s.end());
        const { driver, log } = counting(fromPostgresJs(sql));
        const q = keyq(driver, { schema: f.schema });
        await q.createQueue("jobs");
        await f.raw(`create table "${f.schema}".sink (n int)`);
        await q.exclusive("jobs", "m").subscribe();
        await q.sendBatch("jobs", Array.from({ length: 20 }, (_, i) => ({ type: "E", payload: i, key: `k${i}` })));
        const c = q.exclusive<number>("jobs", "m");
        const calls = new Map<number, number>();
        const handler = async (ev: { payload: number }, tx: Executor) => {
          calls.set(ev.payload, (calls.get(ev.payload) ?? 0) + 1);
          await tx.query(`insert into "${f.schema}".sink values ($1::int)`, [String(ev.payload)]);
          if (ev.payload === 25) throw new Error("fails once it wrote");
        };
        const r = await c.run({ maxEvents: 100, maxBatches: 1, handler });
        assert.equal(r.events, 20);
        const batch = log.at(-1)!;
        // SAVEPOINT, or RELEASE of the previous event's with the next SAVEPOINT in one text.
        assert.equal(batch.filter((s) => s === "savepoint" || s === "release").length, 20, batch.join(" "));
        assert.equal(batch.filter((s) => s === "rollback").length, 0, batch.join(" "));
        assert.equal(batch.length, 41, `receive + 20 × (savepoint + insert): ${batch.join(" ")}`);

        await q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: 20 + i, key: `k${i}` })));
        const before = log.length;
        const r2 = await c.run({ maxEvents: 100, maxBatches: 1, handler });
        assert.equal(r2.events, 10);
        assert.equal(r2.retried, 1, "the failing event goes to retry");
        assert.equal(log.length - before, 1, "one attempt: no rerun");
        assert.deepEqual([...calls.values()].filter((n) => n !== 1), [], "every handler called once");
        const rows = await f.raw(`select n from "${f.schema}".sink where n >= 20 order by n`);
        assert.deepEqual(rows.map((x) => x.n), [20, 21, 22, 23, 24, 26, 27, 28, 29], "the failed event's write rolled back, the others committed once");
      }),
  );
});
