// Tier A: mutual exclusion per key, shown with several real connections.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyq } from "../mod.ts";
import pg from "pg";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { gate, sleep, terminate, worker } from "./helpers/sync.ts";

const skip = await dbSkip();

describe("Tier A: exclusive consumer", () => {
  test("G2: 8 workers on 8 connections, 200 keys, 5,000 events — no two intervals of a key overlap", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const workers = Array.from({ length: 8 }, (_, i) => worker(f.url, f.schema, i));
      defer(() => Promise.all(workers.map((w) => w.sql.end())));
      await f.q.createQueue("jobs");
      await f.raw(`create table "${f.schema}".log (ev_id bigint, key text, worker int, started timestamptz, ended timestamptz)`);
      await f.q.exclusive("jobs", "migrator").subscribe();
      const N = 5000;
      for (let i = 0; i < N; i += 1000) {
        await f.q.sendBatch("jobs", Array.from({ length: 1000 }, (_, j) => ({ type: "Migrate", payload: i + j, key: `tenant-${(i + j) % 200}` })));
      }
      let deferred = 0;
      let busyWorkers = 0;
      await Promise.all(workers.map(async ({ q }, w) => {
        const c = q.exclusive<number>("jobs", "migrator", { deferDelay: 20 });
        let mine = 0;
        for (let idle = 0; idle < 30;) {
          const r = await c.run({
            maxEvents: 25,
            budgetMs: 60_000,
            handler: async (ev, tx) => {
              const [t] = await tx.query("select clock_timestamp()::text as t");
              await sleep(1 + (Number(ev.id) % 3));
              await tx.query(
                `insert into "${f.schema}".log values ($1::bigint, $2, $3::int, $4::timestamptz, clock_timestamp())`,
                [ev.id, ev.key, String(w), String(t!.t)],
              );
            },
          });
          deferred += r.deferred;
          mine += r.events;
          const done = Number((await f.raw(`select count(*)::int as n from "${f.schema}".log`))[0]!.n);
          if (done >= N) break;
          if (r.events === 0) {
            idle++;
            await sleep(20);
          } else idle = 0;
        }
        if (mine > 0) busyWorkers++;
      }));
      const [stats] = await f.raw(`select count(*)::int as rows, count(distinct ev_id)::int as events from "${f.schema}".log`);
      const [overlaps] = await f.raw(
        `select count(*)::int as n from "${f.schema}".log a join "${f.schema}".log b
           on a.key = b.key and a.ev_id < b.ev_id and a.started < b.ended and b.started < a.ended`,
      );
      console.log(
        `G2: events=${N} workers=8 handled=${stats!.events} rows=${stats!.rows} deferred=${deferred} busyWorkers=${busyWorkers} overlaps=${overlaps!.n}`,
      );
      assert.equal(stats!.events, N, "every event handled");
      assert.equal(stats!.rows, N, "each exactly once");
      assert.equal(overlaps!.n, 0, "no two intervals of the same key overlap");
      assert.ok(busyWorkers >= 6, `work spread over the workers (${busyWorkers} of 8 handled events)`);
    });
  });

  test("one big window feeds every worker (chunks), and batches take at most 4 round trips", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const workers = Array.from({ length: 4 }, (_, i) => worker(f.url, f.schema, i));
      defer(() => Promise.all(workers.map((w) => w.sql.end())));
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "m").subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 2000 }, (_, i) => ({ type: "E", payload: i, key: `k${i}` })));
      await f.q.tick("jobs");
      // The consumer starts at a tick of its own (subscribe takes one): one tick after it.
      const ticks = await f.raw(`select count(*)::int as n from "${f.schema}".tick where tick_id > (select min(tick_id) from "${f.schema}".cursor)`);
      assert.equal(ticks[0]!.n, 1, "one window (after the start tick) holds all events");
      const perWorker: number[] = [];
      const trips: number[] = [];
      await Promise.all(workers.map(async ({ q }, w) => {
        perWorker[w] = 0;
        const c = q.exclusive("jobs", "m", { idempotent: true });
        perWorker[w] += (await c.run({ maxEvents: 50, maxBatches: 1, handler: () => {} })).events;
        while (perWorker.reduce((a, b) => a + b, 0) < 2000 - 4 * 50) {
          const b = await c.batch({ maxEvents: 50, handler: async () => void (await sleep(1)) });
          perWorker[w] += b.events;
          trips.push(b.roundTrips);
          if (b.events === 0) await sleep(5);
        }
      }));
      console.log(`one window of 2000: per worker ${perWorker.join(", ")}; round trips per batch max ${Math.max(...trips)}`);
      for (const n of perWorker) assert.ok(n >= 200, `every worker stayed busy: ${perWorker.join(", ")}`);
      assert.ok(Math.max(...trips) <= 4, `round trips per batch: ${[...new Set(trips)].join(", ")}`);
    });
  });

  test("non-blocking: while one worker is stuck inside a batch, others consume everything outside it", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const [a, b] = [worker(f.url, f.schema, 0), worker(f.url, f.schema, 1)];
      defer(async () => {
        await a.sql.end();
        await b.sql.end();
      });
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "m").subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 300 }, (_, i) => ({ type: "E", payload: i, key: `k${i}` })));
      const stuck = gate();
      const inside = gate();
      const aRun = a.q.exclusive("jobs", "m").run({
        maxEvents: 40,
        maxBatches: 1,
        handler: async () => {
          inside.open();
          await stuck.wait;
        },
      });
      await inside.wait;
      // A batch holds only what it reads: every event outside A's batch flows.
      const r = await b.q.exclusive("jobs", "m").run({ maxEvents: 20, budgetMs: 30_000, handler: () => {} });
      stuck.open();
      const ra = await aRun;
      assert.ok(ra.events > 0 && ra.events <= 40, `A's batch: ${ra.events} events`);
      assert.equal(r.events, 300 - ra.events, `the other worker consumed every event outside A's batch while A was stuck (${r.events})`);
    });
  });

  for (const idempotent of [true, false]) {
    test(
      `contended key with idempotent: ${idempotent} → ${idempotent ? "acked and dropped" : "deferred, then handled once, no retry spent"}`,
      { skip },
      async () => {
        await withPg({ max: 2 }, async (f, defer) => {
          const [a, b] = [worker(f.url, f.schema, 0), worker(f.url, f.schema, 1)];
          defer(async () => {
            await a.sql.end();
            await b.sql.end();
          });
          await f.q.createQueue("jobs");
          await f.q.exclusive("jobs", "m").subscribe();
          // Contention comes only from a key held across windows (one key lies in one chunk
          // per window): Second arrives in the window after the one A holds First from.
          await f.q.send("jobs", { type: "First", payload: 1, key: "K" });
          const handled: string[] = [];
          const stuck = gate();
          const inside = gate();
          const opts = { idempotent, deferDelay: 50 };
          const aRun = a.q.exclusive("jobs", "m", opts).run({
            maxEvents: 1,
            maxBatches: 1,
            handler: async (ev) => {
              inside.open();
              await stuck.wait;
              handled.push(`${ev.type}:${ev.retry}`);
            },
          });
          await inside.wait;
          await f.q.send("jobs", { type: "Second", payload: 2, key: "K" });
          const rb = await b.q.exclusive("jobs", "m", opts).run({
            maxEvents: 1,
            budgetMs: 5_000,
            handler: (ev) => void handled.push(`${ev.type}:${ev.retry}`),
          });
          assert.equal(handled.length, 0, "B never ran the contended event while A held K");
          if (idempotent) assert.equal(rb.dropped, 1);
          else assert.ok(rb.deferred >= 1, `deferred ${rb.deferred}`);
          stuck.open();
          await aRun;
          await sleep(80);
          const later = await b.q.exclusive("jobs", "m", opts).run({
            maxEvents: 10,
            handler: (ev) => void handled.push(`${ev.type}:${ev.retry}`),
          });
          if (idempotent) {
            assert.deepEqual(handled, ["First:0"], "the dropped event is not delivered again");
            assert.equal(later.events, 0);
          } else {
            assert.deepEqual(handled, ["First:0", "Second:0"], "deferred, then handled once with retry count 0");
          }
          const dead = await f.q.dlq.count();
          assert.equal(dead, 0);
        });
      },
    );
  }

  test("crash: a killed backend's batch rolls back; its chunk and keys are free at once; nothing lost", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const [a, b] = [worker(f.url, f.schema, 0), worker(f.url, f.schema, 1)];
      defer(async () => {
        await a.sql.end().catch(() => {});
        await b.sql.end();
      });
      await f.q.createQueue("jobs");
      await f.raw(`create table "${f.schema}".side (ev_id bigint primary key)`);
      await f.q.exclusive("jobs", "m").subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: "same-key" })));
      const inside = gate();
      let pid = "";
      const aRun = a.q.exclusive("jobs", "m").run({
        maxEvents: 5,
        handler: async (ev, tx) => {
          await tx.query(`insert into "${f.schema}".side values ($1::bigint)`, [ev.id]);
          pid = String((await tx.query("select pg_backend_pid()::text as p"))[0]!.p);
          inside.open();
          await sleep(60_000);
        },
      });
      await inside.wait;
      await terminate(f.raw, pid);
      await assert.rejects(aRun);
      const side = await f.raw(`select count(*)::int as n from "${f.schema}".side`);
      assert.equal(side[0]!.n, 0, "nothing the killed batch did is visible");
      const r = await b.q.exclusive("jobs", "m").run({
        maxEvents: 5,
        handler: async (ev, tx) => void (await tx.query(`insert into "${f.schema}".side values ($1::bigint)`, [ev.id])),
      });
      assert.equal(r.events, 10, "another worker took the freed chunk and key at once");
      const after = await f.raw(`select count(*)::int as n from "${f.schema}".side`);
      assert.equal(after[0]!.n, 10);
    });
  });

  // node-postgres workers: postgres.js 3.4.9 throws an uncatchable TypeError
  // (nextWrite on a null socket) when its backend is killed mid-transaction
  // (porsager/postgres#1154, #1208), which would end the test process.
  test("exactly-once in the database under random handler failures and backend kills", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      // A name of this test's own: the killer below must never hit another test
      // file's workers (ordered.test.ts names its workers kq-worker-<i> too).
      const app = `kq-x-${f.schema}`;
      const workers = Array.from({ length: 4 }, (_, i) => {
        const pool = new pg.Pool({ connectionString: f.url, application_name: `${app}-${i}`, max: 1 });
        pool.on("error", () => {}); // an idle client killed by the chaos loop
        return { q: keyq(fromPg(pool), { schema: f.schema }), sql: { end: () => pool.end() } };
      });
      defer(() => Promise.all(workers.map((w) => w.sql.end().catch(() => {}))));
      await f.q.createQueue("jobs", { maxRetries: 100, retryBase: 5, retryCap: 50 });
      await f.raw(`create table "${f.schema}".effects (ev_id bigint, worker int)`);
      await f.q.exclusive("jobs", "m").subscribe();
      const N = 1000;
      await f.q.sendBatch("jobs", Array.from({ length: N }, (_, i) => ({ type: "E", payload: i, key: `k${i % 50}` })));
      let stop = false;
      let kills = 0;
      let failures = 0;
      const killer = (async () => {
        while (!stop) {
          await sleep(40);
          const r = await f.raw(
            `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
              where application_name = $1 || '-' || (floor(random() * 4))::int and state <> 'idle'`,
            [app],
          );
          kills += Number(r[0]!.n);
        }
      })();
      await Promise.all(workers.map(async ({ q }, w) => {
        const c = q.exclusive<number>("jobs", "m", { deferDelay: 10 });
        while (!stop) {
          try {
            await c.run({
              maxEvents: 20,
              budgetMs: 2_000,
              handler: async (ev, tx) => {
                await tx.query(`insert into "${f.schema}".effects values ($1::bigint, $2::int)`, [ev.id, String(w)]);
                if (Math.random() < 0.1) {
                  failures++;
                  throw new Error("random failure after writing");
                }
              },
            });
          } catch { /* killed mid-batch: the transaction rolled back */ }
          const [s] = await f.raw(
            `select (select count(distinct ev_id) from "${f.schema}".effects)::int as done,
                    (select count(*) from "${f.schema}".retry)::int as pending`,
          );
          if (s!.done === N && s!.pending === 0) stop = true;
          await sleep(5);
        }
      }));
      await killer;
      const [r] = await f.raw(`select count(*)::int as rows, count(distinct ev_id)::int as events from "${f.schema}".effects`);
      console.log(`exactly-once: events=${N} rows=${r!.rows} distinct=${r!.events} failures=${failures} kills=${kills}`);
      assert.equal(r!.events, N);
      assert.equal(r!.rows, N, "exactly one committed effect per event");
      assert.ok(failures > 0, "handler failures happened");
      assert.equal(await f.q.dlq.count(), 0);
    });
  });
});
