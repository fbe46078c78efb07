/**
 * Tier A (exclusive consumer) cases for the conformance suite: two workers
 * share one keyq client over the driver's pool, so every batch transaction of
 * each worker runs on its own pooled connection. They prove G2 by observation:
 * every event handled exactly once, no two handler intervals of one key
 * overlapping, and a worker stuck on a key blocking nobody.
 */
import assert from "node:assert/strict";
import type { Case } from "./basic.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

export const tierACases: Case[] = [
  {
    name: "Tier A: 2 workers on the driver's pool handle every event once, never one key at the same time",
    async run(f) {
      const N = 200;
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "migrator").subscribe();
      await f.raw(`create table "${f.schema}".log (ev_id bigint, key text, worker int, started timestamptz, ended timestamptz)`);
      await f.q.sendBatch("jobs", Array.from({ length: N }, (_, i) => ({ type: "Migrate", payload: i, key: `tenant-${i % 10}` })));
      const handledBy = [0, 0];
      const deadline = Date.now() + 20_000;
      await Promise.all([0, 1].map(async (w) => {
        const c = f.q.exclusive<number>("jobs", "migrator", { deferDelay: 20 });
        while (Date.now() < deadline) {
          const r = await c.run({
            maxEvents: 10,
            budgetMs: 5_000,
            handler: async (ev, tx) => {
              const [t] = await tx.query("select clock_timestamp()::text as t");
              await sleep(1);
              await tx.query(
                `insert into "${f.schema}".log values ($1::bigint, $2, $3::int, $4::timestamptz, clock_timestamp())`,
                [ev.id, ev.key, String(w), String(t!.t)],
              );
            },
          });
          handledBy[w]! += r.events;
          if (handledBy[0]! + handledBy[1]! >= N) break;
          if (r.events === 0) await sleep(10);
        }
      }));
      const [stats] = await f.raw(`select count(*)::int as n, count(distinct ev_id)::int as d from "${f.schema}".log`);
      const [overlaps] = await f.raw(
        `select count(*)::int as n from "${f.schema}".log a join "${f.schema}".log b
           on a.key = b.key and a.ev_id < b.ev_id and a.started < b.ended and b.started < a.ended`,
      );
      assert.equal(stats!.d, N, "every event handled");
      assert.equal(stats!.n, N, "each exactly once");
      assert.equal(overlaps!.n, 0, "no two handler intervals of one key overlap");
      assert.equal(await f.q.dlq.count(), 0);
    },
  },
  {
    name: "Tier A: while one worker holds a key, the other is not blocked: it defers that key (no retry spent) and handles the rest",
    async run(f) {
      await f.q.createQueue("jobs");
      await f.q.exclusive("jobs", "m").subscribe();
      await f.q.send("jobs", { type: "Held", payload: 0, key: "K" });
      const handled: string[] = [];
      const stuck = gate();
      const inside = gate();
      const opts = { deferDelay: 50 };
      const a = f.q.exclusive("jobs", "m", opts).run({
        maxEvents: 1,
        maxBatches: 1,
        handler: async (ev) => {
          inside.open();
          await stuck.wait;
          handled.push(`${ev.type}:${ev.retry}`);
        },
      });
      await inside.wait;
      // Chunks are cut by key, so a key contends only across windows: the rest comes in the
      // window after the one A holds "Held" from.
      await f.q.sendBatch("jobs", [
        { type: "Contended", payload: 1, key: "K" },
        ...Array.from({ length: 20 }, (_, i) => ({ type: "Free", payload: i, key: `k${i}` })),
      ]);
      const started = Date.now();
      const b = await f.q.exclusive("jobs", "m", opts).run({
        maxEvents: 1,
        budgetMs: 5_000,
        handler: (ev) => void handled.push(`${ev.type}:${ev.retry}`),
      });
      assert.ok(Date.now() - started < 4_000, "the second worker was not blocked by the first");
      assert.equal(b.events, 20, `the other keys were handled meanwhile (${b.events})`);
      assert.ok(b.deferred >= 1, `the contended event was deferred (${b.deferred})`);
      assert.ok(!handled.includes("Contended:0"), "never handled while another worker held K");
      stuck.open();
      await a;
      const until = Date.now() + 5_000;
      while (!handled.includes("Contended:0") && Date.now() < until) {
        await sleep(60);
        await f.q.exclusive("jobs", "m", opts).run({ maxEvents: 5, handler: (ev) => void handled.push(`${ev.type}:${ev.retry}`) });
      }
      assert.equal(handled.filter((h) => h.startsWith("Contended")).join(), "Contended:0", "handled once, no retry spent");
      assert.equal(handled.length, 22, "every event handled once");
    },
  },
];
