// A batch's life (deadline, stop, lost connection) and the run/work loops,
// with fake executors and batches instead of a database.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { BatchSettings } from "../../src/batch/settings.ts";
import type { Executor } from "../../src/driver.ts";
import { KeyqError } from "../../src/errors.ts";
import { batchLife, timer } from "../../src/batch/life.ts";
import { addUp, emptyReport, runLoop, workLoop } from "../../src/kinds/loop.ts";
import { sleep } from "../../src/observe/wake.ts";
import type { BatchReport } from "../../src/types.ts";

const ok: Executor = { query: () => Promise.resolve([{ ok: 1 }]) };
const lost = Object.assign(new Error("Connection terminated unexpectedly"), {});

describe("batch life", () => {
  test("the deadline kills the batch: signal aborts, died rejects BATCH_ABORTED, queries are refused", async () => {
    const life = batchLife(20, undefined);
    assert.equal(life.dead(), false);
    assert.ok(life.deadline.getTime() - Date.now() <= 20);
    await life.expired;
    assert.equal(life.reason(), "deadline");
    assert.ok(life.dead() && life.signal.aborted);
    await assert.rejects(life.died, (e) => e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.reason === "deadline");
    await assert.rejects(life.guard(ok).query("select 1"), /ran past its deadline/);
    life.dispose();
  });

  test("a stop signal aborts the handlers' signal but the batch is not dead (it commits what finished)", async () => {
    const stop = new AbortController();
    const life = batchLife(60_000, stop.signal);
    stop.abort();
    assert.equal(life.reason(), "stopped");
    assert.equal(life.signal.aborted, true);
    assert.equal(life.dead(), false);
    assert.deepEqual(await life.guard(ok).query("select 1"), [{ ok: 1 }]);
    life.abort("deadline");
    assert.equal(life.reason(), "deadline", "a deadline after a stop still kills the batch");
    life.abort("connection");
    assert.equal(life.reason(), "deadline", "the first fatal reason wins");
    life.dispose();
  });

  test("an already aborted stop signal stops the batch at once", () => {
    const life = batchLife(60_000, AbortSignal.abort());
    assert.equal(life.reason(), "stopped");
    life.dispose();
  });

  test("a connection error through the guard kills the batch; other errors do not", async () => {
    const life = batchLife(60_000, undefined);
    const failing = (err: unknown): Executor => ({ query: () => Promise.reject(err) });
    await assert.rejects(life.guard(failing(new Error("syntax error"))).query("x"), /syntax error/);
    assert.equal(life.dead(), false);
    await assert.rejects(life.guard(failing(lost)).query("x"), /Connection terminated/);
    assert.equal(life.reason(), "connection");
    assert.match(life.error().message, /connection was lost .*\(Connection terminated unexpectedly\)/);
    await assert.rejects(life.guard(ok).query("select 1"), (e) => e instanceof KeyqError && e.details.reason === "connection");
    life.dispose();
  });

  test("race: settles like the promise while the batch lives; rejects BATCH_ABORTED when it dies first, or at once when dead", async () => {
    const life = batchLife(60_000, undefined);
    assert.equal(await life.race(Promise.resolve(7)), 7);
    await assert.rejects(life.race(Promise.reject(new Error("handler broke"))), /handler broke/);
    const hung = life.race(new Promise(() => {}));
    life.abort("connection", lost);
    await assert.rejects(hung, (e) => e instanceof KeyqError && e.details.reason === "connection");
    await assert.rejects(life.race(Promise.resolve(1)), (e) => e instanceof KeyqError && e.code === "BATCH_ABORTED");
    life.dispose();
    const stopped = batchLife(60_000, AbortSignal.abort());
    assert.equal(await stopped.race(Promise.resolve("done")), "done", "a stopped batch is not dead: what runs may finish");
    stopped.dispose();
  });

  test("a sealed batch (COMMIT in flight) outlives its deadline; no answer within the grace is 'commit unknown'", async () => {
    const life = batchLife(20, undefined);
    life.seal(40);
    await new Promise((r) => setTimeout(r, 35));
    assert.equal(life.dead(), false, "past the deadline, within the grace: still committing");
    assert.equal(life.signal.aborted, false);
    await assert.rejects(
      life.died,
      (e) =>
        e instanceof KeyqError && e.code === "BATCH_ABORTED" && e.details.reason === "deadline" && e.details.commit === "unknown" &&
        /did not answer within 40 ms after its deadline.*may have committed or rolled back/.test(e.message),
    );
    life.dispose();
  });

  test("a connection lost while sealed is 'commit unknown', not 'rolled back'; sealing a dead batch changes nothing", () => {
    const sealed = batchLife(60_000, undefined);
    sealed.seal(2_000);
    sealed.abort("connection", lost);
    assert.equal(sealed.error().details.commit, "unknown");
    assert.match(sealed.error().message, /lost while it committed \(Connection terminated unexpectedly\); it may have committed/);
    assert.doesNotMatch(sealed.error().message, /rolled back;/);
    sealed.dispose();
    const dead = batchLife(60_000, undefined);
    dead.abort("connection", lost);
    dead.seal(2_000);
    assert.equal(dead.error().details.commit, undefined);
    assert.match(dead.error().message, /was rolled back/);
    dead.dispose();
  });

  test("after dispose a left-behind handler cannot use the transaction, savepoints included", async () => {
    const life = batchLife(60_000, undefined);
    const withSp: Executor = { query: ok.query, savepoint: (fn) => fn(ok) };
    const guarded = life.guard(withSp);
    assert.deepEqual(await guarded.savepoint!((sp) => sp.query("select 1")), [{ ok: 1 }]);
    life.dispose();
    await assert.rejects(guarded.query("select 1"), /This batch is over/);
    await assert.rejects(guarded.savepoint!((sp) => sp.query("select 1")), /This batch is over/);
    assert.equal(life.guard(ok).savepoint, undefined, "no savepoint where the executor has none");
  });

  test("timer settles after ms, never for Infinity, and cancels", async () => {
    const t0 = Date.now();
    await timer(15).done;
    assert.ok(Date.now() - t0 >= 10);
    const never = timer(Infinity);
    const r = await Promise.race([never.done.then(() => "settled"), sleep(20).then(() => "pending")]);
    assert.equal(r, "pending");
    never.cancel();
  });
});

/** Settings for the loops; only what they read. */
function settings(over: Partial<BatchSettings> = {}): BatchSettings {
  return {
    maxBatches: 100,
    budgetMs: 60_000,
    signal: undefined,
    minPollMs: 1,
    maxPollMs: 8,
    onRetry: undefined,
    retryBackoff: { baseMs: 1, capMs: 4 },
    ...over,
  } as BatchSettings;
}

const batchOf = (events: number, over: Partial<BatchReport> = {}): BatchReport => ({
  events,
  retried: 0,
  deadLettered: 0,
  dropped: 0,
  deferred: 0,
  statements: 3,
  roundTrips: 3,
  busy: false,
  ...over,
} as BatchReport);

describe("run and work loops", () => {
  test("addUp sums every counter and keeps ticked once set", () => {
    const total = emptyReport();
    addUp(total, { ...batchOf(2, { retried: 1, dropped: 1 }), ticked: true });
    addUp(total, { ...batchOf(3, { deferred: 2, deadLettered: 1 }), batches: 4, ticked: false });
    assert.deepEqual({ ...total, ms: 0 }, {
      batches: 5,
      events: 5,
      retried: 1,
      deadLettered: 1,
      dropped: 1,
      deferred: 2,
      statements: 6,
      roundTrips: 6,
      ticked: true,
      ms: 0,
    });
  });

  test("runLoop stops at the first empty batch, and counts its statements (roundTrips: the same, deprecated)", async () => {
    const queue = [batchOf(5), batchOf(2), batchOf(0, { statements: 1, roundTrips: 1 }), batchOf(9)];
    const r = await runLoop(settings(), () => Promise.resolve({ ticked: true, statements: 2 }), () => Promise.resolve(queue.shift()!));
    assert.equal(r.batches, 2);
    assert.equal(r.events, 7);
    assert.equal(r.statements, 2 + 3 + 3 + 1);
    assert.equal(r.roundTrips, r.statements);
    assert.equal(r.ticked, true);
    assert.equal(queue.length, 1, "the batch after the empty one never ran");
  });

  test("runLoop honours maxBatches and a busy batch", async () => {
    let calls = 0;
    const r = await runLoop(settings({ maxBatches: 3 }), () => Promise.resolve({ ticked: false, statements: 1 }), () => (calls++, Promise.resolve(batchOf(1))));
    assert.equal([r.batches, calls].join(), "3,3");
    const busy = await runLoop(settings(), () => Promise.resolve({ ticked: false, statements: 1 }), () => Promise.resolve(batchOf(4, { busy: true })));
    assert.equal(busy.events, 0);
  });

  test("workLoop retries transient failures with backoff, reporting each; a permanent one rejects", async () => {
    const stop = new AbortController();
    const retries: { attempt: number; delayMs: number }[] = [];
    const script: (() => Promise<ReturnType<typeof emptyReport>>)[] = [
      () => Promise.reject(Object.assign(new Error("x"), { code: "57P01" })),
      () => Promise.reject(Object.assign(new Error("x"), { code: "40001" })),
      () => Promise.resolve({ ...emptyReport(), events: 3, batches: 1 }),
      () => Promise.reject(Object.assign(new Error("x"), { code: "53300" })),
      () => Promise.reject(Object.assign(new Error("unique"), { code: "23505" })),
    ];
    const s = settings({ signal: stop.signal, onRetry: ({ attempt, delayMs }) => void retries.push({ attempt, delayMs }) });
    await assert.rejects(workLoop(s, () => script.shift()!()), /unique/);
    assert.deepEqual(retries.map((r) => r.attempt), [1, 2, 1], "a success resets the attempt count");
    for (const r of retries) assert.ok(r.delayMs >= 0 && r.delayMs <= 4, String(r.delayMs));
  });

  test("workLoop stops on its signal and returns the totals; a throwing onRetry does not stop it", async () => {
    const stop = new AbortController();
    let runs = 0;
    const s = settings({
      signal: stop.signal,
      onRetry: () => {
        throw new Error("hook");
      },
    });
    const total = await workLoop(s, () => {
      runs++;
      if (runs === 1) return Promise.reject(Object.assign(new Error("x"), { code: "ECONNRESET" }));
      if (runs === 4) stop.abort();
      return Promise.resolve({ ...emptyReport(), events: 1, batches: 1 });
    });
    assert.equal(total.events, 3);
    assert.equal(runs, 4);
  });
});
