// Network round trips, counted on the wire: every pooled driver (Neon's Pool
// through the local stand-in of its WebSocket proxy) talks to Postgres through a counting proxy (tests/helpers/wire-proxy.ts).
// One keyq statement is one round trip once its statement is prepared on the
// connection. BEGIN travels with the receive and a handler's SAVEPOINT with
// its first statement where the driver pipelines them (postgres.js on a
// reserved connection; pg and Neon through one Sync, see src/drivers/pg.ts):
// a batch of events with a no-op handler (plain, exclusive, ordered) costs 2
// round trips (BEGIN + receive, COMMIT). With pg and Neon, in a run that goes
// on, each COMMIT travels with the next batch's BEGIN and receive
// (Driver.chain): one round trip per batch, plus the last COMMIT. Bun.SQL
// (1.4.5) sends a text without values (BEGIN, COMMIT) by the simple protocol
// and waits for its answer before it sends anything else, so it pays 3; it
// does pipeline prepared statements issued together once each is prepared on
// the connection, so keyq's SAVEPOINT and RELEASE go to it as tagged
// (prepared) statements and travel with the handler's statement
// (src/drivers/bun-sql.ts).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import postgres from "postgres";
import { type Keyq, keyq } from "../mod.ts";
import { chainOf, type Executor, pairChain, type TxChain, type TxDriver } from "../src/driver.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { driverSpecs, runtimeName, setupNeon, teardownNeon } from "./helpers/drivers.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";
import { startWireProxy, type WireCounts, type WireProxy } from "./helpers/wire-proxy.ts";

const skip = await dbSkip();

interface Spec {
  label: string;
  skip: string | false;
  /** One connection, so warming up prepares every statement where it is used. */
  open(url: string): Promise<{ driver: TxDriver; close(): Promise<unknown> }>;
  /** Process-wide setup the driver needs first, and its undoing. */
  setup?(): Promise<void>;
  teardown?(): Promise<void>;
}

/** The pooled drivers of the one list (tests/helpers/drivers.ts), each opened on one connection; pg also in its own pipeline mode. */
const specs: Spec[] = driverSpecs.filter((d) => ["postgres-js", "pg-pool", "neon-pool", "bun-sql"].includes(d.id)).flatMap((d): Spec[] => {
  const spec: Spec = {
    label: d.label,
    skip: d.skip,
    open: (url) => d.open(url, { max: 1, idleTimeout: 5 }),
    ...(d.id === "neon-pool" ? { setup: setupNeon, teardown: teardownNeon } : {}),
  };
  if (d.id !== "pg-pool") return [spec];
  // pg's own pipeline mode (pg 8.23): it refuses the adapter's one-Sync query objects, and
  // sends queued queries at once instead (the adapter then issues BEGIN and SAVEPOINT without waiting).
  const pipelined: Spec = {
    label: "pg Pool, pipeline: true",
    skip: d.skip,
    open: (url) => {
      const pool = new pg.Pool({ connectionString: url, max: 1, pipeline: true } as pg.PoolConfig);
      return Promise.resolve({ driver: fromPg(pool), close: () => pool.end() });
    },
  };
  return [spec, pipelined];
});

const kinds = ["plain", "exclusive", "ordered"] as const;

/** Round trips of a no-op batch of 10 events, and of one whose 10 handlers write once through tx, measured. */
const BATCH: Record<string, { noop: number; writing: number }> = {
  "postgres.js": { noop: 2, writing: 12 },
  "pg Pool": { noop: 2, writing: 12 },
  "pg Pool, pipeline: true": { noop: 2, writing: 12 },
  "Neon Pool (WebSocket)": { noop: 2, writing: 12 },
  "Bun.SQL": { noop: 3, writing: 13 },
};

/**
 * Round trips of a warm run() of 3 full batches and the empty look: the
 * run's start (start_run), then BEGIN + receive of each batch with the
 * previous batch's COMMIT in the same write (pg and Neon: one Sync;
 * postgres.js: one write on its reserved connection), and the last COMMIT
 * alone: 1 + 4 + 1 on pg and Neon. postgres.js and Bun.SQL have no chain
 * here (see their adapters): 1 + 4 × 2 = 9 and 1 + 4 × 3 = 13. Before
 * (2026-12-02 main: tick and maintain apart, no chain): 2 + 4 × 2 = 10
 * (Bun.SQL 2 + 4 × 3 = 14).
 */
const RUN: Record<string, number> = {
  "postgres.js": 9,
  "pg Pool": 6,
  "pg Pool, pipeline: true": 6,
  "Neon Pool (WebSocket)": 6,
  "Bun.SQL": 13,
};

/**
 * Round trips of a cold run() on a server that trusts the client (see
 * `authTurns`), measured: connection start, the run's start (subscribe,
 * tick and maintenance in one statement, start_run), the batches (Tier B
 * with 4 slots: one a slot, 2 round trips each) and, for Tier B only, the
 * empty look that ends the run. A plain batch that is not full read
 * everything ticked (window_take goes on into newer windows), and a Tier A
 * batch that found no free chunk says `drained`: run() ends there.
 * Before: postgres.js 18/17/26 and pg and Neon 10/10/16 (main of
 * 2026-12-01); postgres.js 9/9/13, pg and Neon 5/5/7 and Bun.SQL 10/10/16
 * with the empty look (stop 28). Now: connection start (1), start_run (1),
 * BEGIN + the first receive (1), each further batch with the previous
 * COMMIT (1), the last COMMIT (1): pg and Neon 4/4/4. Tier B took a batch
 * per slot (4 slots: 3 more, 7) until its batch went on to the next slots
 * while it had room, and says `drained` when it read every free slot to
 * its end. Above that, measured per turn (the wire proxy's turns()):
 * postgres.js has no chain (a reserved connection kept between batches
 * crashed postgres.js 3.4 in nextWrite under pg_ctl stop -m immediate in 1
 * of 2 runs of tests/faults.test.ts), so each batch pays its COMMIT; it
 * also pays a type query when it connects (its fetch_types option, the
 * user's client) and, for each of the two statements with values
 * (start_run, the receive), a Parse/Describe/Flush turn before
 * Bind/Execute/Sync on their first use on the connection: postgres.js 3.4
 * describes every statement with parameters that is not yet prepared
 * first (connection.js: describeFirst = parameters.length && !prepared,
 * whatever `prepare` and the types passed): 7/7/7 (Tier B 13 with a
 * batch per slot). Bun.SQL (1.4.5)
 * prepares the same two with a Parse/Describe/Sync turn of their own and
 * sends BEGIN and COMMIT alone (simple protocol, each waited for):
 * 7/7/7 (Tier B 16 with a batch per slot). Sending start_run or the receive by the simple protocol would
 * save their describe turns, but only with values spliced into the SQL
 * text; keyq keeps every value a bind parameter.
 */
/**
 * Round trips a connection start costs beyond the one of a server that
 * trusts the client: a password exchange (md5: one more; SCRAM: two more),
 * as the embedded PostgreSQL 18 of the suite asks. COLD counts the trusting
 * case; a pg Client's bare connect through the proxy measures the rest.
 */
async function authTurns(proxy: WireProxy): Promise<number> {
  proxy.reset();
  const c = new pg.Client({ connectionString: proxy.url });
  await c.connect();
  const n = proxy.counts().roundTrips;
  await c.end();
  return n - 1;
}

const COLD: Record<string, Record<(typeof kinds)[number], number>> = {
  "postgres.js": { plain: 7, exclusive: 7, ordered: 7 },
  "pg Pool": { plain: 4, exclusive: 4, ordered: 4 },
  "pg Pool, pipeline: true": { plain: 4, exclusive: 4, ordered: 4 },
  "Neon Pool (WebSocket)": { plain: 4, exclusive: 4, ordered: 4 },
  "Bun.SQL": { plain: 7, exclusive: 7, ordered: 7 },
};
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
  const measured = async <T>(run: () => Promise<T>): Promise<T> => {
    const before = proxy.counts();
    try {
      return await run();
    } finally {
      const now = proxy.counts();
      done(Object.fromEntries(Object.entries(now).map(([k, v]) => [k, v - before[k as keyof WireCounts]])) as unknown as WireCounts);
    }
  };
  const transaction = <T>(fn: (tx: Executor) => Promise<T>): Promise<T> => measured(() => driver.transaction(fn));
  // A chained run's batch: from its BEGIN to its COMMIT's answer (which shares a turn with the next batch's receive).
  const chain = (): TxChain => {
    const c = chainOf(driver)!;
    return { transaction: (fn, held) => measured(() => c.transaction(fn, held)), end: () => c.end() };
  };
  return { ...driver, transaction, ...(chainOf(driver) ? { chain: pairChain(transaction, chain) } : {}) };
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
      await spec.setup?.();
      const opened = await spec.open(proxy.url);
      close = opened.close;
      q = keyq(counted(opened.driver, proxy, (c) => (lastTx = c)), { schema: f.schema });
      await f.q.createQueue("jobs");
      for (const k of kinds) await consumer(f.q, k).subscribe();
      // Warm up: the connection is open and keyq's statements are prepared on it.
      await q.send("jobs", { type: "Warm", payload: 0, key: "w" });
      for (const k of kinds) await consumer(q, k).run({ maxBatches: 1, handler: () => {} });
      for (const k of kinds) await consumer(q, k).run({ handler: () => {} });
    });

    after(async () => {
      await close?.();
      await spec.teardown?.();
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
      if (spec.label !== "Neon Pool (WebSocket)") assert.equal(c.waits, 5, show(c));
      else assert.equal(c.writes, 5, show(c));
    });

    for (const kind of kinds) {
      test(`${kind}: a batch of 10 events with a no-op handler takes ${BATCH[spec.label]!.noop} round trips`, async () => {
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
        assert.equal(n.roundTrips, BATCH[spec.label]!.noop, show(n));
      });
    }

    test(`plain: a run of 3 batches of 10 events with a no-op handler takes ${RUN[spec.label]} round trips (each COMMIT travels with the next receive where the driver chains transactions)`, async () => {
      const c = consumer(q, "plain");
      await c.run({ handler: () => {} }); // what earlier tests left, uncounted
      await f.q.sendBatch("jobs", Array.from({ length: 30 }, (_, i) => ({ type: "E", payload: i, key: `r${i}` })));
      await f.q.tick("jobs", { force: true });
      proxy.reset();
      const r = await c.run({ maxEvents: 10, handler: () => {} });
      const all = proxy.counts();
      console.log(`${spec.label} on ${runtimeName()}: plain run() of ${r.batches} batches, ${r.events} events = ${show(all)}`);
      assert.equal(r.events, 30);
      assert.equal(r.batches, 3);
      assert.equal(all.roundTrips, RUN[spec.label], show(all));
    });

    test(`exclusive: a batch of 10 events whose handler writes once through tx takes ${BATCH[spec.label]!.writing} round trips (each SAVEPOINT travels with the statement where the driver allows)`, async () => {
      const c = consumer(q, "exclusive");
      const handler = async (ev: { payload: unknown }, tx: Executor) => void (await tx.query("select $1::int", [String(ev.payload)]));
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `v${i}` })));
      await c.run({ handler }); // what earlier tests left, and the statements of this one prepared on the connection
      await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `w${i}` })));
      proxy.reset();
      lastTx = undefined;
      // The statement, and the event's savepoint (and the previous one's RELEASE): in the same write with
      // postgres.js, pg and Neon (12 = BEGIN + receive, 10 statements, COMMIT; before: 13, 23, 23);
      // a round trip of its own with Bun.SQL (23).
      const r = await c.run({ maxBatches: 1, maxEvents: 100, handler });
      const n = lastTx!;
      console.log(`${spec.label} on ${runtimeName()}: exclusive batch of ${r.events} events, one statement each through tx = ${show(n)}`);
      assert.equal(r.events, 10);
      assert.equal(n.roundTrips, BATCH[spec.label]!.writing, show(n));
    });

    for (const kind of kinds) {
      test(`cold invocation: fresh connection, fresh client, one run() of a ${kind} consumer with 10 waiting events`, async () => {
        const name = `cold_${kind}`;
        const make = (
          k: Keyq,
        ) => (kind === "plain" ? k.consumer("jobs", name) : kind === "exclusive" ? k.exclusive("jobs", name) : k.ordered("jobs", name, { slots: 4 }));
        await make(f.q).subscribe();
        await make(f.q).run({ handler: () => {} }); // nothing left from earlier tests
        await f.q.sendBatch("jobs", Array.from({ length: 10 }, (_, i) => ({ type: "E", payload: i, key: `c${i}` })));
        let seen = 0;
        const auth = await authTurns(proxy);
        proxy.reset();
        const opened = await spec.open(proxy.url);
        try {
          const r = await make(keyq(opened.driver, { schema: f.schema })).run({ handler: () => void seen++ });
          const c = proxy.counts();
          console.log(`${spec.label} on ${runtimeName()}: cold ${kind} run() of ${r.events} events (connection start included) = ${show(c)}`);
          assert.equal(seen, 10);
          assert.equal(r.events, 10);
          assert.equal(c.roundTrips, COLD[spec.label]![kind] + auth, `${show(c)}; the server's authentication took ${auth} extra`);
        } finally {
          await opened.close();
        }
      });
    }
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
