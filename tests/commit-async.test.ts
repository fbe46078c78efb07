// keyq's own tick and plan transactions (a worker's tick, prepare_exclusive,
// a start_run that does not subscribe) commit with synchronous_commit off:
// no WAL flush on a woken worker's path. Everything a handler sees commits
// later in a batch, synchronously, which flushes them too; so batches, a
// subscribing start_run and the public q.tick() keep the server's setting.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Executor, keyq, type TxDriver } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

interface Seen {
  text: string;
  params: readonly (string | null)[];
  inTx: boolean;
}

/** `d` with every statement recorded, and whether it ran inside a transaction. */
function recording(d: TxDriver, seen: Seen[]): TxDriver {
  const wrap = (tx: Executor): Executor => ({
    query: (text, params) => (seen.push({ text, params: (params ?? []) as (string | null)[], inTx: true }), tx.query(text, params)),
  });
  return {
    ...d,
    query: (text, params) => (seen.push({ text, params: (params ?? []) as (string | null)[], inTx: false }), d.query(text, params)),
    transaction: (fn) => d.transaction((tx) => fn(wrap(tx))),
  };
}

const asyncCommit = (s: Seen) => s.text.includes("set_config('synchronous_commit'") && s.params.includes("off");
const calls = (seen: Seen[], fn: string) => seen.filter((s) => s.text.includes(`.${fn}(`));
/** start_run's subscribe argument, as sent. */
const subscribes = (s: Seen) => {
  const m = /subscribe => \$(\d+)::/.exec(s.text);
  return m ? s.params[Number(m[1]) - 1] === "true" : false;
};

describe("keyq's tick and plan transactions commit without waiting for the WAL flush", () => {
  test("worker ticks, prepares and runs' starts are async; batches, subscribing starts and q.tick() are not", { skip }, async () => {
    const f = await pgFixture({ max: 4 });
    try {
      const seen: Seen[] = [];
      const q = keyq(recording(fromPostgresJs(f.sql), seen), { schema: f.schema });
      await q.createQueue("jobs");
      const events = (n: number) => Array.from({ length: n }, (_, i) => ({ type: "E", key: `k${i % 4}`, payload: i }));
      const kinds = [q.consumer<number>("jobs", "p"), q.exclusive<number>("jobs", "x"), q.ordered<number>("jobs", "o", { slots: 2 })];
      for (const c of kinds) await c.run({ handler: () => {} }); // the first run subscribes
      await q.sendBatch("jobs", events(8));
      for (const c of kinds) assert.equal((await c.run({ handler: () => {} })).events, 8);

      // A woken plain worker ticks for the commit it heard (the herd's "sent"), then reads.
      const abort = new AbortController();
      let handled = 0;
      const working = q.consumer<number>("jobs", "p").work({ signal: abort.signal, handler: () => void handled++ });
      const t0 = Date.now();
      while (Date.now() - t0 < 10_000 && !seen.some((s) => s.text.includes("pg_notify($1::text, $2::text)"))) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300)); // past the probe and the first run: idle, listening
      const before = seen.length;
      await q.send("jobs", { type: "E", key: "k9", payload: 99 });
      while (Date.now() - t0 < 20_000 && handled === 0) await new Promise((r) => setTimeout(r, 10));
      abort.abort();
      await working;
      assert.equal(handled, 1);
      const woken = seen.slice(before);
      await q.tick("jobs", { force: true }); // the public tick

      const starts = calls(seen, "start_run");
      assert.ok(starts.some(subscribes), "a run subscribed");
      for (const s of starts) assert.equal(asyncCommit(s), !subscribes(s), `start_run, subscribe ${subscribes(s)}: ${s.text}`);
      assert.ok(starts.filter((s) => !subscribes(s)).length >= 3, "each kind started a run without subscribing");
      const prepares = calls(seen, "prepare_exclusive");
      for (const s of prepares) assert.ok(asyncCommit(s), s.text);
      const workerTicks = calls(woken, "tick").concat(calls(woken, "start_run")).filter((s) => !s.inTx);
      assert.ok(workerTicks.length > 0 && workerTicks.every(asyncCommit), `the woken worker's tick: ${workerTicks.map((s) => s.text).join(" | ")}`);
      const publicTick = calls(seen, "tick").at(-1)!;
      assert.ok(publicTick.params.includes("true") && !asyncCommit(publicTick), `q.tick() keeps the server's setting: ${publicTick.text}`);
      const inTx = seen.filter((s) => s.inTx);
      assert.ok(inTx.some((s) => s.text.includes(".receive")), "batches were recorded");
      assert.deepEqual(inTx.filter(asyncCommit).map((s) => s.text), [], "no batch statement changes synchronous_commit");

      // The setting takes hold in the statement's own transaction and ends with it.
      const st = starts.find((s) => !subscribes(s))!;
      const [inside, after] = await f.sql.reserve().then(async (c) => {
        try {
          await c.unsafe("begin");
          await c.unsafe(st.text, st.params as string[]);
          const [a] = await c.unsafe("select current_setting('synchronous_commit') as v");
          await c.unsafe("commit");
          const [b] = await c.unsafe("select current_setting('synchronous_commit') as v");
          return [a!.v, b!.v];
        } finally {
          c.release();
        }
      });
      assert.equal(inside, "off");
      assert.notEqual(after, "off", "local to the transaction");
    } finally {
      await f.close();
    }
  });
});
