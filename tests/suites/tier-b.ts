/**
 * Tier B (ordered consumer) and `work()` cases for drivers with several
 * connections: two workers share one keyq client over the driver's pool.
 * Used by tests/pooler.test.ts, where every transaction goes through a
 * transaction-mode PgBouncer.
 */
import assert from "node:assert/strict";
import type { Case } from "./basic.ts";
import { sleep } from "../helpers/sync.ts";

export const tierBCases: Case[] = [
  {
    name: "Tier B: 2 workers over 4 slots deliver every event once, in send order per key, each from its key's slot",
    async run(f) {
      const N = 120;
      await f.q.createQueue("files");
      const c0 = f.q.ordered<number>("files", "indexer", { slots: 4 });
      await c0.subscribe();
      await f.raw(`create table "${f.schema}".log (seq bigserial, ev_id bigint, key text, n int, slot int)`);
      await f.q.sendBatch("files", Array.from({ length: N }, (_, n) => ({ type: "E", payload: n, key: `tenant-${(n * 7) % 9}` })));
      const handled = { n: 0 };
      const deadline = Date.now() + 60_000; // a bound for a broken run, not a speed check
      await Promise.all([0, 1].map(async () => {
        const c = f.q.ordered<number>("files", "indexer", { slots: 4 });
        while (handled.n < N && Date.now() < deadline) {
          const r = await c.run({
            maxEvents: 15,
            budgetMs: 5_000,
            handler: async (ev, tx) => {
              await tx.query(`insert into "${f.schema}".log (ev_id, key, n, slot) values ($1::bigint, $2, $3::int, $4::int)`, [
                ev.id,
                ev.key,
                String(ev.payload),
                String(ev.slot),
              ]);
            },
          });
          handled.n += r.events;
          if (r.events === 0) await sleep(20); // the other worker holds the slot, or nothing is due yet
        }
      }));
      const rows = await f.raw(`select key, n, slot from "${f.schema}".log order by seq`);
      assert.equal(rows.length, N, "every event handled once");
      assert.equal(new Set(rows.map((r) => r.n)).size, N, "no event twice");
      const byKey = new Map<string, number[]>();
      for (const r of rows) byKey.set(String(r.key), [...(byKey.get(String(r.key)) ?? []), Number(r.n)]);
      for (const [key, ns] of byKey) {
        assert.deepEqual(ns, [...ns].sort((a, b) => a - b), `key ${key} in send order`);
        const slots = new Set(rows.filter((r) => r.key === key).map((r) => Number(r.slot)));
        assert.deepEqual([...slots], [await c0.slotOf(key)], `key ${key} only from its slot`);
      }
    },
  },
  {
    name: "work(): 2 loops on the driver's pool consume what arrives while they run, once each, and stop on their signal",
    async run(f) {
      const N = 60;
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "w").subscribe();
      await f.raw(`create table "${f.schema}".done (ev_id bigint, key text, started timestamptz, ended timestamptz)`);
      const ctl = new AbortController();
      let seen = 0;
      const loops = [0, 1].map(() =>
        f.q.exclusive<number>("jobs", "w", { deferDelay: 20 }).work({
          signal: ctl.signal,
          minPollMs: 10,
          maxPollMs: 50,
          maxEvents: 5,
          handler: async (ev, tx) => {
            const [t] = await tx.query("select clock_timestamp()::text as t");
            await sleep(2);
            await tx.query(`insert into "${f.schema}".done values ($1::bigint, $2, $3::timestamptz, clock_timestamp())`, [
              ev.id,
              ev.key,
              String(t!.t),
            ]);
            if (++seen >= N) ctl.abort();
          },
        })
      );
      for (let i = 0; i < N; i += 10) {
        await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, j) => ({ type: "E", payload: i + j, key: `k${(i + j) % 6}` })));
        await sleep(30);
      }
      const timer = setTimeout(() => ctl.abort(), 30_000);
      const reports = await Promise.all(loops);
      clearTimeout(timer);
      const [stats] = await f.raw(`select count(*)::int as n, count(distinct ev_id)::int as d from "${f.schema}".done`);
      const [overlaps] = await f.raw(
        `select count(*)::int as n from "${f.schema}".done a join "${f.schema}".done b
           on a.key = b.key and a.ev_id < b.ev_id and a.started < b.ended and b.started < a.ended`,
      );
      assert.equal(stats!.d, N, "every event handled");
      assert.equal(stats!.n, N, "each once");
      assert.equal(overlaps!.n, 0, "no key in two handlers at once");
      assert.equal(reports[0]!.events + reports[1]!.events, N, "the reports count every committed event");
    },
  },
];
