// Wake-ups without waiting: an idle listening worker (plain, Tier A, Tier B)
// whose poll interval is a minute handles a new event with a few statements
// after the producer's commit notifies it: one tick, then the batch, with no
// maintenance, no second tick and no look at an empty batch. With three
// workers of one consumer in the process, the commit still brings one tick
// and one look (the herd: one wake-up per notification); a Tier B worker
// looks again only when a tick came while it held its slot, a Tier A worker
// never. Counted, not timed
// (bench/wakeups.ts measures the milliseconds).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import postgres from "postgres";
import { type Executor, type Keyq, keyq, type LifecycleEvent, type TxDriver } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { FULL_RUN_MS, loopTuning } from "../src/kinds/loop.ts";
import { dbSkip, dropSchema, freshSchema, requireDatabase } from "./helpers/db.ts";

const skip = await dbSkip();
const url = skip ? "" : await requireDatabase();

/** The driver with every statement logged by name: the engine function it calls, or BEGIN/COMMIT/SAVEPOINT. */
function logged(d: TxDriver, log: string[]): TxDriver {
  const name = (text: string) => /"\.(\w+)\(/.exec(text)?.[1] ?? text.trim().split(/\s+/)[0]!.toLowerCase();
  const wrap = (tx: Executor): Executor => ({
    query: (text, params) => (log.push(name(text)), tx.query(text, params)),
    ...(tx.savepoint ? { savepoint: <T>(fn: (sp: Executor) => Promise<T>) => (log.push("savepoint"), tx.savepoint!((sp) => fn(wrap(sp)))) } : {}),
    ...(tx.signal ? { signal: tx.signal } : {}),
  });
  const driver: TxDriver = {
    ...d,
    query: (text, params) => (log.push(name(text)), d.query(text, params)),
    transaction: <T>(fn: (tx: Executor) => Promise<T>) => (log.push("begin"), d.transaction((tx) => fn(wrap(tx))).finally(() => log.push("commit"))),
  };
  if (d.connections !== undefined) Object.assign(driver, { connections: d.connections });
  return driver;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !ok();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

/** A fresh schema with queue "jobs", worker connections made by `connect()`, and their work() loops; all ended after `fn`. */
async function withQueue(
  fullRunMs: number,
  fn: (env: { q: Keyq; schema: string; connect(): postgres.Sql; signal: AbortSignal; runs: Promise<unknown>[] }) => Promise<void>,
): Promise<void> {
  // The periodic full run (maintenance, once a second by default) must not fall inside a
  // counted wake-up on a loaded machine, where a round can take longer; or is due every time.
  loopTuning.fullRunMs = fullRunMs;
  const schema = freshSchema();
  const admin = postgres(url, { max: 1, onnotice: () => {} });
  const conns: postgres.Sql[] = [];
  const ac = new AbortController();
  const runs: Promise<unknown>[] = [];
  const connect = () => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    conns.push(sql);
    return sql;
  };
  try {
    const q = keyq(fromPostgresJs(admin), { schema });
    await q.migrate();
    await q.createQueue("jobs");
    await fn({ q, schema, connect, signal: ac.signal, runs });
  } finally {
    loopTuning.fullRunMs = FULL_RUN_MS;
    ac.abort();
    await Promise.all(runs);
    await Promise.all(conns.map((c) => c.end({ timeout: 2 })));
    await admin.end({ timeout: 2 });
    await dropSchema(url, schema);
  }
}

type Kind = "plain" | "exclusive" | "ordered";
const kinds: { kind: Kind; workers: number; full?: boolean }[] = [
  { kind: "plain", workers: 1 },
  { kind: "plain", workers: 1, full: true },
  { kind: "exclusive", workers: 1 },
  { kind: "exclusive", workers: 3 },
  { kind: "ordered", workers: 1 },
  { kind: "ordered", workers: 3 },
];

describe("wake-ups go straight to the read", { skip }, () => {
  for (const { kind, workers, full } of kinds) {
    const name = full
      ? `${kind}, ${workers} worker(s), a full run due at every wake-up: each one maintains too`
      : `${kind}, ${workers} worker(s): a commit brings a tick and one batch, nothing periodic`;
    test(name, async () => {
      await withQueue(full ? 0 : 10 * 60_000, async ({ q, schema, connect, signal, runs }) => {
        const of = (k: typeof q) =>
          kind === "plain" ? k.consumer("jobs", "w") : kind === "exclusive" ? k.exclusive("jobs", "w") : k.ordered("jobs", "w", { slots: 4 });
        await of(q).subscribe();
        const log: string[] = [];
        const events: LifecycleEvent[] = [];
        const handled: string[] = [];
        for (let i = 0; i < workers; i++) {
          const k = keyq(logged(fromPostgresJs(connect()), log), { schema });
          k.observe({ on: (e) => events.push(e) });
          // A minute between polls: only a notification can bring an event within the test.
          runs.push(of(k).work({ signal, minPollMs: 60_000, maxPollMs: 60_000, handler: (ev) => void handled.push(ev.id) }));
        }
        await until("every probe", () => events.filter((e) => e.type === "work.mode").length === workers);
        assert.deepEqual(events.filter((e) => e.type === "work.mode").map((e) => (e as { mode: string }).mode), Array(workers).fill("listen"));
        await until("the first runs", () => events.filter((e) => e.type === "batch.committed").length >= workers);
        await sleep(300);
        for (let round = 0; round < 3; round++) {
          const before = log.length;
          const { id } = await q.send("jobs", { type: "T", payload: round, key: `k${round}` });
          await until("the handler", () => handled.includes(id));
          await sleep(100); // the other workers' looks settle
          const after = log.slice(before);
          if (full) {
            // start_run: subscribe, tick and maintenance in one statement (maintain on its own before it).
            assert.equal(after.filter((s) => s === "maintain" || s === "start_run").length, 1, `a full run maintains: ${after.join(" ")}`);
            continue;
          }
          assert.equal(after.filter((s) => s === "maintain" || s === "start_run").length, 0, `no maintenance on a wake-up: ${after.join(" ")}`);
          const ticks = after.filter((s) => s === "tick" || s === "prepare_exclusive").length;
          // One commit, one tick: every worker hears the commit, the herd (src/observe/herd.ts) calls one
          // of them to tick, and the others need no plan of a tick their own consumer wrote and planned.
          assert.equal(ticks, 1, `ticks: ${after.join(" ")}`);
          if (process.env.SHOW) console.log(kind, workers, after.join(" "));
          const receives = after.filter((s) => s.startsWith("receive")).length;
          if (kind === "plain") {
            // One cursor: its batch reads up to the newest tick, so a batch that is not full ends the run.
            assert.deepEqual(after, ["tick", "begin", "receive_plain_rows", "commit"]);
          } else if (kind === "exclusive") {
            // The receive says it took the last free chunk (drained): no other worker is called, and no
            // tick came while the batch held its chunk, so nothing was passed over: no look after COMMIT.
            assert.deepEqual(after, ["prepare_exclusive", "begin", "receive_exclusive", "commit"]);
          } else {
            // The batch read every free slot to its end (drained): no other worker is called, and no
            // tick came while it held its slots, so no look after its COMMIT either; no worker wakes
            // for the notification of the tick its consumer wrote.
            assert.equal(receives, 1, `looks: ${after.join(" ")}`);
            assert.deepEqual(after, ["tick", "begin", "receive_ordered_rows", "commit"]);
          }
        }
        assert.equal(handled.length, 3);
        assert.ok(events.filter((e) => e.type === "work.woken").length >= 3);
      });
    });
  }
});

// A Tier B batch that read every free slot to its end holds them all until
// it ends (ordered_take locks each slot it visits). While it does, a
// producer's commit wakes no other worker of its consumer: that worker's
// tick and look would find every slot held (at 400 events/s, 4 workers over
// 8 slots, 4 of 10 batches were such empty looks). The commit waits until
// the batch ends; then an idle worker ticks for it and reads. Polls are a
// minute apart, so only that wake-up can bring the second event here.
describe("a commit that comes while a Tier B batch holds every slot", { skip }, () => {
  test("Tier B, 1 slot, 2 workers: nobody looks while the slot is held; once the batch ends, one look takes the event", async () => {
    await withQueue(10 * 60_000, async ({ q, schema, connect, signal, runs }) => {
      await q.ordered("jobs", "w", { slots: 1 }).subscribe();
      const events: LifecycleEvent[] = [];
      const handled: { payload: number; worker: number }[] = [];
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      for (let i = 0; i < 2; i++) {
        const k = keyq(fromPostgresJs(connect()), { schema });
        k.observe({ on: (e) => events.push(e) });
        const handler = async (ev: { payload: number }) => {
          handled.push({ payload: ev.payload, worker: i });
          if (ev.payload === 1) await gate; // holds the slot
        };
        runs.push(k.ordered<number>("jobs", "w", { slots: 1 }).work({ signal, minPollMs: 60_000, maxPollMs: 60_000, handler }));
      }
      const count = (type: LifecycleEvent["type"]) => events.filter((e) => e.type === type).length;
      await until("both probes", () => count("work.mode") === 2);
      await until("the first runs", () => count("batch.committed") >= 2);
      await sleep(300);
      await q.send("jobs", { type: "T", payload: 1, key: "a" });
      await until("the first handler", () => handled.length === 1);
      const started = count("batch.started");
      const woken = count("work.woken");
      const empty = () => events.filter((e) => e.type === "batch.committed" && e.report.events === 0).length;
      const emptyBefore = empty();
      await q.send("jobs", { type: "T", payload: 2, key: "b" }); // the same (only) slot, held
      await sleep(300);
      assert.equal(count("work.woken"), woken, "no worker was woken while the batch held every slot");
      assert.equal(count("batch.started"), started, "nobody looked at the held slot");
      assert.equal(handled.length, 1);
      release();
      await until("the second event, once the batch ended", () => handled.length === 2, 10_000);
      assert.equal(handled[1]!.payload, 2);
      await sleep(300);
      // The holder's batch ended; one look took the event, and none came back empty.
      assert.equal(count("batch.started") - started, 1, "one look after the batch ended");
      assert.equal(empty(), emptyBefore, "no empty look");
    });
  });
});

// Tier A needs no such look: the worker woken for the tick claims the new
// chunk even while an older chunk of its bucket is held (claim_chunk), and
// a drained batch holds no chunk with events left. So a tick heard while a
// batch runs brings no empty batch after its COMMIT (at 400 events/s such
// looks were 43 % of a 4-worker consumer's batches).
describe("a tick that comes while a Tier A batch runs", { skip }, () => {
  test("Tier A, 2 workers: the other worker takes the new event; the holder looks at nothing after its COMMIT", async () => {
    await withQueue(10 * 60_000, async ({ q, schema, connect, signal, runs }) => {
      await q.exclusive("jobs", "x").subscribe();
      const events: LifecycleEvent[][] = [[], []];
      const handled: { payload: number; worker: number }[] = [];
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      for (let i = 0; i < 2; i++) {
        const k = keyq(fromPostgresJs(connect()), { schema });
        k.observe({ on: (e) => events[i]!.push(e) });
        const handler = async (ev: { payload: number }) => {
          handled.push({ payload: ev.payload, worker: i });
          if (ev.payload === 1) await gate; // the batch runs on
        };
        runs.push(k.exclusive<number>("jobs", "x").work({ signal, minPollMs: 60_000, maxPollMs: 60_000, handler }));
      }
      const all = () => events.flat();
      const count = (i: number, type: LifecycleEvent["type"]) => events[i]!.filter((e) => e.type === type).length;
      await until("both probes", () => all().filter((e) => e.type === "work.mode").length === 2);
      await until("the first runs", () => all().filter((e) => e.type === "batch.committed").length >= 2);
      await sleep(300);
      await q.send("jobs", { type: "T", payload: 1, key: "a" });
      await until("the first handler", () => handled.length === 1);
      const holder = handled[0]!.worker;
      await q.send("jobs", { type: "T", payload: 2, key: "b" }); // a tick while the holder's batch runs
      await until("the second event, by the other worker", () => handled.length === 2, 10_000);
      assert.deepEqual(handled[1], { payload: 2, worker: 1 - holder }, "the worker woken for the tick took it");
      const started = count(holder, "batch.started");
      const committed = count(holder, "batch.committed");
      release();
      await until("the holder's COMMIT", () => count(holder, "batch.committed") === committed + 1, 10_000);
      await sleep(500);
      assert.equal(count(holder, "batch.started"), started, "no batch after the holder's COMMIT");
      assert.equal(handled.length, 2);
    });
  });
});
