// Fault tests on a PRIVATE cluster (tests/helpers/faults.ts), per driver
// with interactive transactions: backends killed at each step of a batch,
// and an immediate stop + start with work() loops running. Hung and slow
// handlers, and handlers still sleeping when their session dies:
// tests/faults-handlers.test.ts. Handler starts and ends are recorded in the
// handlers themselves; committed effects in a table written through `tx`.
// The shared server on 5432 is never touched. Bun.SQL runs under Bun only.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyq } from "../mod.ts";
import {
  cluster,
  crashes,
  doneStats,
  drivers,
  faultHooks,
  finish,
  kill,
  noCluster,
  open,
  restartTimes,
  runtime,
  side,
  STEPS,
  T,
  withSetup,
} from "./helpers/faults.ts";
import { sleep } from "./helpers/sync.ts";

faultHooks();

for (const d of drivers) {
  const skip = noCluster || d.skip;
  describe(`faults: ${d.label} on ${runtime} (private cluster)`, () => {
    test("backend killed at each step of a batch: the batch rejects, no handler of it starts after the kill, nothing lost or doubled, no crash", {
      skip,
      timeout: T,
    }, async () => {
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
          assert.ok(
            !(result && typeof result === "object" && "events" in result && Number(result.events) > 0),
            `${step}: the dead batch reported no committed event (${JSON.stringify(result)})`,
          );
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
        ids.push(
          ...(await (async () => {
            for (let i = 0;; i++) {
              try {
                return await sent(60, (i) => `k${i % 10}`);
              } catch (err) {
                if (i > 50) throw err;
                await sleep(100);
              }
            }
          })()),
        );
        for (let i = 0; (await doneStats(schema)).d < ids.length; i++) {
          assert.deepEqual(early, [], "no work() loop gave up");
          assert.ok(
            i < 600,
            `only ${(await doneStats(schema)).d} of ${ids.length} handled 60 s after the restart (retries: ${JSON.stringify(retries.slice(-5))})`,
          );
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
        console.log(
          `faults: ${d.label} on ${runtime}: server restart → first event handled: ${firstAfterRestart - restartedAt} ms; events per loop after the restart: ${
            afterRestart.join(", ")
          }; retries reported: ${retries.length} (${[...new Set(retries.map((r) => r.code))].join(", ")})`,
        );
        const stats = await doneStats(schema);
        assert.deepEqual(stats, { n: ids.length, d: ids.length }, "every sent event committed exactly once");
        const handled = await side(`select ev_id::text as id from "${schema}".done order by ev_id`);
        assert.deepEqual(handled.map((r) => r.id), [...ids].sort((a, b) => Number(a) - Number(b)), "the committed ids are the sent ids");
        assert.ok(retries.length > 0, "the loops met the outage and reported their retries");
        assert.ok(
          afterRestart[0]! > 0 && afterRestart[1]! > 0,
          `every loop resumed by itself (${afterRestart.join(", ")} events after the restart; retries ${retriesBy.join(", ")})`,
        );
        assert.deepEqual(crashes, [], "no uncaught exception or unhandled rejection");
      });
    });
  });
}
