// Reliability on the shared server: budgets that bound run(), handlers that
// outlive the server's idle timeout within keyq's deadline, lost sessions
// (only this test's own backends are killed), work() retrying transient
// faults, checked engine replies. Handler starts and ends are recorded in
// the handlers themselves.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pg from "pg";
import { type Driver, type Keyq, keyq, KeyqError, type TxDriver } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { backoffMs, classify } from "../src/faults.ts";
import { engine } from "../src/engine/calls.ts";
import { connect, dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });

/** A driver whose every call fails like a server that is down. */
function downDriver(): TxDriver & { calls: number } {
  const refused = () => Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  const d = {
    name: "down",
    calls: 0,
    query: () => {
      d.calls++;
      return Promise.reject(refused());
    },
    transaction: () => {
      d.calls++;
      return Promise.reject(refused());
    },
  };
  return d;
}

interface Call {
  who: string;
  key: string | null;
  id: string;
  start: number;
  end: number;
}

/** Pairs of calls of one key by different workers whose [start, end] intervals overlap. */
function overlaps(calls: Call[]): number {
  let n = 0;
  for (const a of calls) {
    for (const b of calls) {
      if (a === b || a.who >= b.who || a.key !== b.key) continue;
      if (a.start < b.end && b.start < a.end) n++;
    }
  }
  return n;
}

/** Makes COMMIT take `seconds` in `f.schema`: a deferred constraint trigger on inserts into slow_commit. */
async function slowCommit(f: { schema: string; raw: (text: string) => Promise<unknown> }, seconds: number): Promise<void> {
  await f.raw(`
    create table "${f.schema}".slow_commit (n int);
    create function "${f.schema}".slow() returns trigger language plpgsql as $$
      begin perform pg_sleep(${seconds}); return null; end $$;
    create constraint trigger slow after insert on "${f.schema}".slow_commit
      deferrable initially deferred for each row execute function "${f.schema}".slow();`);
}

describe("reliability", () => {
  test("engine replies are checked: a stale or empty reply is BAD_REPLY, not a TypeError", async () => {
    const stale = { name: "stale", query: () => Promise.resolve([]) } as Driver; // COMMIT's empty result
    await assert.rejects(engine.tick(stale, "keyq", { queue: "q", force: false }), (e: unknown) => {
      assert.ok(e instanceof KeyqError, String(e));
      assert.equal(e.code, "BAD_REPLY");
      assert.match(e.message, /tick\(\)/);
      return true;
    });
    const q = keyq({ name: "wrong", query: () => Promise.resolve([{ command: "COMMIT" }]) });
    await assert.rejects(q.tick("jobs"), { name: "KeyqError", code: "BAD_REPLY" });
    const odd = keyq({ name: "odd", query: () => Promise.resolve([{ r: '{"unexpected": 1}' }]) });
    await assert.rejects(odd.tick("jobs"), { code: "BAD_REPLY" }, "a reply of the wrong shape");
  });

  test("the fault table: lost connections and refusals are retried, the rest is permanent", () => {
    const err = (code: string, message = "x") => Object.assign(new Error(message), { code });
    for (const code of ["57P01", "57P02", "57P03", "08006", "08001", "53300", "40001", "40P01", "ECONNREFUSED", "ECONNRESET", "CONNECTION_CLOSED"]) {
      assert.notEqual(classify(err(code)), "permanent", code);
    }
    for (const code of ["42P01", "23505", "CONNECTION_ENDED", "22P02"]) assert.equal(classify(err(code)), "permanent", code);
    assert.equal(classify(new Error("Connection terminated unexpectedly")), "connection", "pg says it in words");
    assert.equal(classify(new Error("boom", { cause: err("57P01") })), "connection", "causes are followed");
    assert.equal(classify(new KeyqError("QUEUE_NOT_FOUND", "no")), "permanent");
    assert.equal(classify(new KeyqError("NOT_MIGRATED", "no")), "permanent");
    assert.equal(classify(new KeyqError("BAD_REPLY", "no")), "connection");
    assert.equal(classify(new KeyqError("BATCH_ABORTED", "no", { reason: "connection" })), "connection");
    assert.equal(classify(new KeyqError("BATCH_ABORTED", "no", { reason: "deadline" })), "transient");
    const b = { baseMs: 100, capMs: 1000 };
    assert.deepEqual([1, 2, 3, 4, 5, 9].map((a) => backoffMs(a, b, () => 1)), [100, 200, 400, 800, 1000, 1000], "capped doubling");
    assert.deepEqual([1, 2, 5].map((a) => backoffMs(a, b, () => 0)), [50, 100, 500], "equal jitter: never below half");
  });

  test("work() retries transient faults with backoff, reports them, and stops promptly while backing off", async () => {
    const d = downDriver();
    const q = keyq(d, { schema: "nowhere" });
    const ctl = new AbortController();
    const retries: { attempt: number; delayMs: number; code: unknown }[] = [];
    let abortAt = 0;
    const working = q.exclusive("jobs", "w").work({
      signal: ctl.signal,
      retryBackoff: { baseMs: 250, capMs: 60_000 },
      onRetry: ({ error, attempt, delayMs }) => {
        retries.push({ attempt, delayMs, code: (error as { code?: unknown }).code });
        if (attempt === 3) setTimeout(() => (abortAt = Date.now(), ctl.abort()), 50); // during a 500–1000 ms backoff
      },
      handler: () => {},
    });
    const report = await working;
    const stopMs = Date.now() - abortAt;
    assert.equal(report.events, 0);
    assert.equal(retries.length, 3, `retried until stopped: ${JSON.stringify(retries)}`);
    assert.deepEqual(retries.map((r) => r.attempt), [1, 2, 3]);
    assert.ok(retries.every((r) => r.code === "ECONNREFUSED"));
    for (const r of retries) {
      const ceiling = 250 * 2 ** (r.attempt - 1);
      assert.ok(r.delayMs >= ceiling / 2 && r.delayMs <= ceiling, `attempt ${r.attempt}: ${r.delayMs} ms within [${ceiling / 2}, ${ceiling}]`);
    }
    console.log(`work() stopped ${stopMs} ms after its signal aborted during a ${retries[2]!.delayMs} ms backoff; ${d.calls} driver calls`);
    assert.ok(stopMs < retries[2]!.delayMs - 300, "it did not sit out the backoff");
    assert.equal(d.calls, 3, "no call after the stop");
  });

  test("work() rejects at once on a permanent error (unknown queue, not migrated)", { skip }, async () => {
    await withPg(async (f) => {
      const retried: unknown[] = [];
      await assert.rejects(
        f.q.exclusive("no-such-queue", "w").work({ onRetry: ({ error }) => retried.push(error), handler: () => {} }),
        { code: "QUEUE_NOT_FOUND" },
      );
      const other = keyq(fromPostgresJs(f.sql), { schema: "keyq_never_migrated" });
      await assert.rejects(other.consumer("jobs", "w").work({ onRetry: ({ error }) => retried.push(error), handler: () => {} }), {
        code: "NOT_MIGRATED",
      });
      assert.equal(retried.length, 0, "permanent errors are not retried");
    });
  });

  test("work() stops promptly while a batch is in flight: the handler's signal fires and its event is not lost", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "p");
      await c.subscribe();
      await f.q.sendBatch("jobs", [1, 2].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
      const ctl = new AbortController();
      let started!: () => void;
      const inHandler = new Promise<void>((r) => (started = r));
      const calls: number[] = [];
      const working = c.work({
        signal: ctl.signal,
        handler: async (ev, _tx, { signal }) => {
          calls.push(ev.payload);
          started();
          await sleep(5000, signal);
          if (signal.aborted) throw signal.reason;
        },
      });
      await inHandler;
      const t0 = Date.now();
      ctl.abort();
      const report = await working;
      const took = Date.now() - t0;
      console.log(`work() stopped ${took} ms after its signal aborted inside a handler`);
      assert.ok(took < 1500, `stopped promptly (${took} ms)`);
      assert.equal(calls.length, 1, "no further handler started");
      assert.equal(report.events, 0, "the interrupted call is not counted as handled");
      const [row] = await f.raw(`select count(*)::int as n, max(retry)::int as r from "${f.schema}".retry`);
      assert.equal(row!.n, 2, "both events come again");
      assert.equal(row!.r, 0, "without spending a retry");
      const seen: number[] = [];
      await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen.sort(), [1, 2]);
    });
  });

  test("budgetMs bounds run(): it stops starting events, commits what finished, the rest come again in order", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.ordered<number>("jobs", "b", { slots: 1 });
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 100 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 3}` })));
      const seen: number[] = [];
      const t0 = Date.now();
      const first = await c.run({
        budgetMs: 2000,
        maxEvents: 100,
        handler: async (ev) => {
          await sleep(200);
          seen.push(ev.payload);
        },
      });
      const took = Date.now() - t0;
      console.log(`run({ budgetMs: 2000 }) with a 200 ms handler over 100 events returned after ${took} ms, ${first.events} events handled`);
      assert.ok(first.events > 0 && first.events < 100, `handled ${first.events} of 100 in the first run`);
      assert.equal(seen.length, first.events);
      assert.ok(took < 2000 + 200 + 3000, `returned within the budget plus one handler call (loosely): ${took} ms`);
      const rest = await c.run({ budgetMs: 60_000, handler: (ev) => void seen.push(ev.payload) });
      assert.equal(rest.events, 100 - first.events, "the events not started come again");
      assert.deepEqual(seen, Array.from({ length: 100 }, (_, i) => i), "none lost, none doubled, in order");
      const again = await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.equal(again.events, 0);
    });
  });

  test("budgetMs on Tier A: events not started are released to other workers, not lost", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "x");
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 40 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 4}` })));
      const seen: number[] = [];
      const first = await c.run({ budgetMs: 300, maxEvents: 40, handler: async (ev) => void (await sleep(50), seen.push(ev.payload)) });
      assert.ok(first.events < 40, `first run handled ${first.events}`);
      await c.run({ budgetMs: 60_000, handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual([...seen].sort((a, b) => a - b), Array.from({ length: 40 }, (_, i) => i));
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
      assert.equal(row!.n, 0, "released events left no retry rows behind");
    });
  });

  test("a handler silent for longer than the server-side idle timeout, within keyq's deadline, commits", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "s");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [{ type: "E", payload: 1, key: "a" }, { type: "E", payload: 2, key: "b" }]);
      // An idleTimeout shorter than the deadline is refused, not silently raised.
      await assert.rejects(
        c.run({ idleTimeout: 300, batchTimeout: 5000, handler: () => {} }),
        (e) => e instanceof KeyqError && e.code === "INVALID_INPUT" && e.details.field === "idleTimeout" && /shorter than "batchTimeout"/.test(e.message),
      );
      const done: number[] = [];
      const idle: string[] = [];
      const r = await c.run({
        idleTimeout: 1500, // honoured as given: the server's backstop, no shorter than the deadline
        batchTimeout: 1500,
        handler: async (ev, tx) => {
          await sleep(1200); // silent: no query for most of the deadline
          const [row] = await tx.query("select current_setting('idle_in_transaction_session_timeout') as i");
          idle.push(String(row!.i));
          done.push(ev.payload);
        },
        maxEvents: 1,
      });
      assert.equal(r.events, 2);
      assert.deepEqual(done.sort(), [1, 2]);
      assert.deepEqual(idle, ["1500ms", "1500ms"]);
      const again = await c.run({ handler: () => assert.fail("committed events must not come again") });
      assert.equal(again.events, 0);
    });
  });

  test("a batch past its deadline rolls back and rejects with BATCH_ABORTED; no further handler starts", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "d");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
      const started: number[] = [];
      let aborted = 0;
      const t0 = Date.now();
      await assert.rejects(
        c.run({
          batchTimeout: 500,
          handler: async (ev, _tx, { signal, deadline }) => {
            started.push(ev.payload);
            assert.ok(deadline.getTime() <= Date.now() + 500);
            await sleep(5000, signal);
            if (signal.aborted) aborted++;
          },
        }),
        (e: unknown) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.reason === "deadline",
      );
      assert.ok(Date.now() - t0 < 3000, "rejected at the deadline, not after the handler");
      assert.deepEqual(started, [1], "no handler started after the deadline");
      assert.equal(aborted, 1, "the handler saw its signal");
      const seen: number[] = [];
      await c.run({ handler: (ev) => void seen.push(ev.payload) });
      assert.deepEqual(seen.sort(), [1, 2, 3], "rolled back: every event comes again");
    });
  });

  for (const driverName of ["postgres-js", "pg"] as const) {
    test(`${driverName}: a COMMIT still running at the deadline is waited for; the batch reports what it committed`, { skip }, async () => {
      await withPg(async (f, defer) => {
        const pool = new pg.Pool({ connectionString: f.url, max: 2 });
        defer(() => pool.end());
        const q = driverName === "pg" ? keyq(fromPg(pool), { schema: f.schema }) : f.q;
        await slowCommit(f, 1.0);
        await q.createQueue("jobs");
        const c = q.exclusive<number>("jobs", "late");
        await c.subscribe();
        await q.send("jobs", { type: "E", payload: 1, key: "a" });
        let commitStarted = 0;
        const r = await c.run({
          batchTimeout: 2000,
          handler: async (ev, tx, { deadline }) => {
            await sleep(deadline.getTime() - Date.now() - 600); // the handler finishes 600 ms before its deadline
            await tx.query(`insert into "${f.schema}".slow_commit values ($1::int)`, [String(ev.payload)]);
            commitStarted = Date.now();
          },
        });
        const committedAt = Date.now();
        assert.ok(committedAt - commitStarted >= 900, `COMMIT took ${committedAt - commitStarted} ms: it ran past the deadline`);
        assert.equal(r.events, 1, "reported as committed");
        assert.deepEqual((await f.raw(`select n from "${f.schema}".slow_commit`)).map((x) => x.n), [1]);
        const again = await c.run({ handler: () => assert.fail("a committed event must not come again") });
        assert.equal(again.events, 0);
      });
    });
  }

  test("a COMMIT that does not answer within the grace after the deadline is reported as 'commit unknown', not as rolled back", { skip }, async () => {
    await withPg(async (f) => {
      await slowCommit(f, 3.5); // COMMIT ends 2.9 s after the deadline; keyq waits 2 s, the server's statement timeout 3.4 s
      await f.q.createQueue("jobs");
      const c = f.q.exclusive<number>("jobs", "late");
      await c.subscribe();
      await f.q.send("jobs", { type: "E", payload: 7, key: "a" });
      await assert.rejects(
        c.run({
          batchTimeout: 2000,
          handler: async (ev, tx, { deadline }) => {
            await sleep(deadline.getTime() - Date.now() - 600);
            await tx.query(`insert into "${f.schema}".slow_commit values ($1::int)`, [String(ev.payload)]);
          },
        }),
        (e: unknown) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.commit === "unknown" && /may have committed/.test(e.message),
      );
      // And it did commit, later: why "rolled back" would have been a lie.
      let rows: Record<string, unknown>[] = [];
      for (let i = 0; i < 50 && rows.length === 0; i++) {
        await sleep(100);
        rows = await f.raw(`select n from "${f.schema}".slow_commit`);
      }
      assert.deepEqual(rows.map((x) => x.n), [7]);
    });
  });

  test("eventTimeout fails the hung event, starts no further event of its batch, and its late writes are refused", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("jobs", { retryBase: "1h" });
      await f.raw(`create table "${f.schema}".marks (n int)`);
      const c = f.q.exclusive<number>("jobs", "e");
      await c.subscribe(); // from "latest": subscribe before sending
      await f.q.sendBatch("jobs", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
      const started: number[] = [];
      let lateWrite: unknown;
      let release!: () => void;
      const lateDone = new Promise<void>((r) => (release = r));
      const r = await c.run({
        eventTimeout: 200,
        handler: async (ev, tx, { signal }) => {
          started.push(ev.payload);
          if (ev.payload === 2) {
            await sleep(700); // ignores its signal
            assert.ok(signal.aborted, "its signal fired at the event timeout");
            await tx.query(`insert into "${f.schema}".marks values (2)`).catch((e) => (lateWrite = e));
            release();
            return;
          }
          await tx.query(`insert into "${f.schema}".marks values ($1::int)`, [String(ev.payload)]);
        },
      });
      await lateDone;
      // Each event runs in its own savepoint: the timed-out event rolls back alone, and no
      // handler is called a second time (event 1's writes commit from its one call).
      assert.deepEqual(started, [1, 2, 3]);
      assert.equal(r.batches, 2, "event 3 was released by the timed-out batch and came in the next one");
      assert.equal(r.retried, 1, "the hung event failed");
      assert.equal(r.events, 3);
      assert.ok(lateWrite instanceof Error, "the late write was refused");
      const marks = await f.raw(`select n from "${f.schema}".marks order by n`);
      assert.deepEqual(marks.map((m) => m.n), [1, 3], "nothing of the timed-out call was written");
      const [row] = await f.raw(`select last_error->>'name' as name from "${f.schema}".retry`);
      assert.equal(row!.name, "TimeoutError");
    });
  });

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
    const consumer = (q: Keyq) =>
      tier === "A" ? q.exclusive<number>("jobs", "f", { fenced }) : q.ordered<number>("jobs", "f", { slots: 1, fenced });
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
