// Reliability on the shared server, lost sessions (only this test's own
// backends are killed): a handler sleeping when its session dies, work()
// resuming by itself, and fenced mode against a zombie handler. Handler
// starts and ends are recorded in the handlers themselves.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pg from "pg";
import { type Keyq, keyq, KeyqError } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { connect, dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();
import { type Call, overlaps, sleep } from "./helpers/reliability.ts";
describe("reliability", () => {
  for (const driverName of ["postgres-js", "pg"] as const) {
    test(`${driverName}: session killed while a handler sleeps: no handler of the dead batch starts after, the handler stops, no overlap`, {
      skip,
    }, async () => {
      await withPg(async (f, defer) => {
        const sql1 = connect(f.url, { max: 2 });
        const pool = new pg.Pool({ connectionString: f.url, max: 2 });
        const driver = driverName === "pg" ? fromPg(pool) : fromPostgresJs(sql1);
        const w1: Keyq = keyq(driver, { schema: f.schema });
        defer(async () => {
          await sql1.end({ timeout: 1 }).catch(() => {});
          await pool.end().catch(() => {});
        });
        await f.q.createQueue("jobs");
        const c1 = w1.exclusive<number>("jobs", "z");
        await c1.subscribe();
        await f.q.sendBatch("jobs", Array.from({ length: 6 }, (_, i) => ({ type: "E", payload: i, key: "k" })));
        const calls: Call[] = [];
        let pid = "";
        let killAt = Number.POSITIVE_INFINITY;
        let inHandler!: () => void;
        const sleeping = new Promise<void>((r) => (inHandler = r));
        const dead = c1.run({
          maxBatches: 1,
          maxEvents: 6,
          handler: async (ev, tx, { signal }) => {
            const rec: Call = { who: "w1", key: ev.key, id: ev.id, start: performance.now(), end: Number.POSITIVE_INFINITY };
            calls.push(rec);
            if (!pid) {
              const [row] = await tx.query("select pg_backend_pid()::text as pid");
              pid = String(row!.pid);
              inHandler();
              await sleep(4000, signal);
            }
            rec.end = performance.now();
            if (signal.aborted) throw signal.reason;
          },
        });
        dead.catch(() => {}); // it may reject before the assertion below is attached
        await sleeping;
        killAt = performance.now();
        await f.raw("select pg_terminate_backend($1::int)", [pid]);
        await assert.rejects(dead, (e: unknown) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.reason === "connection");
        const c2 = f.q.exclusive<number>("jobs", "z");
        while (calls.filter((x) => x.who === "w2").length < 6) {
          await c2.run({
            handler: async (ev) => {
              const rec: Call = { who: "w2", key: ev.key, id: ev.id, start: performance.now(), end: Number.POSITIVE_INFINITY };
              calls.push(rec);
              await sleep(20);
              rec.end = performance.now();
            },
          });
        }
        const w1Calls = calls.filter((x) => x.who === "w1");
        assert.equal(w1Calls.length, 1, "no handler of the dead batch started after the kill");
        assert.equal(w1Calls.filter((x) => x.start > killAt).length, 0);
        assert.ok(w1Calls[0]!.end - killAt < 2000, `the sleeping handler stopped on its signal (${Math.round(w1Calls[0]!.end - killAt)} ms after the kill)`);
        const n = overlaps(calls);
        console.log(`${driverName}: default mode, session killed: overlapping calls of one key = ${n}`);
        assert.equal(n, 0);
      });
    });
  }

  test("work() resumes by itself after its backend is killed, and reports it through onRetry", { skip }, async () => {
    await withPg(async (f, defer) => {
      const sql1 = connect(f.url, { max: 2 });
      const w = keyq(fromPostgresJs(sql1), { schema: f.schema });
      defer(() => sql1.end({ timeout: 1 }).catch(() => {}));
      await f.q.createQueue("jobs");
      const c = w.exclusive<number>("jobs", "r");
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `k${i}` })));
      const ctl = new AbortController();
      const handled = new Set<number>();
      const retries: { attempt: number; reason: unknown }[] = [];
      let killed = false;
      const working = c.work({
        signal: ctl.signal,
        minPollMs: 10,
        maxPollMs: 50,
        retryBackoff: { baseMs: 50, capMs: 500 },
        onRetry: ({ error, attempt }) => retries.push({ attempt, reason: (error as KeyqError).details?.reason }),
        handler: async (ev, tx, { signal }) => {
          if (!killed) {
            killed = true;
            const [row] = await tx.query("select pg_backend_pid()::text as pid");
            await f.raw("select pg_terminate_backend($1::int)", [String(row!.pid)]);
            await sleep(3000, signal);
            if (signal.aborted) throw signal.reason;
          }
          handled.add(ev.payload);
          if (handled.size === 10) ctl.abort();
        },
      });
      const report = await working;
      assert.deepEqual([...handled].sort((a, b) => a - b), Array.from({ length: 10 }, (_, i) => i));
      assert.ok(retries.length >= 1, "the lost batch was reported");
      assert.equal(retries[0]!.reason, "connection");
      assert.ok(report.events >= 10);
    });
  });
  /**
   * Worker 1 (its own pool) starts a batch of key "k" whose handler ignores
   * its signal and sleeps 2 s; its session is killed meanwhile; worker 2
   * keeps polling the same consumer. Returns the calls of both.
   */
  async function zombie(tier: "A" | "B", fenced: boolean): Promise<{ calls: Call[]; killAt: number; w1Deadline: number; w2FirstAt: number }> {
    const consumer = (q: Keyq) => tier === "A" ? q.exclusive<number>("jobs", "f", { fenced }) : q.ordered<number>("jobs", "f", { slots: 1, fenced });
    return await withPg(async (f, defer) => {
      const sql1 = defer.use(connect(f.url, { max: 2 }), (s) => s.end({ timeout: 1 }).catch(() => {}));
      const w1 = keyq(fromPostgresJs(sql1), { schema: f.schema });
      await f.q.createQueue("jobs");
      await consumer(f.q).subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 4 }, (_, i) => ({ type: "E", payload: i, key: "k" })));
      const calls: Call[] = [];
      let pid = "";
      let w1Deadline = 0;
      let w2FirstAt = 0;
      let inHandler!: () => void;
      const sleeping = new Promise<void>((r) => (inHandler = r));
      const first = consumer(w1).run({
        maxBatches: 1,
        batchTimeout: 5000,
        handler: async (ev, tx, { deadline }) => {
          w1Deadline = deadline.getTime();
          const rec: Call = { who: "w1", key: ev.key, id: ev.id, start: performance.now(), end: Number.POSITIVE_INFINITY };
          calls.push(rec);
          if (!pid) {
            const [row] = await tx.query("select pg_backend_pid()::text as pid");
            pid = String(row!.pid);
            inHandler();
            await sleep(2000); // ignores its signal
          }
          rec.end = performance.now();
        },
      });
      first.catch(() => {});
      await sleeping;
      const killAt = performance.now();
      await f.raw("select pg_terminate_backend($1::int)", [pid]);
      const c2 = consumer(f.q);
      const until = Date.now() + 20_000;
      while (calls.filter((x) => x.who === "w2").length < 4 && Date.now() < until) {
        await c2.run({
          budgetMs: 500,
          handler: async (ev) => {
            const rec: Call = { who: "w2", key: ev.key, id: ev.id, start: performance.now(), end: Number.POSITIVE_INFINITY };
            calls.push(rec);
            w2FirstAt ||= Date.now();
            await sleep(20);
            rec.end = performance.now();
          },
        });
        await sleep(50);
      }
      await assert.rejects(first, { code: "BATCH_ABORTED" });
      assert.equal(calls.filter((x) => x.who === "w2").length, 4, "worker 2 handled every event once the fence ended");
      return { calls, killAt, w1Deadline, w2FirstAt };
    });
  }

  for (const tier of ["A", "B"] as const) {
    test(`Tier ${tier} fenced: a handler that ignores its signal while its session is killed never overlaps another call of its key`, {
      skip,
    }, async () => {
      const { calls, killAt, w1Deadline, w2FirstAt } = await zombie(tier, true);
      const n = overlaps(calls);
      const w2First = Math.min(...calls.filter((x) => x.who === "w2").map((x) => x.start));
      console.log(
        `Tier ${tier}, fenced, session killed, handler ignoring its signal: overlapping calls of one key = ${n}; ` +
          `takeover ${Math.round(w2First - killAt)} ms after the kill, ${w2FirstAt - w1Deadline} ms after the fenced batch's ` +
          `deadline (lease margin 2000 ms)`,
      );
      assert.ok(w2FirstAt >= w1Deadline, "no takeover before the fenced batch's deadline");
      assert.equal(n, 0);
    });
  }

  test("control: without fenced, the same zombie handler overlaps the next worker (what fenced mode prevents)", { skip }, async () => {
    const { calls } = await zombie("A", false);
    const n = overlaps(calls);
    console.log(`Tier A, not fenced: overlapping calls of one key = ${n}`);
    assert.ok(n > 0, "the scenario does produce a zombie overlap when not fenced");
  });
});
