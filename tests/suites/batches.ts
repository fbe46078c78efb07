/**
 * The batch's life on every driver (tests/batch-life.test.ts runs these
 * over the driver registry): a swallowed statement failure fails its event
 * only, `tx.savepoint` makes "catch 23505 and go on" work, each handler is
 * called once per delivery when a neighbour fails, and a hung handler under
 * `run({ budgetMs })` settles by the budget plus the grace.
 */
import assert from "node:assert/strict";
import process from "node:process";
import { type Consumer, KeyqError } from "../../mod.ts";
import type { Case } from "./basic.ts";
import type { Fixture } from "../helpers/keyq.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The three kinds, with Tier B's two failure policies. */
export type KindName = "plain" | "exclusive" | "ordered-skip" | "ordered-pause";

function consumerOf(f: Fixture, kind: KindName, name: string): Consumer<number> {
  if (kind === "plain") return f.q.consumer<number>("jobs", name);
  if (kind === "exclusive") return f.q.exclusive<number>("jobs", name);
  return f.q.ordered<number>("jobs", name, { slots: 1, onFailure: kind === "ordered-pause" ? "pause" : "skip" });
}

/** Unhandled rejections while `body` runs (none may happen). */
async function noUnhandled<T>(body: () => Promise<T>): Promise<T> {
  const seen: unknown[] = [];
  const note = (reason: unknown) => void seen.push(reason);
  process.on("unhandledRejection", note);
  try {
    const out = await body();
    await sleep(50); // a late rejection of the last batch
    assert.deepEqual(seen, [], "no unhandled rejection");
    return out;
  } finally {
    process.off("unhandledRejection", note);
  }
}

async function rows(f: Fixture, sql: string): Promise<Record<string, unknown>[]> {
  return await f.raw(sql.replaceAll("$S", `"${f.schema}"`));
}

/** Runs `c` (with `workers` concurrent runs on a pooled driver) until `done()`; the reports added up. */
async function pump(
  c: () => Consumer<number>,
  handler: Parameters<Consumer<number>["run"]>[0]["handler"],
  done: () => Promise<boolean>,
  workers = 1,
): Promise<{ events: number; retried: number; deadLettered: number }> {
  const total = { events: 0, retried: 0, deadLettered: 0 };
  const deadline = Date.now() + 20_000;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, "timed out waiting for deliveries");
    const reports = await Promise.all(Array.from({ length: workers }, () => c().run({ budgetMs: 2_000, handler })));
    for (const r of reports) {
      total.events += r.events;
      total.retried += r.retried;
      total.deadLettered += r.deadLettered;
    }
    await sleep(20);
  }
  return total;
}

/** Five events of five keys; the handler writes `done` and `t`; id 3 exists in `t` already. */
async function setup(f: Fixture): Promise<void> {
  await f.q.createQueue("jobs", { maxRetries: 1, retryBase: 1, retryCap: 1 });
  await f.raw(`create table $S.t (id int primary key)`.replaceAll("$S", `"${f.schema}"`));
  await f.raw(`create table $S.done (id int not null)`.replaceAll("$S", `"${f.schema}"`));
  await f.raw(`insert into $S.t values (3)`.replaceAll("$S", `"${f.schema}"`));
}

function swallowCase(kind: KindName, workers: number): Case {
  return {
    name: `a handler that swallows a failed statement fails its event only (${kind}${workers > 1 ? `, ${workers} workers` : ""})`,
    run: (f) =>
      noUnhandled(async () => {
        await setup(f);
        const c = () => consumerOf(f, kind, "c");
        await c().subscribe();
        await f.q.sendBatch("jobs", [1, 2, 3, 4, 5].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
        const calls = new Map<number, number>();
        const t = `"${f.schema}".t`;
        const done = `"${f.schema}".done`;
        const total = await pump(
          c,
          async (ev, tx) => {
            calls.set(ev.payload, (calls.get(ev.payload) ?? 0) + 1);
            await tx.query(`insert into ${done} values ($1::int)`, [String(ev.payload)]);
            try {
              await tx.query(`insert into ${t} values ($1::int)`, [String(ev.payload)]);
            } catch { /* swallowed: "it was there already" */ }
          },
          async () => (await rows(f, `select 1 from $S.dead_letter`)).length === 1,
          workers,
        );
        const dead = await rows(f, `select ev_data::text as ev_data, error->>'code' as code, error->>'message' as message from $S.dead_letter`);
        assert.equal(dead.length, 1);
        assert.equal(JSON.parse(String(dead[0]!.ev_data)), 3, "the swallowing event is the dead letter");
        assert.equal(dead[0]!.code, "HANDLER_SWALLOWED_FAILURE");
        assert.match(String(dead[0]!.message), /23505/, "the message names the swallowed error");
        assert.match(String(dead[0]!.message), /tx\.savepoint/, "and points to tx.savepoint");
        const committed = (await rows(f, `select id from $S.done order by id`)).map((r) => r.id);
        assert.deepEqual(committed, [1, 2, 4, 5], "the neighbours committed once; the failing event's writes rolled back");
        assert.deepEqual([...calls.entries()].sort((a, b) => a[0] - b[0]), [[1, 1], [2, 1], [3, 2], [4, 1], [5, 1]]);
        assert.deepEqual(total, { events: 6, retried: 1, deadLettered: 1 }, "honest counts");
        assert.equal((await rows(f, `select 1 from $S.retry`)).length, 0);
      }),
  };
}

function savepointCase(kind: KindName): Case {
  return {
    name: `the same handler using tx.savepoint commits every event (${kind})`,
    run: (f) =>
      noUnhandled(async () => {
        await setup(f);
        const c = () => consumerOf(f, kind, "c");
        await c().subscribe();
        await f.q.sendBatch("jobs", [1, 2, 3, 4, 5].map((i) => ({ type: "E", payload: i, key: `k${i}` })));
        const t = `"${f.schema}".t`;
        const done = `"${f.schema}".done`;
        let duplicates = 0;
        const total = await pump(c, async (ev, tx) => {
          try {
            await tx.savepoint((sp) => sp.query(`insert into ${t} values ($1::int)`, [String(ev.payload)]));
          } catch (err) {
            if ((err as { code?: unknown }).code !== "23505") throw err;
            duplicates++;
          }
          await tx.query(`insert into ${done} values ($1::int)`, [String(ev.payload)]);
        }, async () => (await rows(f, `select 1 from $S.done`)).length >= 5);
        assert.equal(duplicates, 1);
        assert.deepEqual((await rows(f, `select id from $S.done order by id`)).map((r) => r.id), [1, 2, 3, 4, 5]);
        assert.deepEqual((await rows(f, `select id from $S.t order by id`)).map((r) => r.id), [1, 2, 3, 4, 5]);
        assert.deepEqual(total, { events: 5, retried: 0, deadLettered: 0 });
        assert.equal((await rows(f, `select 1 from $S.dead_letter`)).length, 0);
      }),
  };
}

function callsCase(kind: KindName): Case {
  return {
    name: `one handler call per delivery when a neighbour fails (${kind})`,
    run: async (f) => {
      await setup(f);
      const c = () => consumerOf(f, kind, "c");
      await c().subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i + 1, key: `k${i + 1}` })));
      const calls = new Map<number, number>();
      const done = `"${f.schema}".done`;
      await pump(c, async (ev, tx) => {
        const n = (calls.get(ev.payload) ?? 0) + 1;
        calls.set(ev.payload, n);
        await tx.query(`insert into ${done} values ($1::int)`, [String(ev.payload)]);
        if (ev.payload === 6 && n === 1) throw new Error("the 6th fails once");
      }, async () => (await rows(f, `select 1 from $S.done`)).length >= 10);
      const expected = Array.from({ length: 10 }, (_, i) => [i + 1, i + 1 === 6 ? 2 : 1]);
      assert.deepEqual([...calls.entries()].sort((a, b) => a[0] - b[0]), expected, "each handler once per delivery");
      assert.deepEqual((await rows(f, `select id from $S.done order by id`)).map((r) => r.id), Array.from({ length: 10 }, (_, i) => i + 1));
    },
  };
}

const manyRunsCase: Case = {
  name: "swallowed failures over many runs: no unhandled rejection, every good event committed once",
  run: (f) =>
    noUnhandled(async () => {
      await setup(f);
      const c = f.q.exclusive<number>("jobs", "c");
      await c.subscribe();
      const t = `"${f.schema}".t`;
      const done = `"${f.schema}".done`;
      for (let i = 0; i < 20; i++) {
        await f.q.sendBatch("jobs", [{ type: "E", payload: 3, key: `bad${i}` }, { type: "E", payload: 100 + i, key: `good${i}` }]);
        await c.run({
          handler: async (ev, tx) => {
            if (ev.payload >= 100) await tx.query(`insert into ${done} values ($1::int)`, [String(ev.payload)]);
            else await tx.query(`insert into ${t} values (3)`).catch(() => {});
          },
        });
      }
      const good = (await rows(f, `select id from $S.done order by id`)).map((r) => r.id);
      assert.deepEqual(good, Array.from({ length: 20 }, (_, i) => 100 + i));
    }),
};

const hungCase: Case = {
  name: "a hung handler under run({ budgetMs }) settles by the budget plus the grace",
  run: async (f) => {
    await f.q.createQueue("jobs");
    const c = f.q.exclusive<number>("jobs", "c");
    await c.subscribe();
    await f.q.send("jobs", { type: "E", payload: 1, key: "k" });
    const t0 = Date.now();
    const err = await c.run({ budgetMs: 1_000, handler: () => new Promise<void>(() => {}) }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof KeyqError && err.code === "BATCH_ABORTED", String(err));
    assert.equal(err.details.by, "budget");
    assert.equal(err.details.reason, "deadline");
    // The deadline is the budget's end plus the 2 s grace, not batchTimeout's 60 s.
    assert.ok(Date.parse(String(err.details.deadline)) <= t0 + 1_000 + 2_000 + 50, String(err.details.deadline));
    assert.ok(Date.now() - t0 < 20_000, "settled long before batchTimeout");
    const again: number[] = [];
    await c.run({ handler: (ev) => void again.push(ev.payload) });
    assert.deepEqual(again, [1], "the event comes again");
  },
};

/** The batch's statement_timeout in ms, read inside a handler. */
async function statementTimeoutIn(tx: { query(t: string): Promise<Record<string, unknown>[]> }): Promise<number> {
  const [row] = await tx.query("select setting from pg_catalog.pg_settings where name = 'statement_timeout'");
  return Number(row!.setting);
}

const timeoutCase: Case = {
  name: "statementTimeout is honoured exactly or refused; a run's budget bounds it and the report says so",
  run: async (f) => {
    await f.q.createQueue("jobs");
    const c = f.q.exclusive<number>("jobs", "c");
    // Longer than batchTimeout: refused (batch, run, work), nothing read.
    for (
      const call of [
        () => c.batch({ statementTimeout: "90s", handler: () => {} }),
        () => c.run({ statementTimeout: 61_000, handler: () => {} }),
        () => c.work({ statementTimeout: "20s", batchTimeout: "10s", handler: () => {} }),
      ]
    ) {
      const err = await call().then(() => null, (e: unknown) => e);
      assert.ok(err instanceof KeyqError && err.code === "INVALID_INPUT" && err.details.field === "statementTimeout", String(err));
    }
    const seen: number[] = [];
    const handler = async (_ev: unknown, tx: { query(t: string): Promise<Record<string, unknown>[]> }) => void seen.push(await statementTimeoutIn(tx));
    const p = f.q.consumer<number>("jobs", "p");
    await p.subscribe();
    await f.q.send("jobs", { type: "E", payload: 1, key: "k1" });
    await f.q.tick("jobs");
    // Given and not above batchTimeout: used exactly, also equal to it.
    const b = await p.batch({ statementTimeout: "60s", handler });
    assert.deepEqual(b.limits, { deadlineMs: 60_000, by: "batchTimeout", statementTimeoutMs: 60_000 });
    assert.deepEqual(seen, [60_000]);
    // Unset: 30 s, or batchTimeout when shorter.
    await f.q.send("jobs", { type: "E", payload: 2, key: "k2" });
    await f.q.tick("jobs");
    const d = await p.batch({ batchTimeout: "10s", handler });
    assert.equal(d.limits?.statementTimeoutMs, 10_000);
    assert.deepEqual(seen, [60_000, 10_000]);
    // A run's budget ends the batch sooner: the statement timeout follows the
    // deadline (plus 2 s), and every batch report says which bound applied.
    await c.subscribe();
    await f.q.send("jobs", { type: "E", payload: 3, key: "k3" });
    const limits: unknown[] = [];
    const stop = f.q.observe({ on: (e) => void (e.type === "batch.committed" && limits.push(e.report.limits)) });
    const r = await c.run({ budgetMs: 1_000, statementTimeout: "30s", handler });
    stop();
    assert.equal(r.events, 1);
    const got = seen[2]!;
    // budget 1 s + grace 2 s = the deadline; the statement timeout ends 2 s past it.
    assert.ok(got > 2_000 && got <= 5_000, `statement_timeout under a 1 s budget: ${got} ms`);
    const l = limits[0] as { by: string; statementTimeoutMs: number; deadlineMs: number };
    assert.equal(l.by, "budget");
    assert.equal(l.statementTimeoutMs, got);
    assert.equal(l.statementTimeoutMs, l.deadlineMs + 2_000);
  },
};

/** Every case, for `pooled` drivers with the multi-worker ones. */
export function batchCases(pooled: boolean): Case[] {
  const kinds: KindName[] = ["plain", "exclusive", "ordered-skip", "ordered-pause"];
  return [
    ...kinds.map((k) => swallowCase(k, 1)),
    ...(pooled ? [swallowCase("exclusive", 3), swallowCase("ordered-skip", 2)] : []),
    ...kinds.map(savepointCase),
    ...kinds.map(callsCase),
    manyRunsCase,
    hungCase,
    timeoutCase,
  ];
}
