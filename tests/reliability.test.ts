// Reliability without a server and with work(): checked engine replies, the
// fault table, work() retrying transient faults, refusing permanent ones and
// stopping promptly. Deadlines and budgets: tests/reliability-deadlines.test.ts;
// lost sessions: tests/reliability-sessions.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Driver, keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { backoffMs, classify } from "../src/faults.ts";
import { engine } from "../src/engine/calls.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();
import { downDriver, sleep } from "./helpers/reliability.ts";
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
});
