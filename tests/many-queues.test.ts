// What one consumer's run() costs must not depend on how many queues the
// schema holds: every statement touches its own queue's partitions only.
// Plan-independent evidence: the relations a statement's plan opens are
// locked until its transaction ends, so the relation locks held at the end
// of each transaction of a run() count the tables and indexes it planned
// over. A statement on the partitioned parent with the queue id as a
// parameter plans (and locks) every queue's partitions; this test fails then.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Executor, Keyq, Row, SqlParam, TxDriver } from "../mod.ts";
import { keyq } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { type PgFixture, withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

// Tables only: planning also locks every index of the tables it plans over,
// and the engine's per-queue reads are prepared once a session
// (prepared_call), so whether a run plans them (its connection's first use)
// or executes a kept plan changes its index locks, not its tables.
const LOCKS = `select count(*)::int as n from pg_catalog.pg_locks l join pg_catalog.pg_class c on c.oid = l.relation
                where l.pid = pg_catalog.pg_backend_pid() and l.locktype = 'relation' and c.relkind in ('r', 'p')`;

/** A driver that counts the relation locks each transaction holds at its end (autocommit statements run as one). */
function lockCounting(inner: TxDriver): { driver: TxDriver; counts: number[] } {
  const counts: number[] = [];
  const tally = async (tx: Executor) => void counts.push(Number((await tx.query(LOCKS))[0]!.n));
  const transaction = <T>(fn: (tx: Executor) => Promise<T>): Promise<T> =>
    inner.transaction(async (tx) => {
      const out = await fn(tx);
      await tally(tx);
      return out;
    });
  const driver: TxDriver = {
    name: inner.name,
    connections: inner.connections,
    query: (text: string, params?: readonly SqlParam[]): Promise<Row[]> => transaction((tx) => tx.query(text, params)),
    transaction,
  };
  return { driver, counts };
}

type Kind = "plain" | "exclusive" | "ordered";

/** A consumer of queue q0 of `kind` in a schema holding `queues` queues; the locks of its second run(). */
async function locksOfRun(f: PgFixture, queues: number, kind: Kind): Promise<{ max: number; mean: number; transactions: number; events: number }> {
  for (let i = 0; i < queues; i++) await f.q.createQueue(`q${i}`, { rotationPeriod: "1 hour" });
  const { driver, counts } = lockCounting(f.q.driver);
  const q: Keyq = keyq(driver, { schema: f.schema });
  const consumer = (c: Keyq) => kind === "plain" ? c.consumer("q0", "c") : kind === "exclusive" ? c.exclusive("q0", "c") : c.ordered("q0", "c", { slots: 4 });
  await consumer(f.q).subscribe();
  const ten = Array.from({ length: 10 }, (_, j) => ({ type: "T", key: `k${j}`, payload: { j } }));
  const run = (c: Keyq) =>
    kind === "ordered"
      ? (consumer(c) as ReturnType<Keyq["ordered"]>).run({ worker: 0, workers: 1, handler: () => {} })
      : (consumer(c) as ReturnType<Keyq["consumer"]>).run({ handler: () => {} });
  await f.q.sendBatch("q0", ten);
  await run(f.q); // first run: whatever a first run sets up
  await f.q.sendBatch("q0", ten);
  const report = await run(q);
  try {
    const total = counts.reduce((a, b) => a + b, 0);
    return { max: Math.max(...counts), mean: Math.round((10 * total) / counts.length) / 10, transactions: counts.length, events: report.events };
  } finally {
    // One queue a transaction, so the schema's drop stays small.
    for (let i = 0; i < queues; i++) await f.q.dropQueue(`q${i}`);
  }
}

describe("a run's cost does not grow with the number of queues", () => {
  for (const kind of ["plain", "exclusive", "ordered"] as const) {
    test(`${kind}: the relation locks of one run() are the same with 2 and 40 queues`, { skip }, async () => {
      const few = await withPg({ max: 2 }, (f) => locksOfRun(f, 2, kind));
      const many = await withPg({ max: 2 }, (f) => locksOfRun(f, 40, kind));
      assert.equal(few.events, 10, "the run with 2 queues handled its 10 events");
      assert.equal(many.events, 10, "the run with 40 queues handled its 10 events");
      assert.ok(few.transactions > 0 && few.max > 0, "the counting driver saw the run's transactions");
      // How many transactions a run takes varies (a due tick, a maintenance
      // step, a slot looked at twice), so the totals are not compared; per
      // transaction, a statement that plans over every queue's partitions
      // adds at least 38 queues x 3 ring tables (measured on the old engine:
      // max 296/313/294 against 30/48/29).
      const msg = `relation locks per run (max and mean per transaction): 40 queues ${JSON.stringify(many)} vs 2 queues ${JSON.stringify(few)}`;
      assert.ok(many.max <= few.max + 2, msg);
      assert.ok(many.mean <= few.mean * 1.2 + 2, msg);
    });
  }
});

/** The relation locks of status() (one statement) and of each transaction of maintain() over all `queues` queues. */
async function locksOfOps(
  f: PgFixture,
  queues: number,
): Promise<{ status: number; statusPages: number; statusOne: number; maintainMax: number; maintainTx: number; reports: number }> {
  for (let i = 0; i < queues; i++) {
    await f.q.createQueue(`q${i}`, { rotationPeriod: "1 hour" });
    await f.q.consumer(`q${i}`, "c").subscribe();
  }
  try {
    const s = lockCounting(f.q.driver);
    const reported = await keyq(s.driver, { schema: f.schema }).status();
    assert.deepEqual(reported.map((r) => r.queue), Array.from({ length: queues }, (_, i) => `q${i}`).sort(), "every queue once, in name order");
    const statusPages = s.counts.length;
    assert.equal((await keyq(s.driver, { schema: f.schema }).status({ queue: "q0" })).length, 1);
    const m = lockCounting(f.q.driver);
    const reports = await keyq(m.driver, { schema: f.schema }).maintain();
    return {
      status: Math.max(...s.counts.slice(0, statusPages)),
      statusPages,
      statusOne: s.counts[statusPages]!,
      maintainMax: Math.max(...m.counts),
      maintainTx: m.counts.length,
      reports: reports.length,
    };
  } finally {
    for (let i = 0; i < queues; i++) await f.q.dropQueue(`q${i}`);
  }
}

describe("status() and maintain() grow no faster than the queues they report on", () => {
  test(
    "status() reads pages of 100 queues, one statement each (one queue's: flat); maintain() is a transaction per queue, as small with 120 queues as with 2",
    {
      skip,
    },
    async () => {
      const few = await withPg({ max: 2 }, (f) => locksOfOps(f, 2));
      const many = await withPg({ max: 2 }, (f) => locksOfOps(f, 120));
      const msg = `locks: 120 queues ${JSON.stringify(many)} vs 2 queues ${JSON.stringify(few)}`;
      // status(): every reported queue keeps its partitions locked until the
      // statement's transaction ends (about 8 relations), so one statement
      // over 1,000 queues filled the shared lock table ("out of shared
      // memory"); pages of 100 queues, each its own statement, bound it.
      assert.equal(few.statusPages, 1, msg);
      assert.equal(many.statusPages, 2, msg);
      assert.ok(many.status / 100 <= (few.status / 2) * 1.2, msg);
      // status of one queue: that queue's relations only, however many others there are.
      assert.ok(many.statusOne <= few.statusOne + 2, msg);
      // maintain(): the queue list, then one call per queue, each touching its own queue only.
      assert.equal(many.reports, 120, msg);
      assert.equal(many.maintainTx, few.maintainTx + 118, msg);
      // The largest of 120 transactions against the largest of 2: one
      // queue's maintenance varies by a few locks (a CI run on PostgreSQL 18
      // saw 23 against 20), while one more queue touched costs its 9
      // relations, so the bound stays below that.
      assert.ok(many.maintainMax <= few.maintainMax + 8, msg);
    },
  );
});
