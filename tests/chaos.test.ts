// Chaos: many keys, concurrent workers, random handler failures and backend
// kills. Afterwards every event was handled or dead-lettered, none committed
// twice, no key ran on two workers at once, and (Tier B, pause) per-key order held.
//
// Workers use node-postgres: postgres.js 3.4.9 throws an uncatchable error
// when its backend is killed mid-transaction (porsager/postgres#1208).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pg from "pg";
import { type Keyq, keyq } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { sleep } from "./helpers/sync.ts";

const skip = await dbSkip();

describe("chaos", () => {
  for (const tier of ["exclusive", "ordered"] as const) {
    test(`${tier}: 2,000 events, 100 keys, 4 workers, random failures and kills`, { skip }, async () => {
      await withPg({ max: 2 }, async (f, defer) => {
        const app = `kq-chaos-${tier}`;
        const pools = Array.from({ length: 4 }, (_, i) => {
          const pool = new pg.Pool({ connectionString: f.url, application_name: `${app}-${i}`, max: 1 });
          pool.on("error", () => {});
          return pool;
        });
        defer(() => Promise.all(pools.map((p) => p.end())));
        await f.q.createQueue("q", { maxRetries: 3, retryBase: 5, retryCap: 20 });
        await f.raw(
          `create table "${f.schema}".effects (seq bigserial, ev_id bigint, key text, n int, worker int, started timestamptz, ended timestamptz)`,
        );
        const consumerOf = (q: Keyq) =>
          tier === "exclusive" ? q.exclusive<number>("q", "c", { deferDelay: 10 }) : q.ordered<number>("q", "c", { slots: 8, onFailure: "pause" });
        await consumerOf(f.q).subscribe();
        const N = 2000;
        await f.q.sendBatch("q", Array.from({ length: N }, (_, n) => ({ type: "E", payload: n, key: `k${(n * 13) % 100}` })));
        let stop = false;
        let kills = 0;
        let failures = 0;
        const killer = (async () => {
          while (!stop) {
            await sleep(50);
            const [r] = await f.raw(
              `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
                where application_name = $1 || '-' || (floor(random() * 4))::int and state <> 'idle'`,
              [app],
            );
            kills += Number(r!.n);
          }
        })();
        const deadline = Date.now() + 90_000;
        await Promise.all(pools.map(async (pool, w) => {
          const c = consumerOf(keyq(fromPg(pool), { schema: f.schema }));
          while (!stop) {
            try {
              await c.run({
                maxEvents: 25,
                budgetMs: 2_000,
                handler: async (ev, tx) => {
                  const [t] = await tx.query("select clock_timestamp()::text as t");
                  if (Math.random() < 0.05) {
                    failures++;
                    throw new Error("random failure");
                  }
                  await tx.query(
                    `insert into "${f.schema}".effects (ev_id, key, n, worker, started, ended)
                     values ($1::bigint, $2, $3::int, $4::int, $5::timestamptz, clock_timestamp())`,
                    [ev.id, ev.key, String(ev.payload), String(w), String(t!.t)],
                  );
                },
              });
            } catch { /* killed mid-batch: rolled back */ }
            const [s] = await f.raw(
              `select (select count(distinct ev_id) from "${f.schema}".effects)::int
                    + (select count(*) from "${f.schema}".dead_letter)::int as accounted,
                      (select count(*) from "${f.schema}".retry)::int as pending`,
            );
            if ((s!.accounted === N && s!.pending === 0) || Date.now() > deadline) stop = true;
            await sleep(5);
          }
        }));
        await killer;
        const [r] = await f.raw(
          `select (select count(*) from "${f.schema}".effects)::int as rows,
                  (select count(distinct ev_id) from "${f.schema}".effects)::int as handled,
                  (select count(*) from "${f.schema}".dead_letter)::int as dead,
                  (select count(*) from "${f.schema}".dead_letter d
                    where exists (select 1 from "${f.schema}".effects e where e.ev_id = d.ev_id))::int as both`,
        );
        const [overlaps] = await f.raw(
          `select count(*)::int as n from "${f.schema}".effects a join "${f.schema}".effects b
             on a.key = b.key and a.ev_id < b.ev_id and a.started < b.ended and b.started < a.ended`,
        );
        const [disorder] = await f.raw(
          `select count(*)::int as n from (select n < lag(n) over (partition by key order by seq) as bad
             from "${f.schema}".effects) x where bad`,
        );
        console.log(
          `chaos ${tier}: events=${N} handled=${r!.handled} deadLettered=${r!.dead} rows=${r!.rows} failures=${failures} kills=${kills} overlaps=${
            overlaps!.n
          } outOfOrder=${disorder!.n}`,
        );
        assert.equal(Number(r!.handled) + Number(r!.dead), N, "every event handled or dead-lettered");
        assert.equal(r!.both, 0, "nothing both handled and dead-lettered");
        assert.equal(r!.rows, r!.handled, "no event committed twice");
        assert.equal(overlaps!.n, 0, "no key on two workers at once");
        assert.ok(failures > 0 && kills > 0, `chaos happened (failures ${failures}, kills ${kills})`);
        if (tier === "ordered") assert.equal(disorder!.n, 0, "per-key order held (pause policy)");
      });
    });
  }
});
