// Wake-ups: an idle work() on a driver that can LISTEN sends no statement
// while it waits (its poll interval is a minute here) and handles a new event
// when the producer's commit notifies it; behind PgBouncer (transaction mode)
// its probe notification never arrives and it polls; a driver without
// listen() polls; run() never listens. Statements are counted, not timed.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import { type Executor, keyq, type LifecycleEvent, type TxDriver } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPGlite } from "../src/drivers/pglite.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip, dropSchema, freshSchema, requireDatabase, startPGlite } from "./helpers/db.ts";
import { closeShared, viaPgBouncer } from "./helpers/drivers.ts";
import { pgBouncerBinary } from "./helpers/pgbouncer.ts";

const skip = await dbSkip();
const noBouncer = pgBouncerBinary() ? false : "pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does it)";
const url = skip ? "" : await requireDatabase();
after(closeShared);

/** The driver with every statement counted (BEGIN and COMMIT included); listen passes through. */
function counted(d: TxDriver): { driver: TxDriver; statements(): number; listens(): number } {
  let n = 0;
  let listens = 0;
  const wrap = (tx: Executor): Executor => ({
    query: (text, params) => (n++, tx.query(text, params)),
    ...(tx.savepoint ? { savepoint: <T>(fn: (sp: Executor) => Promise<T>) => (n++, tx.savepoint!((sp) => fn(wrap(sp)))) } : {}),
    ...(tx.signal ? { signal: tx.signal } : {}),
  });
  const driver: TxDriver = {
    ...d,
    name: d.name,
    query: (text, params) => (n++, d.query(text, params)),
    transaction: <T>(fn: (tx: Executor) => Promise<T>) => (n += 2, d.transaction((tx) => fn(wrap(tx)))),
  };
  if (d.connections !== undefined) Object.assign(driver, { connections: d.connections });
  if (d.listen) driver.listen = (channel, cb) => (listens++, d.listen!(channel, cb));
  else delete driver.listen;
  return { driver, statements: () => n, listens: () => listens };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !ok();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** Starts work() on `driver` and returns what the test needs to watch it. */
async function worker(driver: TxDriver, schema: string, options: { minPollMs: number; maxPollMs: number }) {
  const q = keyq(driver, { schema });
  await q.migrate();
  await q.createQueue("jobs");
  const events: LifecycleEvent[] = [];
  q.observe({ on: (e) => events.push(e) });
  const c = q.consumer("jobs", "w");
  await c.subscribe();
  const handled: string[] = [];
  const ac = new AbortController();
  const done = c.work({ ...options, signal: ac.signal, handler: (ev) => void handled.push(ev.id) });
  const mode = () => events.find((e) => e.type === "work.mode") as Extract<LifecycleEvent, { type: "work.mode" }> | undefined;
  const batches = () => events.filter((e) => e.type === "batch.committed").length;
  return { q, events, handled, mode, batches, stop: async () => (ac.abort(), await done) };
}

const listeners: { name: string; open(): Promise<{ driver: TxDriver; close(): Promise<void> }> }[] = [
  {
    name: "postgres.js",
    open: () => {
      const sql = postgres(url, { max: 4, onnotice: () => {} });
      return Promise.resolve({ driver: fromPostgresJs(sql), close: () => sql.end({ timeout: 2 }) });
    },
  },
  {
    name: "pg Pool",
    open: () => {
      const pool = new pg.Pool({ connectionString: url, max: 4 });
      return Promise.resolve({ driver: fromPg(pool), close: () => pool.end() });
    },
  },
  {
    name: "PGlite",
    open: async () => {
      const db = await startPGlite();
      return { driver: fromPGlite(db), close: () => db.close() };
    },
  },
];

describe("wake-ups", { skip }, () => {
  for (const l of listeners) {
    test(`${l.name}: an idle worker sends nothing, and a commit wakes it to handle the event`, async () => {
      const { driver: raw, close } = await l.open();
      const schema = freshSchema();
      const c = counted(raw);
      // A poll interval of a minute: only a notification can bring the event within the test.
      const w = await worker(c.driver, schema, { minPollMs: 60_000, maxPollMs: 60_000 });
      try {
        await until("the probe", () => w.mode() !== undefined);
        assert.equal(w.mode()!.mode, "listen", w.mode()!.reason);
        await until("the first run", () => w.batches() >= 1);
        await sleep(50); // the run's last statement settles
        const idle = c.statements();
        await sleep(1_000);
        assert.equal(c.statements() - idle, 0, "no statement while idle");
        const { id } = await w.q.send("jobs", { type: "T", payload: 1 });
        const sent = c.statements();
        await until("the handler", () => w.handled.includes(id));
        await sleep(200);
        const woke = c.statements() - sent;
        assert.equal(w.events.filter((e) => e.type === "work.woken").length >= 1, true);
        assert.ok(woke > 0 && woke <= 20, `one wake-up's runs: ${woke} statements`);
        const settled = c.statements();
        await sleep(500);
        assert.equal(c.statements() - settled, 0, "idle again");
        assert.equal(c.listens(), 1);
      } finally {
        await w.stop();
        await close();
        if (l.name !== "PGlite") await dropSchema(url, schema);
      }
    });
  }

  test("behind PgBouncer (transaction mode) the probe never arrives: the worker polls", { skip: noBouncer }, async () => {
    const schema = freshSchema();
    const direct = postgres(url, { max: 1, onnotice: () => {} });
    const sql = postgres(await viaPgBouncer(url), { max: 4, prepare: false, idle_timeout: 1, onnotice: () => {} });
    try {
      await keyq(fromPostgresJs(direct), { schema }).migrate();
      const c = counted(fromPostgresJs(sql));
      const w = await worker(c.driver, schema, { minPollMs: 20, maxPollMs: 100 });
      try {
        await until("the probe's verdict", () => w.mode() !== undefined);
        assert.equal(w.mode()!.mode, "poll");
        assert.match(w.mode()!.reason, /no notification arrived/);
        const { id } = await w.q.send("jobs", { type: "T", payload: 1 });
        await until("the handler", () => w.handled.includes(id));
        assert.equal(w.events.filter((e) => e.type === "work.mode").length, 1, "decided once");
        assert.equal(w.events.filter((e) => e.type === "work.woken").length, 0, "found by polling");
      } finally {
        await w.stop();
      }
    } finally {
      await sql.end({ timeout: 2 });
      await direct.end({ timeout: 2 });
      await dropSchema(url, schema);
    }
  });

  test("a driver without listen() polls; run() and wakeups: false never listen", async () => {
    const schema = freshSchema();
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    try {
      const base = counted(fromPostgresJs(sql));
      const { listen: _l, ...rest } = base.driver;
      const w = await worker(rest as TxDriver, schema, { minPollMs: 20, maxPollMs: 50 });
      try {
        await until("the mode", () => w.mode() !== undefined);
        assert.equal(w.mode()!.mode, "poll");
        assert.match(w.mode()!.reason, /cannot LISTEN/);
        const { id } = await w.q.send("jobs", { type: "T", payload: 1 });
        await until("the handler", () => w.handled.includes(id));
      } finally {
        await w.stop();
      }
      const q = keyq(base.driver, { schema });
      await q.consumer("jobs", "w").run({ handler: () => {} });
      const ac = new AbortController();
      const events: LifecycleEvent[] = [];
      q.observe({ on: (e) => events.push(e) });
      const done = q.consumer("jobs", "w").work({ wakeups: false, signal: ac.signal, handler: () => {} });
      await until("the mode", () => events.some((e) => e.type === "work.mode"));
      ac.abort();
      await done;
      assert.equal(base.listens(), 0);
      await assert.rejects(q.consumer("jobs", "w").work({ wakeups: "yes" as never, handler: () => {} }), /Option "wakeups"/);
    } finally {
      await sql.end({ timeout: 2 });
      await dropSchema(url, schema);
    }
  });
});
