// Fault tests on a PRIVATE cluster (tests/helpers/faults.ts), per driver
// with interactive transactions: hung and slow handlers, and handlers still
// sleeping when their session dies (default and fenced mode). Handler starts
// and ends are recorded in the handlers themselves; committed effects in a
// table written through `tx`. Bun.SQL runs under Bun only.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyq, KeyqError } from "../mod.ts";
import { crashes, drivers, faultHooks, kill, noCluster, overlaps, runtime, T, withSetup } from "./helpers/faults.ts";
import { sleep } from "./helpers/sync.ts";

faultHooks();

for (const d of drivers) {
  const skip = noCluster || d.skip;
  describe(`faults: ${d.label} on ${runtime} (private cluster)`, () => {
    test("hung and slow handlers: run() settles by its budget and deadline; another worker takes the key after the batch is gone, no overlap", {
      skip,
      timeout: T,
    }, async () => {
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
      const only = fenced && !d.faults.reconnects &&
        "fenced mode needs a pool of at least 2 connections (its lease commits in a transaction of its own); a one-connection driver refuses it with INVALID_INPUT (tests/unit/fenced.test.ts)";
      test(`a handler still sleeping when its session dies (${mode}): no new handler of the dead batch, no two calls of one key at once`, {
        skip: skip || only,
        timeout: T,
      }, async () => {
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
