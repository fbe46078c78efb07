// A woken worker's tick travels with its batch (Driver.transactionAfter):
// on postgres.js, an idle listening worker (plain, Tier A, Tier B) that hears
// a producer's commit writes the tick (Tier A: tick and plan) in the same
// network write as its batch's BEGIN and receive, so the wake-up costs two
// round trips on the wire (tick + BEGIN + receive, COMMIT), not three. The
// server commits the tick before BEGIN, so the receive reads its window.
// Counted on the wire by the counting proxy (tests/helpers/wire-proxy.ts);
// bench/wakeups.ts measures the milliseconds.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import postgres from "postgres";
import { keyq, type LifecycleEvent } from "../mod.ts";
import { leadOf } from "../src/driver.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { FULL_RUN_MS, loopTuning } from "../src/kinds/loop.ts";
import { dbSkip, dropSchema, freshSchema, requireDatabase } from "./helpers/db.ts";
import { startWireProxy, type WireProxy } from "./helpers/wire-proxy.ts";

const skip = await dbSkip();
const url = skip ? "" : await requireDatabase();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !ok();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

type Kind = "plain" | "exclusive" | "ordered";

describe("a woken worker's tick goes with its batch's BEGIN", { skip }, () => {
  let proxy: WireProxy;
  before(async () => {
    proxy = await startWireProxy(url);
    // No periodic full run (start_run with maintenance) inside what is counted.
    loopTuning.fullRunMs = 10 * 60_000;
  });
  after(async () => {
    loopTuning.fullRunMs = FULL_RUN_MS;
    await proxy.stop();
  });

  test("postgres.js offers it for its own transaction only", () => {
    const sql = postgres(url, { max: 1 });
    const d = fromPostgresJs(sql);
    assert.ok(leadOf(d), "the adapter's transactionAfter");
    assert.equal(leadOf({ ...d, transaction: (fn) => d.transaction(fn) }), undefined, "a wrapper that replaces transaction is not bypassed");
    return sql.end();
  });

  test("postgres.js: the lead's statement commits on its own, before BEGIN; one issued late is refused", async () => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const table = `lead_${process.pid}_${Date.now()}`;
    try {
      const d = fromPostgresJs(sql);
      const after = leadOf(d)!;
      await d.query(`create table ${table} (v text)`);
      // The transaction rolls back; the lead's insert, its own transaction, stays.
      const led: Promise<unknown>[] = [];
      await assert.rejects(
        after((exec) => led.push(exec.query(`insert into ${table} values ($1::text)`, ["lead"])), async (tx) => {
          const seen = await tx.query(`select count(*)::text as n from ${table}`);
          assert.equal(seen[0]!.n, "1", "the transaction sees the lead's committed row");
          await tx.query(`insert into ${table} values ($1::text)`, ["tx"]);
          throw new Error("roll back");
        }),
        /roll back/,
      );
      await Promise.all(led);
      assert.deepEqual((await d.query(`select v from ${table}`)).map((r) => r.v), ["lead"]);
      // A lead statement issued after the transaction's first statement would run inside it: refused.
      let late: Promise<unknown> | undefined;
      await after((exec) => void setTimeout(() => (late = exec.query("select 1").then(() => "ran", (e: Error) => e.message)), 0), async (tx) => {
        await tx.query("select 1");
        await new Promise((r) => setTimeout(r, 5));
      });
      assert.match(String(await late), /before the transaction's first statement/);
      // A transaction that ran no statement hands its connection back once the lead answered.
      await after((exec) => exec.query(`insert into ${table} values ($1::text)`, ["alone"]), async () => {});
      assert.deepEqual((await d.query(`select v from ${table} order by v`)).map((r) => r.v), ["alone", "lead"]);
    } finally {
      await sql.unsafe(`drop table if exists ${table}`).catch(() => {});
      await sql.end({ timeout: 2 });
    }
  });

  for (const kind of ["plain", "exclusive", "ordered"] as Kind[]) {
    test(`${kind}: a commit costs the worker two round trips, the tick in the first`, async () => {
      const schema = freshSchema();
      const admin = postgres(url, { max: 1, onnotice: () => {} });
      const worker = postgres(proxy.url, { max: 1, onnotice: () => {} });
      const ac = new AbortController();
      let run: Promise<unknown> | undefined;
      try {
        const q = keyq(fromPostgresJs(admin), { schema });
        await q.migrate();
        await q.createQueue("jobs");
        const of = (k: typeof q) =>
          kind === "plain" ? k.consumer("jobs", "w") : kind === "exclusive" ? k.exclusive("jobs", "w") : k.ordered("jobs", "w", { slots: 4 });
        await of(q).subscribe();
        const k = keyq(fromPostgresJs(worker), { schema });
        const events: LifecycleEvent[] = [];
        const handled: string[] = [];
        k.observe({ on: (e) => events.push(e) });
        // A minute between polls: only a notification brings an event within the test.
        run = of(k).work({ signal: ac.signal, minPollMs: 60_000, maxPollMs: 60_000, handler: (ev) => void handled.push(ev.id) });
        await until("the probe", () => events.some((e) => e.type === "work.mode"));
        assert.equal((events.find((e) => e.type === "work.mode") as { mode: string }).mode, "listen");
        await until("the first run", () => events.some((e) => e.type === "batch.committed"));
        await sleep(300);
        // Round 0 prepares the tick's statement on the connection (a Parse and a describe turn of its own).
        for (let round = 0; round < 4; round++) {
          proxy.reset();
          const { id } = await q.send("jobs", { type: "T", payload: round, key: `k${round}` });
          await until("the handler", () => handled.includes(id));
          await sleep(100); // a look after the COMMIT would show here
          if (round === 0) continue;
          const turns = proxy.turns();
          const shown = JSON.stringify(turns);
          assert.equal(proxy.counts().roundTrips, 2, `round trips of one wake-up: ${shown}`);
          // The tick (a prepared statement: its Bind) before BEGIN, then the receive's Bind: one write.
          const first = turns[0]!;
          const begin = first.findIndex((m) => m === "Q:begin");
          assert.ok(begin > 0, `BEGIN in the first turn, after the tick: ${shown}`);
          assert.ok(first.slice(0, begin).includes("B"), `the tick's Bind before BEGIN: ${shown}`);
          assert.ok(first.slice(begin).includes("B"), `the receive's Bind after BEGIN: ${shown}`);
          assert.deepEqual(turns[1], ["Q:commit"], `COMMIT alone in the second: ${shown}`);
        }
        assert.equal(handled.length, 4);
      } finally {
        ac.abort();
        await run;
        await worker.end({ timeout: 2 });
        await admin.end({ timeout: 2 });
        await dropSchema(url, schema);
      }
    });
  }
});
