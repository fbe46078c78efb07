// Tier B: what a read costs (rows read per delivered event) and a crash
// mid-batch, shown with real connections (split from tests/ordered.test.ts).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pg from "pg";
import { keyq } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import type { Fixture } from "./helpers/keyq.ts";
import { withPg } from "./helpers/fixture.ts";
import { gate, terminate } from "./helpers/sync.ts";

const skip = await dbSkip();

/** Rows read from the queue's event tables (sequential + index fetches), after stats are flushed. */
async function rowsRead(f: Fixture): Promise<number> {
  await f.raw("select pg_stat_clear_snapshot()");
  const [r] = await f.raw(
    `select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint::text as n
       from pg_stat_user_tables where schemaname = $1 and relname like 'event\\_%'`,
    [f.schema],
  );
  return Number(r!.n);
}

describe("Tier B: ordered consumer, costs and crashes", () => {
  test("read amplification: rows read per delivered event at N = 1, 4, 8, 16 (≤ 1.5 at N = 8)", { skip }, async () => {
    const results: Record<number, number> = {};
    for (const n of [1, 4, 8, 16]) {
      await withPg({ max: 1 }, async (f) => {
        await f.q.createQueue("files");
        const c = f.q.ordered("files", "idx", { slots: n });
        await c.subscribe();
        const E = 4000;
        for (let i = 0; i < E; i += 1000) {
          await f.q.sendBatch("files", Array.from({ length: 1000 }, (_, j) => ({ type: "E", payload: i + j, key: `tenant-${(i + j) % 200}` })));
        }
        await f.raw(`analyze "${f.schema}".event`);
        await f.raw("select pg_stat_force_next_flush()");
        await f.raw("select 1");
        const before = await rowsRead(f);
        let delivered = 0;
        for (let round = 0; round < 50 && delivered < E; round++) {
          delivered += (await c.run({ maxEvents: 100, handler: () => {} })).events;
        }
        await f.raw("select pg_stat_force_next_flush()");
        await f.raw("select 1");
        const after = await rowsRead(f);
        assert.equal(delivered, E);
        results[n] = (after - before) / delivered;
      });
    }
    console.log(`read amplification (rows read per delivered event): ${Object.entries(results).map(([n, r]) => `N=${n}: ${r.toFixed(3)}`).join(", ")}`);
    assert.ok(results[8]! <= 1.5, `N = 8 reads ${results[8]} rows per event`);
  });

  // node-postgres for the victim: postgres.js 3.4.9 crashes the process when
  // its backend is killed mid-transaction (porsager/postgres#1208).
  test("crash mid-batch: the slot is free at once; nothing lost or duplicated in the database", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const pool = new pg.Pool({ connectionString: f.url, application_name: "kq-victim", max: 1 });
      pool.on("error", () => {});
      defer(() => pool.end());
      await f.q.createQueue("files");
      await f.raw(`create table "${f.schema}".side (ev_id bigint primary key)`);
      const opts = { slots: 2 };
      await f.q.ordered("files", "idx", opts).subscribe();
      await f.q.sendBatch("files", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: "tenant-1" })));
      const victim = keyq(fromPg(pool), { schema: f.schema }).ordered("files", "idx", opts);
      const inside = gate();
      const killed = gate();
      let pid = "";
      const run = victim.run({
        maxEvents: 4,
        handler: async (ev, tx) => {
          await tx.query(`insert into "${f.schema}".side values ($1::bigint)`, [ev.id]);
          pid = String((await tx.query("select pg_backend_pid()::text as p"))[0]!.p);
          inside.open();
          await killed.wait;
          await tx.query("select 1"); // the connection is gone: the batch fails here
        },
      });
      await inside.wait;
      await terminate(f.raw, pid);
      killed.open();
      await assert.rejects(run);
      const order: number[] = [];
      const r = await f.q.ordered<number>("files", "idx", opts).run({
        maxEvents: 4,
        handler: async (ev, tx) => {
          order.push(ev.payload);
          await tx.query(`insert into "${f.schema}".side values ($1::bigint)`, [ev.id]);
        },
      });
      assert.equal(r.events, 10, "the slot was free at once and nothing was lost");
      assert.deepEqual(order, Array.from({ length: 10 }, (_, i) => i), "in order");
      const [side] = await f.raw(`select count(*)::int as n from "${f.schema}".side`);
      assert.equal(side!.n, 10, "no duplicate effects");
    });
  });
});
