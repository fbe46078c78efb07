// Fault tests on a PRIVATE cluster (tests/helpers/cluster.ts), per driver
// with interactive transactions: backends killed at each step of a batch,
// an immediate stop + start with work() loops running, hung and slow
// handlers, and handlers still sleeping when their session dies (default
// and fenced mode). Handler starts and ends are recorded in the handlers
// themselves; committed effects in a table written through `tx`.
// The shared server on 5432 is never touched. Bun.SQL runs under Bun only.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import postgres from "postgres";
import { keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { type Cluster, pgBinDir, startCluster } from "./helpers/cluster.ts";
import { freshSchema } from "./helpers/db.ts";
import { type DriverSpec, driverSpecs, type Opened, runtimeName, teardownNeon } from "./helpers/drivers.ts";
import { type Defer, scoped } from "./helpers/scope.ts";
import { sleep, terminate } from "./helpers/sync.ts";

const runtime = runtimeName();
let noCluster: string | false = false;
try {
  pgBinDir();
} catch (err) {
  noCluster = (err as Error).message;
  if (process.env.CI) throw err; // CI must never skip the fault tests
}

/** The drivers of the one list (tests/helpers/drivers.ts) that the fault tests run, opened for faults. */
type FaultDriver = DriverSpec & { faults: { reconnects: boolean } };
const drivers = driverSpecs.filter((d): d is FaultDriver => d.faults !== undefined);
const open = (d: FaultDriver, url: string) => d.open(url, { faults: true });

let cluster: Cluster | undefined;
let admin: postgres.Sql | undefined;
const crashes: unknown[] = [];
const onCrash = (err: unknown) => void crashes.push(err);

before(async () => {
  if (noCluster) return;
  cluster = await startCluster();
  admin = postgres(cluster.url, { max: 2, idle_timeout: 2, connect_timeout: 5, onnotice: () => {} });
  process.on("uncaughtException", onCrash);
  process.on("unhandledRejection", onCrash);
});

after(async () => {
  if (Object.keys(restartTimes).length) console.log(`faults: server restart → first event handled (ms): ${JSON.stringify(restartTimes)}`);
  process.off("uncaughtException", onCrash);
  process.off("unhandledRejection", onCrash);
  await admin?.end({ timeout: 1 });
  await teardownNeon();
  await cluster?.destroy();
});

/** Runs `text` on the side connection, retrying while the server restarts. */
async function side(text: string, params: (string | number | null)[] = []): Promise<Record<string, unknown>[]> {
  for (let i = 0;; i++) {
    try {
      return [...(await admin!.unsafe(text, params as never[]))];
    } catch (err) {
      if (i >= 100) throw err;
      await sleep(100);
    }
  }
}

/** A migrated schema with queue "jobs", exclusive consumer "w" (subscribed) and a `done` table. */
async function setup(): Promise<{ schema: string; sent: (n: number, keyOf: (i: number) => string) => Promise<string[]> }> {
  const schema = freshSchema("kf");
  const q = keyq(fromPostgresJs(admin!), { schema });
  await q.migrate();
  await q.createQueue("jobs", { retryBase: 50, retryCap: 200 });
  // Consumers start at "latest": "w" exists before anything is sent.
  await q.exclusive("jobs", "w").subscribe();
  await side(`create table "${schema}".done (ev_id bigint, key text, worker int)`);
  let n = 0;
  return {
    schema,
    sent: async (count, keyOf) => {
      const out = await q.sendBatch("jobs", Array.from({ length: count }, () => ({ type: "E", payload: n, key: keyOf(n++) })));
      return out.map((o) => o.id);
    },
  };
}

async function drop(schema: string): Promise<void> {
  await side(`drop schema if exists "${schema}" cascade`);
}

/** `setup()` for the body; the schema is dropped after the body's own cleanups (close clients with `client()`). */
function withSetup<T>(d: FaultDriver, body: (s: Awaited<ReturnType<typeof setup>>, client: () => Promise<Opened>, defer: Defer) => Promise<T>): Promise<T> {
  return scoped(async (defer) => {
    const s = await setup();
    defer(() => drop(s.schema));
    const client = async () => {
      const opened = await open(d, cluster!.url);
      defer(() => opened.close());
      return opened;
    };
    return await body(s, client, defer);
  });
}

/** Kills `pid` from the side connection and waits until it is gone. */
const kill = (pid: unknown): Promise<void> => terminate(side, String(pid));

async function doneStats(schema: string): Promise<{ n: number; d: number }> {
  const [r] = await side(`select count(*)::int as n, count(distinct ev_id)::int as d from "${schema}".done`);
  return { n: Number(r!.n), d: Number(r!.d) };
}

/** Runs batches on fresh clients until `want` events are committed. */
async function finish(d: FaultDriver, schema: string, want: number, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  await scoped(async (defer) => {
    const { driver, close } = await open(d, cluster!.url);
    defer(close);
    const c = keyq(driver, { schema }).exclusive("jobs", "w", { deferDelay: 20 });
    while ((await doneStats(schema)).d < want) {
      assert.ok(Date.now() < until, `only ${(await doneStats(schema)).d} of ${want} events committed`);
      await c.run({
        budgetMs: 2_000,
        handler: async (ev, tx) => void (await tx.query(`insert into "${schema}".done values ($1::bigint, $2, 9)`, [ev.id, ev.key])),
      }).catch(() => {});
      await sleep(50);
    }
  });
}

/** True when two [start, end] intervals of the list overlap. */
function overlaps(intervals: { start: number; end: number }[]): number {
  let n = 0;
  for (let i = 0; i < intervals.length; i++) {
    for (let j = i + 1; j < intervals.length; j++) {
      const a = intervals[i]!;
      const b = intervals[j]!;
      if (a.start < b.end && b.start < a.end) n++;
    }
  }
  return n;
}

/** Per-test bound, so one hang fails its test instead of the whole file. */
const T = 120_000;

const STEPS = ["after receive", "in the handler", "right before COMMIT"] as const;
const restartTimes: Record<string, number> = {};

for (const d of drivers) {
  const skip = noCluster || d.skip;
  describe(`faults: ${d.label} on ${runtime} (private cluster)`, () => {
    test("backend killed at each step of a batch: the batch rejects, no handler of it starts after the kill, nothing lost or doubled, no crash", { skip, timeout: T }, async () => {
      for (const step of STEPS) {
        await withSetup(d, async ({ schema, sent }, client) => {
          const { driver } = await client();
          const ids = await sent(3, () => "K");
          const c = keyq(driver, { schema }).exclusive("jobs", "w");
          await c.subscribe();
          let killed = false;
          let startsAfterKill = 0;
          let calls = 0;
          const result = await c.run({
            maxEvents: 3,
            handler: async (ev, tx) => {
              if (killed) startsAfterKill++;
              const call = ++calls;
              const last = call === 3;
              if (step !== "after receive" || call > 1) {
                await tx.query(`insert into "${schema}".done values ($1::bigint, $2, 1)`, [ev.id, ev.key]);
              }
              const target = step === "right before COMMIT" ? last : call === 1;
              if (!target) return;
              const [row] = await tx.query("select pg_backend_pid()::text as pid");
              await kill(row!.pid);
              killed = true;
              if (step === "in the handler") {
                await tx.query(`insert into "${schema}".done values ($1::bigint, $2, 1)`, [ev.id, ev.key]);
              } else {
                await sleep(300); // let the driver notice; then return normally
              }
            },
          }).then((r) => r, (err: unknown) => err);
          assert.ok(killed, `${step}: the kill happened`);
          assert.ok(!(result && typeof result === "object" && "events" in result && Number(result.events) > 0), `${step}: the dead batch reported no committed event (${JSON.stringify(result)})`);
          assert.equal(startsAfterKill, 0, `${step}: no handler of the dead batch started after the kill`);
          assert.deepEqual(await doneStats(schema), { n: 0, d: 0 }, `${step}: nothing of the dead batch committed`);
          if (d.faults.reconnects) {
            // The same client carries on.
            const again: string[] = [];
            for (let i = 0; i < 20 && again.length < 3; i++) {
              await c.run({
                handler: async (ev, tx) => {
                  await tx.query(`insert into "${schema}".done values ($1::bigint, $2, 2)`, [ev.id, ev.key]);
                  again.push(ev.id);
                },
              }).catch(() => {});
              if (again.length < 3) await sleep(100);
            }
            assert.deepEqual(again, ids, `${step}: the same client handled the events again, in order`);
          } else {
            await finish(d, schema, 3);
          }
          assert.deepEqual(await doneStats(schema), { n: 3, d: 3 }, `${step}: every event committed once`);
        });
      }
      assert.deepEqual(crashes, [], "no uncaught exception or unhandled rejection");
    });

    test("pg_ctl stop -m immediate, then start, with work() loops running: every loop resumes by itself, 0 lost, 0 duplicates, no crash", {
      skip: skip || (!d.faults.reconnects && "one pg Client cannot reconnect: a worker on it ends with its connection (use a Pool)"),
      timeout: T,
    }, async () => {
      await withSetup(d, async ({ schema, sent }, _client, defer) => {
        const workers = await Promise.all([0, 1].map(() => open(d, cluster!.url)));
        defer(() => Promise.all(workers.map((w) => w.close().catch(() => {}))));
        const ctl = new AbortController();
        defer(() => ctl.abort());
        const calls = [0, 0];
        const afterRestart = [0, 0];
        const retriesBy = [0, 0];
        const retries: { code: string; attempt: number; delayMs: number }[] = [];
        let restartedAt = 0;
        let firstAfterRestart = 0;
        const ids = await sent(60, (i) => `k${i % 10}`);
        await keyq(workers[0]!.driver, { schema }).exclusive("jobs", "w").subscribe();
        const loops = workers.map(({ driver }, w) =>
          keyq(driver, { schema }).exclusive("jobs", "w", { deferDelay: 20 }).work({
            signal: ctl.signal,
            minPollMs: 20,
            maxPollMs: 200,
            maxEvents: 5,
            // A batch begun while the server restarts can hang in the driver (seen with
            // postgres.js under Deno and Bun) until the batch deadline rescues it: keep it short.
            batchTimeout: "5s",
            retryBackoff: { baseMs: 50, capMs: 500 },
            onRetry: ({ error, attempt, delayMs }) => {
              const e = error as { code?: unknown; message?: unknown };
              retries.push({ code: String(e?.code ?? e?.message), attempt, delayMs });
              retriesBy[w]!++;
            },
            handler: async (ev, tx) => {
              calls[w]!++;
              if (restartedAt) {
                afterRestart[w]!++;
                firstAfterRestart ||= Date.now();
              }
              await tx.query(`insert into "${schema}".done values ($1::bigint, $2, $3::int)`, [ev.id, ev.key, String(w)]);
              await sleep(5);
            },
          })
        );
        const early: string[] = [];
        const settled = loops.map((p) =>
          p.then(() => "resolved", (err: unknown) => {
            const e = err as { code?: unknown };
            early.push(`rejected: ${String(err)} (code ${String(e?.code)})`);
            return early.at(-1)!;
          })
        );
        for (let i = 0; (await doneStats(schema)).d < 15; i++) {
          assert.ok(i < 200, "the loops started handling");
          await sleep(50);
        }
        await cluster!.stopImmediate();
        await sleep(700);
        await cluster!.start();
        restartedAt = Date.now();
        ids.push(...(await (async () => {
          for (let i = 0;; i++) {
            try {
              return await sent(60, (i) => `k${i % 10}`);
            } catch (err) {
              if (i > 50) throw err;
              await sleep(100);
            }
          }
        })()));
        for (let i = 0; (await doneStats(schema)).d < ids.length; i++) {
          assert.deepEqual(early, [], "no work() loop gave up");
          assert.ok(i < 600, `only ${(await doneStats(schema)).d} of ${ids.length} handled 60 s after the restart (retries: ${JSON.stringify(retries.slice(-5))})`);
          await sleep(100);
        }
        // One loop may have been starved by the other (it was backing off while the other took
        // every key): offer more work until each loop has handled something since the restart.
        for (let i = 0; afterRestart.some((n) => n === 0) && i < 40; i++) {
          ids.push(...(await sent(10, (i) => `k${i % 10}`)));
          await sleep(300);
        }
        for (let i = 0; (await doneStats(schema)).d < ids.length; i++) {
          assert.ok(i < 300, `only ${(await doneStats(schema)).d} of ${ids.length} handled`);
          await sleep(100);
        }
        ctl.abort();
        assert.deepEqual(await Promise.all(settled), ["resolved", "resolved"], "both work() loops resolved on their signal");
        restartTimes[`${d.label} on ${runtime}`] = firstAfterRestart - restartedAt;
        console.log(`faults: ${d.label} on ${runtime}: server restart → first event handled: ${firstAfterRestart - restartedAt} ms; events per loop after the restart: ${afterRestart.join(", ")}; retries reported: ${retries.length} (${[...new Set(retries.map((r) => r.code))].join(", ")})`);
        const stats = await doneStats(schema);
        assert.deepEqual(stats, { n: ids.length, d: ids.length }, "every sent event committed exactly once");
        const handled = await side(`select ev_id::text as id from "${schema}".done order by ev_id`);
        assert.deepEqual(handled.map((r) => r.id), [...ids].sort((a, b) => Number(a) - Number(b)), "the committed ids are the sent ids");
        assert.ok(retries.length > 0, "the loops met the outage and reported their retries");
        assert.ok(afterRestart[0]! > 0 && afterRestart[1]! > 0, `every loop resumed by itself (${afterRestart.join(", ")} events after the restart; retries ${retriesBy.join(", ")})`);
        assert.deepEqual(crashes, [], "no uncaught exception or unhandled rejection");
      });
    });

    test("hung and slow handlers: run() settles by its budget and deadline; another worker takes the key after the batch is gone, no overlap", { skip, timeout: T }, async () => {
      await withSetup(d, async ({ schema, sent }, client) => {
        const a = await client();
        const b = await client();
        const qa = keyq(a.driver, { schema });
        const qb = keyq(b.driver, { schema });
        await qa.exclusive("jobs", "w").subscribe();
        // budgetMs bounds run(): 200 ms handlers, a 2 s budget.
        await sent(30, (i) => `b${i}`);
        let t = Date.now();
        const budget = await qa.exclusive("jobs", "w").run({ budgetMs: 2_000, handler: () => sleep(200) });
        const budgetMs = Date.now() - t;
        console.log(`faults: ${d.label} on ${runtime}: run({ budgetMs: 2000 }) with a 200 ms handler returned after ${budgetMs} ms (${budget.events} events)`);
        assert.ok(budgetMs < 2_000 + 200 + 1_500, `run() returned within its budget plus one call (${budgetMs} ms)`);
        assert.ok(budget.events >= 5 && budget.events <= 12, `it stopped starting events at the budget (${budget.events})`);
        const rest = await qa.exclusive("jobs", "w").run({ budgetMs: 10_000, handler: () => {} });
        assert.equal(budget.events + rest.events, 30, "the rest came in the next run");
        // A slow handler that honours its signal, and one that never settles.
        for (const kind of ["slow", "hung"] as const) {
          await sent(1, () => `K-${kind}`);
          const calls: { w: string; start: number; end: number }[] = [];
          t = Date.now();
          const first = qa.exclusive("jobs", "w").run({
            batchTimeout: 1_000,
            handler: (_ev, _tx, ctx) => {
              const call = { w: "a", start: Date.now(), end: Infinity };
              calls.push(call);
              if (kind === "hung") return new Promise<void>(() => {}); // never settles, ignores its signal
              return new Promise<void>((resolve) => {
                const done = () => {
                  call.end = Date.now();
                  resolve();
                };
                if (ctx.signal.aborted) return done();
                const timer = setTimeout(done, 30_000);
                ctx.signal.addEventListener("abort", () => {
                  clearTimeout(timer);
                  done();
                }, { once: true });
              });
            },
          }).then((r) => r, (err: unknown) => err);
          const firstResult = await first;
          const settledMs = Date.now() - t;
          assert.ok(settledMs < 1_000 + 2_500, `${kind}: run() settled by the batch deadline (${settledMs} ms)`);
          assert.ok(firstResult instanceof KeyqError && firstResult.code === "BATCH_ABORTED", `${kind}: the batch was aborted (${String(firstResult)})`);
          let took = 0;
          for (let i = 0; i < 50 && took === 0; i++) {
            const r = await qb.exclusive("jobs", "w").run({
              handler: () => {
                calls.push({ w: "b", start: Date.now(), end: Date.now() });
                took++;
              },
            });
            if (took === 0 && r.events === 0) await sleep(100);
          }
          assert.equal(took, 1, `${kind}: another worker took the event after the batch was gone`);
          if (kind === "slow") assert.equal(overlaps(calls), 0, `slow: no overlap (${JSON.stringify(calls)})`);
        }
        assert.deepEqual(crashes, [], "no uncaught exception or unhandled rejection");
      });
    });

    for (const fenced of [false, true]) {
      const mode = fenced ? "fenced mode, a handler that ignores its signal" : "default mode, a handler that honours its signal";
      const only = fenced && !d.faults.reconnects && "fenced mode needs a pool of at least 2 connections (its lease commits in a transaction of its own); a one-connection driver refuses it with INVALID_INPUT (tests/unit/fenced.test.ts)";
      test(`a handler still sleeping when its session dies (${mode}): no new handler of the dead batch, no two calls of one key at once`, { skip: skip || only, timeout: T }, async () => {
        const opts = fenced ? { fenced: true, deferDelay: 20 } : { deferDelay: 20 };
        await withSetup(d, async ({ schema, sent }, client) => {
          const a = await client();
          const b = await client();
          const qa = keyq(a.driver, { schema });
          const qb = keyq(b.driver, { schema });
          await qa.exclusive("jobs", "w", opts).subscribe();
          await sent(3, () => "K");
          const calls: { w: string; start: number; end: number; aborted?: boolean }[] = [];
          let killedAt = 0;
          let startsAfterKill = 0;
          const first = qa.exclusive("jobs", "w", opts).run({
            maxEvents: 3,
            batchTimeout: fenced ? 3_000 : 10_000,
            handler: async (_ev, tx, ctx) => {
              if (killedAt) startsAfterKill++;
              const call = { w: "a", start: Date.now(), end: Infinity, aborted: false };
              calls.push(call);
              const [row] = await tx.query("select pg_backend_pid()::text as pid");
              await kill(row!.pid);
              killedAt = Date.now();
              await new Promise<void>((resolve) => {
                if (!fenced && ctx.signal.aborted) {
                  call.aborted = true;
                  return resolve();
                }
                const timer = setTimeout(resolve, fenced ? 1_500 : 5_000);
                if (!fenced) {
                  ctx.signal.addEventListener("abort", () => {
                    call.aborted = true;
                    clearTimeout(timer);
                    resolve();
                  }, { once: true });
                }
              });
              call.end = Date.now();
            },
          }).then((r) => r, (err: unknown) => err);
          while (!killedAt) await sleep(10);
          let took = 0;
          const until = Date.now() + 15_000;
          while (took < 3 && Date.now() < until) {
            await qb.exclusive("jobs", "w", opts).run({
              handler: async () => {
                const call = { w: "b", start: Date.now(), end: Infinity };
                calls.push(call);
                await sleep(20);
                call.end = Date.now();
                took++;
              },
            }).catch(() => {});
            await sleep(50);
          }
          const result = await first;
          assert.ok(result instanceof Error, `the dead batch rejected (${JSON.stringify(result)})`);
          assert.equal(startsAfterKill, 0, "no handler of the dead batch started after the kill");
          assert.equal(took, 3, "the other worker handled the key's events");
          if (!fenced) assert.ok(calls[0]!.aborted, "the sleeping handler got its signal");
          const n = overlaps(calls);
          console.log(`faults: ${d.label} on ${runtime}: zombie test (${fenced ? "fenced" : "default"}): overlapping calls of one key: ${n}`);
          assert.equal(n, 0, `no two calls of key K overlap (${JSON.stringify(calls)})`);
          assert.deepEqual(crashes, [], "no uncaught exception or unhandled rejection");
        });
      });
    }
  });
}

