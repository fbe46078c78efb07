// Network round trips, counted on the wire: every pooled driver (Neon's Pool
// through the local stand-in of its WebSocket proxy) talks to Postgres through a counting proxy (tests/helpers/wire-proxy.ts).
// One keyq statement is one round trip once its statement is prepared on the
// connection; a batch of events with a no-op handler (plain, exclusive,
// ordered) costs at most 3 round trips (BEGIN, receive, COMMIT).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import postgres from "postgres";
import { type Keyq, keyq } from "../mod.ts";
import type { Executor, TxDriver } from "../src/driver.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { driverSpecs, runtimeName, teardownNeon } from "./helpers/drivers.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";
import { startWireProxy, type WireCounts, type WireProxy } from "./helpers/wire-proxy.ts";

const skip = await dbSkip();

/** The pooled drivers of the one list (tests/helpers/drivers.ts), each opened on one connection. */
const specs = driverSpecs.filter((d) => ["postgres-js", "pg-pool", "neon-pool", "bun-sql"].includes(d.id));

const kinds = ["plain", "exclusive", "ordered"] as const;
type Kind = (typeof kinds)[number];

function consumer(q: Keyq, kind: Kind) {
  return kind === "plain" ? q.consumer("jobs", "p") : kind === "exclusive" ? q.exclusive("jobs", "x") : q.ordered("jobs", "o", { slots: 1 });
}

/**
 * The driver, with each transaction's wire counts reported to `done` (the
 * run's own statements outside the batch — subscribe, tick, maintain — are
 * not the batch's). One connection and one run at a time, so nothing else is
 * on the wire meanwhile.
 */
function counted(driver: TxDriver, proxy: WireProxy, done: (c: WireCounts) => void): TxDriver {
  return {
    ...driver,
    async transaction<T>(fn: (tx: Executor) => Promise<T>): Promise<T> {
      const before = proxy.counts();
      try {
        return await driver.transaction(fn);
      } finally {
        const now = proxy.counts();
        done(Object.fromEntries(Object.entries(now).map(([k, v]) => [k, v - before[k as keyof WireCounts]])) as unknown as WireCounts);
      }
    },
  };
}

const show = (c: WireCounts): string =>
  `${c.roundTrips} round trips (${c.waits} waits: Sync ${c.sync}, Query ${c.query}, Flush ${c.flush}; Parse ${c.parse}, Bind ${c.bind}; ${c.writes} writes)`;

for (const spec of specs) {
  describe(`round trips: ${spec.label} on ${runtimeName()}`, { skip: skip || spec.skip }, () => {
    let proxy: WireProxy;
    let f: Fixture;
    let q: Keyq;
    let close: () => Promise<unknown>;
    let lastTx: WireCounts | undefined;

    before(async () => {
      const url = await requireDatabase();
      f = await pgFixture({ max: 2 });
      proxy = await startWireProxy(url);
      // One connection, so warming up prepares every statement where it is used;
      // Neon's Pool: a WebSocket to the local stand-in of Neon's proxy, which opens TCP to the counting proxy.
      const opened = await spec.open(proxy.url, { max: 1, idleTimeout: 5 });
      close = opened.close;
      q = keyq(counted(opened.driver, proxy, (c) => (lastTx = c)), { schema: f.schema });
      await f.q.createQueue("jobs");
      for (const k of kinds) await consumer(f.q, k).subscribe();
      // Warm up: the connection is open and keyq's statements are prepared on it;
      // past the first transactions' COMMIT check (postgres.js with prepare: true).
      await q.send("jobs", { type: "Warm", payload: 0, key: "w" });
      for (const k of kinds) await consumer(q, k).run({ maxBatches: 1, handler: () => {} });
      // postgres.js with prepare: true checks the COMMIT of its first 100 transactions that write.
      for (let i = 0; i < 102; i++) {
        await f.q.send("jobs", { type: "Warm", payload: i, key: "w" });
        await consumer(q, kinds[i % 3]!).run({ maxBatches: 1, handler: () => {} });
        if (i === 3) console.log(`${spec.label} on ${runtimeName()}: an early batch of 1 event (postgres.js with prepare: true checks its first 100 COMMITs) = ${show(lastTx!)}`);
      }
      for (const k of kinds) await consumer(q, k).run({ handler: () => {} });
    });

    after(async () => {
      await close?.();
      await teardownNeon();
      await proxy?.stop();
      await f?.close();
    });

    test("send: one round trip per statement", async () => {
      proxy.reset();
      for (let i = 0; i < 5; i++) await q.send("jobs", { type: "E", payload: i, key: `k${i}` });
      const c = proxy.counts();
      console.log(`${spec.label} on ${runtimeName()}: 5 sends = ${show(c)}`);
      assert.equal(c.roundTrips, 5, show(c));
      // No Parse/Describe/Flush exchange before the Bind. Neon's Pool (pg's
      // protocol code over a WebSocket) writes a Flush with every Sync, in the
      // same write: one turn each, which the round-trip count above checks.
      if (spec.id !== "neon-pool") assert.equal(c.waits, 5, show(c));
      else assert.equal(c.writes, 5, show(c));
    });

    for (const kind of kinds) {
      test(`${kind}: a batch of 10 events with a no-op handler takes at most 3 round trips`, async () => {
        const c = consumer(q, kind);
        await c.run({ handler: () => {} }); // what earlier tests left, uncounted
        await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `b${i}` })));
        let seen = 0;
        proxy.reset();
        // Tier B with one slot and Tier A both take all 10 (distinct keys) in one batch.
        lastTx = undefined;
        const r = await c.run({ maxBatches: 1, maxEvents: 100, handler: () => void seen++ });
        const all = proxy.counts();
        const n = lastTx!;
        console.log(`${spec.label} on ${runtimeName()}: ${kind} batch of ${r.events} events = ${show(n)}; the whole run() = ${show(all)}`);
        assert.equal(r.events, 10, "one batch took the 10 events");
        assert.equal(seen, 10);
        assert.ok(n.roundTrips <= 3, show(n));
      });
    }

    test("exclusive: a batch of 10 events whose handler writes once through tx: its savepoints cost postgres.js no round trip, the others at most one per event", async () => {
      const c = consumer(q, "exclusive");
      const handler = async (ev: { payload: unknown }, tx: Executor) => void (await tx.query("select $1::int", [String(ev.payload)]));
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `v${i}` })));
      await c.run({ handler }); // what earlier tests left, and the statements of this one prepared on the connection
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `w${i}` })));
      proxy.reset();
      lastTx = undefined;
      // The statement, and the event's savepoint: in the same write with postgres.js (13 round trips
      // measured, as without savepoints); a round trip of its own with pg, Neon and Bun.SQL (23).
      const r = await c.run({ maxBatches: 1, maxEvents: 100, handler });
      const n = lastTx!;
      console.log(`${spec.label} on ${runtimeName()}: exclusive batch of ${r.events} events, one statement each through tx = ${show(n)}`);
      assert.equal(r.events, 10);
      assert.ok(n.roundTrips <= (spec.label === "postgres.js" ? 3 + 10 : 3 + 2 * 10), show(n));
    });
  });
}

test(`round trips: postgres.js with prepare: false (the pooler opt-out) prepares nothing on ${runtimeName()}`, { skip }, async () => {
  const url = await requireDatabase();
  const f = await pgFixture({ max: 1 });
  const proxy = await startWireProxy(url);
  const sql = postgres(proxy.url, { max: 1, prepare: false, idle_timeout: 5, onnotice: () => {} });
  try {
    const q = keyq(fromPostgresJs(sql), { schema: f.schema });
    await f.q.createQueue("jobs");
    await q.send("jobs", { type: "Warm", payload: 0 });
    proxy.reset();
    for (let i = 0; i < 3; i++) await q.send("jobs", { type: "E", payload: i });
    const c = proxy.counts();
    console.log(`postgres.js prepare: false on ${runtimeName()}: 3 sends = ${show(c)}`);
    // Unnamed statements every time: Parse/Describe/Flush, then Bind/Execute/Sync.
    assert.equal(c.parse, 3, show(c));
    assert.equal(c.roundTrips, 6, show(c));
  } finally {
    await sql.end({ timeout: 2 });
    await proxy.stop();
    await f.close();
  }
});

test("postgres.js adapter: names the first 200 distinct statement texts, then sends new texts unnamed", async () => {
  const seen: { text: string; prepare?: boolean }[] = [];
  const q = (text: string, _p?: unknown[], o?: { prepare?: boolean }) => {
    seen.push({ text, prepare: o?.prepare });
    const res = Promise.resolve([{ r: "1" }]);
    return Object.assign(res, { simple: () => res });
  };
  const fake = { unsafe: q, typed: (v: string) => v, begin: () => Promise.reject(new Error("unused")) };
  const d = fromPostgresJs(fake as never);
  for (let i = 0; i < 205; i++) await d.query(`select $1::text as r${i}`, ["x"]);
  await d.query("select $1::text as r0", ["x"]); // named before: stays named
  await d.query("select 1"); // no parameters: the simple protocol
  assert.deepEqual(seen.slice(0, 200).map((s) => s.prepare), Array(200).fill(true));
  assert.deepEqual(seen.slice(200, 205).map((s) => s.prepare), Array(5).fill(false));
  assert.equal(seen[205]!.prepare, true);
  assert.equal(seen[206]!.prepare, undefined);
});
