// Wake-ups without waiting: an idle listening worker (plain, Tier A, Tier B)
// whose poll interval is a minute handles a new event with a few statements
// after the producer's commit notifies it: one tick, then the batch, with no
// maintenance, no second tick and no look at an empty batch. With three
// workers of one consumer in the process, the commit still brings one tick
// and at most three looks (the herd: one wake-up per notification). Counted,
// not timed (bench/wakeups.ts measures the milliseconds).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import postgres from "postgres";
import { type Executor, keyq, type LifecycleEvent, type TxDriver } from "../mod.ts";
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
      // The periodic full run (maintenance, once a second by default) must not fall inside a
      // counted wake-up on a loaded machine, where a round can take longer; or is due every time.
      loopTuning.fullRunMs = full ? 0 : 10 * 60_000;
      const schema = freshSchema();
      const admin = postgres(url, { max: 1, onnotice: () => {} });
      const conns: postgres.Sql[] = [];
      const ac = new AbortController();
      const runs: Promise<unknown>[] = [];
      try {
        const q = keyq(fromPostgresJs(admin), { schema });
        await q.migrate();
        await q.createQueue("jobs");
        const of = (k: typeof q) =>
          kind === "plain" ? k.consumer("jobs", "w") : kind === "exclusive" ? k.exclusive("jobs", "w") : k.ordered("jobs", "w", { slots: 4 });
        await of(q).subscribe();
        const log: string[] = [];
        const events: LifecycleEvent[] = [];
        const handled: string[] = [];
        for (let i = 0; i < workers; i++) {
          const sql = postgres(url, { max: 1, onnotice: () => {} });
          conns.push(sql);
          const k = keyq(logged(fromPostgresJs(sql), log), { schema });
          k.observe({ on: (e) => events.push(e) });
          // A minute between polls: only a notification can bring an event within the test.
          runs.push(of(k).work({ signal: ac.signal, minPollMs: 60_000, maxPollMs: 60_000, handler: (ev) => void handled.push(ev.id) }));
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
            assert.deepEqual(after, ["tick", "begin", "receive_plain", "commit"]);
          } else if (kind === "exclusive") {
            // The receive says it took the last free chunk (drained): no other worker is called, and no
            // tick came while the batch held its chunk, so nothing was passed over: no look after COMMIT.
            assert.deepEqual(after, ["prepare_exclusive", "begin", "receive_exclusive", "commit"]);
          } else {
            // The batch read every free slot to its end (drained): no other worker is called, and no
            // tick came while it held its slots, so no look after its COMMIT either; no worker wakes
            // for the notification of the tick its consumer wrote.
            assert.equal(receives, 1, `looks: ${after.join(" ")}`);
            assert.deepEqual(after, ["tick", "begin", "receive_ordered_wire", "commit"]);
          }
        }
        assert.equal(handled.length, 3);
        assert.ok(events.filter((e) => e.type === "work.woken").length >= 3);
      } finally {
        loopTuning.fullRunMs = FULL_RUN_MS;
        ac.abort();
        await Promise.all(runs);
        await Promise.all(conns.map((c) => c.end({ timeout: 2 })));
        await admin.end({ timeout: 2 });
        await dropSchema(url, schema);
      }
    });
  }
});
