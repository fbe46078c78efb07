// The input contract (issue 11): strict options with did-you-mean, typed
// refusals of text and JSON Postgres would change, `{ tx }` exactly as
// documented, bounded numbers, refusals before side effects, poisoned
// handler errors that never stall a consumer.
// Drivers without transactions: tests/input-contract-http.test.ts.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { keyq, KeyqError } from "../mod.ts";
import { fromBunSql } from "../src/drivers/bun-sql.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import { count, type Fixture, pgFixture } from "./helpers/keyq.ts";
import { scoped } from "./helpers/scope.ts";
import { refused } from "./helpers/refused.ts";

const skip = await dbSkip();

describe("input contract", () => {
  let f: Fixture & { sql: import("./helpers/db.ts").Sql; url: string };
  before(async () => {
    if (skip) return;
    f = await pgFixture({ max: 3 });
    await f.q.createQueue("files", { maxRetries: 1, retryBase: 1, retryCap: 5 });
  });
  after(async () => {
    await f?.close();
  });

  test("a misspelt option names the option and the closest valid one, everywhere", { skip }, async () => {
    const c = f.q.consumer("files", "typos");
    const handler = () => {};
    const cases: [Promise<unknown> | (() => unknown), string, string][] = [
      [c.run({ handler, budgetMS: 5 } as never), "budgetMS", "budgetMs"],
      [c.work({ handler, singal: AbortSignal.abort() } as never), "singal", "signal"],
      [c.batch({ handler, maxEvent: 5 } as never), "maxEvent", "maxEvents"],
      [f.q.tick("files", { forse: true } as never), "forse", "force"],
      [f.q.maintain("files", { forceRotation: true } as never), "forceRotation", "forceRotate"],
      [f.q.send("files", { type: "A", payload: 1 }, { txn: {} } as never), "txn", "tx"],
      [f.q.sendBatch("files", [{ type: "A", payload: 1 }], { transaction: {} } as never), "transaction", "tx"],
      [f.q.send("files", { type: "A", payload: 1, dedupkey: "x" } as never), "dedupkey", "dedupKey"],
      [f.q.createQueue("other", { maxRetry: 3 } as never), "maxRetry", "maxRetries"],
      [f.q.updateQueue("files", { retrycap: 3 } as never), "retrycap", "retryCap"],
      [f.q.status({ queu: "files" } as never), "queu", "queue"],
      [f.q.dlq.count({ consumr: "x" } as never), "consumr", "consumer"],
      [f.q.dlq.list({ limt: 3 } as never), "limt", "limit"],
      [() => f.q.exclusive("files", "x", { idempotant: true } as never), "idempotant", "idempotent"],
      [() => f.q.ordered("files", "x", { slots: 2, onfailure: "pause" } as never), "onfailure", "onFailure"],
      [() => f.q.consumer("files", "x", { maxretries: 2 } as never), "maxretries", "maxRetries"],
      [() => keyq(f.q.driver, { schem: "x" } as never), "schem", "schema"],
    ];
    for (const [p, bad, good] of cases) {
      const err = await refused(p, "INVALID_INPUT");
      assert.equal(err.details.option, bad, err.message);
      assert.equal(err.details.suggestion, good, err.message);
      assert.ok(err.message.includes(`Unknown option "${bad}"`) && err.message.includes(`did you mean "${good}"?`), err.message);
    }
    assert.equal(await count(f, "consumer"), 0, "no consumer row was written by a refused run");
  });

  test("options a call does not use are refused, not ignored", { skip }, async () => {
    const c = f.q.consumer("files", "unused");
    const handler = () => {};
    assert.match((await refused(c.batch({ handler, budgetMs: 5 } as never), "INVALID_INPUT")).message, /applies to run\(\) and work\(\), not batch\(\)/);
    await refused(c.batch({ handler, maxBatches: 2 } as never), "INVALID_INPUT");
    await refused(c.run({ handler, minPollMs: 5 } as never), "INVALID_INPUT");
    await refused(c.run({ handler, onRetry: () => {} } as never), "INVALID_INPUT");
    await refused(c.work({ handler, minPollMs: 50, maxPollMs: 10, signal: AbortSignal.abort() }), "INVALID_INPUT");
    assert.equal((await refused(f.q.dlq.count({ limit: 5 } as never), "INVALID_INPUT")).details.option, "limit");
    await refused(f.q.dlq.purge({ olderThan: 0, afterId: "1" } as never), "INVALID_INPUT");
    assert.deepEqual(await f.q.dlq.list({ limit: 5, afterId: "0" }), []);
    const work = await c.work({ handler, minPollMs: 10, maxPollMs: 10, signal: AbortSignal.abort(), retryBackoff: { baseMs: 5 } } as never);
    assert.equal(work.batches, 0);
    await c.unsubscribe();
  });

  test("missing and unknown fields are told apart; values are shown as given", { skip }, async () => {
    const missing = await refused(f.q.send("files", { payload: 1 } as never), "INVALID_INPUT");
    assert.match(missing.message, /"type" is missing/);
    assert.equal(missing.details.missing, true);
    const slots = await refused(() => f.q.ordered("files", "o", {} as never), "INVALID_INPUT");
    assert.match(slots.message, /"slots" is missing/);
    const shown: [Promise<unknown> | (() => unknown), string][] = [
      [f.q.createQueue("other", { retryCap: Number.NaN }), "NaN"],
      [f.q.createQueue("other", { tickMaxLag: Infinity }), "Infinity"],
      [f.q.consumer("files", "c").batch({ handler: () => {}, maxEvents: -0 }), "-0"],
      [f.q.consumer("files", "c").batch({ handler: () => {}, maxEvents: 5n } as never), "5n"],
      [f.q.send("files", { type: Symbol("t"), payload: 1 } as never), "Symbol(t)"],
      [f.q.consumer("files", "c").batch({ handler: () => {}, maxEvents: function many() {} } as never), "function many"],
      [f.q.send("files", { type: "A", payload: 1, ttl: Number.NaN, dedupKey: "k" }), "NaN"],
    ];
    for (const [p, text] of shown) {
      const err = await refused(p, "INVALID_INPUT");
      assert.ok(err.message.includes(text), `${err.message} should show ${text}`);
      assert.ok(!/ is null/.test(err.message), err.message);
    }
  });

  test("outbox typo: send(q, ev, { txn: tx }) throws inside the transaction and writes nothing", { skip }, async () => {
    const before = await count(f, "event");
    await assert.rejects(
      f.sql.begin(async (tx) => {
        await tx.unsafe("select 1");
        await f.q.send("files", { type: "Outbox", payload: 1 }, { txn: tx } as never);
      }),
      (e: unknown) => e instanceof KeyqError && e.code === "INVALID_INPUT" && /did you mean "tx"/.test(e.message),
    );
    await assert.rejects(
      f.sql.begin(async (tx) => {
        await f.q.sendBatch("files", [{ type: "Outbox", payload: 1 }], { transaction: tx } as never);
      }),
      (e: unknown) => e instanceof KeyqError && e.code === "INVALID_INPUT",
    );
    assert.equal(await count(f, "event"), before, "no event escaped the rolled-back transaction");
  });

  test("{ tx } takes keyq's executor, a postgres.js sql.begin tx and a pg client in BEGIN; refuses {}, sql, a Pool, a driver", { skip }, async () => {
    const ev = { type: "Tx", payload: { n: 1 } };
    const base = await count(f, "event");
    // postgres.js native transaction: commits and rolls back with the caller.
    await f.sql.begin(async (tx) => void (await f.q.send("files", ev, { tx: tx as never })));
    await f.sql.begin(async (tx) => {
      await f.q.sendBatch("files", [ev, ev], { tx: tx as never });
      await tx.savepoint(async (sp) => void (await f.q.send("files", ev, { tx: sp as never })));
    });
    await assert.rejects(
      f.sql.begin(async (tx) => {
        await f.q.send("files", ev, { tx: tx as never });
        throw new Error("roll back");
      }),
      /roll back/,
    );
    assert.equal(await count(f, "event"), base + 4);
    // keyq's own executor.
    await f.q.driver.transaction!(async (tx) => void (await f.q.send("files", ev, { tx })));
    assert.equal(await count(f, "event"), base + 5);
    // pg: a client inside BEGIN joins it; outside a transaction it is refused.
    await scoped(async (defer) => {
      const client = new pg.Client({ connectionString: f.url });
      await client.connect();
      defer(() => client.end());
      const pool = defer.use(new pg.Pool({ connectionString: f.url, max: 1 }), (p) => p.end());
      const q = keyq(fromPg(pool), { schema: f.schema });
      await client.query("begin");
      await q.send("files", ev, { tx: client as never });
      await client.query("rollback");
      assert.equal(await count(f, "event"), base + 5, "rolled back with the pg transaction");
      await client.query("begin");
      await q.send("files", ev, { tx: client as never });
      await client.query("commit");
      assert.equal(await count(f, "event"), base + 6);
      const outside = await refused(q.send("files", ev, { tx: client as never }), "INVALID_INPUT");
      assert.match(outside.message, /not inside a transaction/);
      await refused(q.send("files", ev, { tx: pool as never }), "INVALID_INPUT");
    });
    // A pg-style client whose transaction state cannot be read (older pg, Neon's Client).
    const opaqueClient = { query: () => Promise.resolve({ rows: [] }), connect: () => Promise.resolve(), escapeLiteral: (x: string) => x };
    for (const bad of [{}, f.sql, f.q.driver, null, 42, "tx", { query: "select" }, opaqueClient]) {
      const err = await refused(f.q.send("files", ev, { tx: bad as never }), "INVALID_INPUT");
      assert.equal(err.details.field, "tx", err.message);
    }
    assert.equal(await count(f, "event"), base + 6, "no refused call wrote");
  });

  const BunSQL = (globalThis as { Bun?: { SQL: new (url: string) => import("../src/drivers/bun-sql.ts").BunSqlLike & { close(): Promise<void> } } }).Bun?.SQL;
  test(
    "{ tx } takes a Bun.SQL sql.begin tx and refuses the Bun.SQL instance itself",
    { skip: skip || (!BunSQL && "Bun.SQL is a global of Bun only") },
    async () => {
      await scoped(async (defer) => {
        const bun = defer.use(new BunSQL!(f.url), (b) => b.close());
        const q = keyq(fromBunSql(bun), { schema: f.schema });
        const base = await count(f, "event");
        await bun.begin(async (tx) => ({ value: await q.send("files", { type: "BunTx", payload: 1 }, { tx }) }));
        await assert.rejects(
          Promise.resolve(bun.begin(async (tx) => {
            await q.send("files", { type: "BunTx", payload: 2 }, { tx });
            throw new Error("roll back");
          })),
          /roll back/,
        );
        assert.equal(await count(f, "event"), base + 1);
        await refused(q.send("files", { type: "BunTx", payload: 3 }, { tx: bun }), "INVALID_INPUT");
        assert.equal(await count(f, "event"), base + 1);
      });
    },
  );

  test("text Postgres cannot store is refused naming the field (NUL, unpaired surrogates)", { skip }, async () => {
    const base = await count(f, "event");
    const bad: [unknown, string, string][] = [
      [{ type: "A\0", payload: 1 }, "type", "INVALID_INPUT"],
      [{ type: "A", key: "k\0", payload: 1 }, "key", "INVALID_INPUT"],
      [{ type: "A", key: "a\ud800", payload: 1 }, "key", "INVALID_INPUT"],
      [{ type: "A\udc00b", payload: 1 }, "type", "INVALID_INPUT"],
      [{ type: "A", dedupKey: "d\0", payload: 1 }, "dedupKey", "INVALID_INPUT"],
      [{ type: "A", payload: { deep: [{ s: "x\0" }] } }, "payload.deep[0].s", "INVALID_PAYLOAD"],
      [{ type: "A", payload: { ["k\ud83d"]: 1 } }, "payload", "INVALID_PAYLOAD"],
      [{ type: "A", payload: "\udfff" }, "payload", "INVALID_PAYLOAD"],
    ];
    for (const [input, field, code] of bad) {
      const err = await refused(f.q.send("files", input as never), code);
      assert.equal(err.details.field, field, err.message);
      const batch = await refused(f.q.sendBatch("files", [{ type: "ok", payload: 1 }, input as never]), code);
      assert.match(batch.message, /event 1/);
    }
    await refused(f.q.dlq.count({ key: "k\0" }), "INVALID_INPUT");
    await refused(f.q.dlq.replayKey("files", "c", "k\ud800"), "INVALID_INPUT");
    await refused(f.q.ordered("files", "slotty", { slots: 4 }).slotOf("k\0"), "INVALID_INPUT");
    // Astral characters are well-formed pairs and stored as they are.
    const r = await f.q.send("files", { type: "Emoji😀", key: "k😀", payload: { "😀": "x😀" } });
    const [row] = await f.raw(`select ev_type, ev_key, ev_data::text as d from "${f.schema}".event where ev_id = $1`, [r.id]);
    assert.deepEqual([row!.ev_type, row!.ev_key, JSON.parse(row!.d as string)], ["Emoji😀", "k😀", { "😀": "x😀" }]);
    assert.equal(await count(f, "event"), base + 1);
  });

  test('surrogate dedup collision: "d\\ud800" and "d\\udbff" are refused, not merged into one event', { skip }, async () => {
    const base = await count(f, "event");
    const a = await refused(f.q.send("files", { type: "A", payload: 1, dedupKey: "d\ud800" }), "INVALID_INPUT");
    assert.equal(a.details.field, "dedupKey");
    assert.match(a.message, /unpaired surrogate \(U\+D800\)/);
    await refused(f.q.send("files", { type: "A", payload: 2, dedupKey: "d\udbff" }), "INVALID_INPUT");
    await refused(f.q.sendBatch("files", [{ type: "A", payload: 1, dedupKey: "d\ud800" }]), "INVALID_INPUT");
    // Distinct well-formed keys stay distinct; the same key dedupes.
    const x = await f.q.send("files", { type: "A", payload: 1, dedupKey: "d\ud83d\ude00" });
    const y = await f.q.send("files", { type: "A", payload: 2, dedupKey: "d\ud83d\ude01" });
    const z = await f.q.send("files", { type: "A", payload: 3, dedupKey: "d\ud83d\ude00" });
    assert.deepEqual([x.deduped, y.deduped, z.deduped, z.id === x.id, y.id === x.id], [false, false, true, true, false]);
    assert.equal(await count(f, "event"), base + 2);
  });

  test("payloads JSON would change are refused with their path", { skip }, async () => {
    class Point {
      constructor(public x = 1) {}
    }
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    const cases: [unknown, string, RegExp][] = [
      [{ m: new Map([[1, 2]]) }, "payload.m", /a Map/],
      [{ s: new Set([1]) }, "payload.s", /a Set/],
      [{ items: [1, undefined] }, "payload.items[1]", /undefined/],
      [{ p: new Point() }, "payload.p", /a Point/],
      [{ at: new Date(0) }, "payload.at", /toISOString/],
      [{ n: [0, Number.NaN] }, "payload.n[1]", /NaN/],
      [{ big: 1n }, "payload.big", /bigint/],
      [{ "a b": { f() {} } }, 'payload["a b"].f', /function/],
      [cyclic, "payload.self.self", /deeper than/],
      [new Uint8Array(2), "payload", /Uint8Array/],
    ];
    for (const [payload, path, message] of cases) {
      const err = await refused(f.q.send("files", { type: "A", payload }), "INVALID_PAYLOAD");
      if (path.endsWith(".self.self")) assert.ok(String(err.details.field).startsWith(path), err.message);
      else assert.equal(err.details.field, path, err.message);
      assert.match(err.message, message);
    }
    const getter = {
      get boom() {
        throw new Error("getter exploded");
      },
    };
    await refused(f.q.send("files", { type: "A", payload: getter }), "INVALID_PAYLOAD");
    // Plain data, null-prototype objects and undefined properties (left out, as JSON does) pass.
    const bare = Object.assign(Object.create(null), { a: 1 });
    const r = await f.q.send("files", { type: "A", payload: { bare, opt: undefined, list: [null, -0, "s"] } });
    const [row] = await f.raw(`select ev_data::text as d from "${f.schema}".event where ev_id = $1`, [r.id]);
    assert.deepEqual(JSON.parse(row!.d as string), { bare: { a: 1 }, list: [null, 0, "s"] });
  });

  test("numbers have ranges the engine can store; ids are int8 decimal strings", { skip }, async () => {
    const calls: (Promise<unknown> | (() => unknown))[] = [
      f.q.createQueue("big", { retryCap: 1e300 }),
      f.q.updateQueue("files", { rotationPeriod: "99999999999 days" }),
      f.q.send("files", { type: "A", payload: 1, dedupKey: "t", ttl: 1e300 }),
      () => f.q.ordered("files", "o2", { slots: 2, helpAfter: 1e300 }),
      () => f.q.exclusive("files", "x2", { deferDelay: 1e300 }),
      () => f.q.consumer("files", "c2", { retryBase: 1e300 }),
      f.q.status({ staleAfter: 1e300 }),
      f.q.consumer("files", "c2").batch({ handler: () => {}, statementTimeout: 3e9 }),
      f.q.consumer("files", "c2").batch({ handler: () => {}, idleTimeout: "30 days" }),
      f.q.dlq.replay("9999999999999999999"),
      f.q.dlq.replay(["1", "-1"]),
      f.q.dlq.list({ afterId: "9223372036854775808" }),
      f.q.dlq.count({ olderThan: 1e300 }),
    ];
    for (const p of calls) await refused(p, "INVALID_INPUT");
    const q = (await f.q.listQueues()).find((x) => x.name === "files")!;
    assert.equal(q.retryCap, 5, "a refused update changed nothing");
    // The largest values are stored and read back.
    await f.q.updateQueue("files", { retryCap: "36525 days" });
    assert.equal((await f.q.listQueues()).find((x) => x.name === "files")!.retryCap, 36525 * 86_400_000);
    await f.q.updateQueue("files", { retryCap: 5 });
    await refused(f.q.dlq.replay("9223372036854775807"), "DEAD_LETTER_NOT_FOUND");
    assert.equal(await count(f, "consumer"), 0);
  });

  test("unknown queues and consumers are errors; createQueue refuses different settings with QUEUE_EXISTS", { skip }, async () => {
    await refused(f.q.status({ queue: "nope" }), "QUEUE_NOT_FOUND");
    await refused(f.q.dlq.count({ queue: "nope" }), "QUEUE_NOT_FOUND");
    await refused(f.q.dlq.count({ queue: "files", consumer: "nope" }), "CONSUMER_NOT_FOUND");
    await refused(f.q.dlq.list({ consumer: "nope" }), "CONSUMER_NOT_FOUND");
    await refused(f.q.dlq.replayKey("nope", "nope", "k"), "QUEUE_NOT_FOUND");
    await refused(f.q.dlq.replayAll("files", "nope"), "CONSUMER_NOT_FOUND");
    await refused(f.q.dlq.purge({ olderThan: 0, queue: "nope" }), "QUEUE_NOT_FOUND");
    await refused(f.q.tick("nope"), "QUEUE_NOT_FOUND");
    await refused(f.q.maintain("nope"), "QUEUE_NOT_FOUND");
    assert.equal(await f.q.dropQueue("nope"), false, "dropQueue stays idempotent (documented)");
    assert.equal((await f.q.status({ queue: "files" })).length, 1);
    const same = await f.q.createQueue("files", { maxRetries: 1, retryBase: "1ms", retryCap: 5 });
    assert.equal(same.created, false);
    assert.equal((await f.q.createQueue("files")).created, false);
    const err = await refused(f.q.createQueue("files", { maxRetries: 7 }), "QUEUE_EXISTS");
    assert.deepEqual([err.details.field, err.details.existing, err.details.requested], ["maxRetries", 1, 7]);
    assert.match(err.message, /updateQueue\("files"/);
    await refused(f.q.createQueue("files", { tables: 4 }), "QUEUE_EXISTS");
    await refused(() => keyq(f.q.driver, { schema: "pg_keyq" }), "INVALID_IDENTIFIER");
  });

  test("refusals before side effects: pause + handleBatch, a worker range with no slot, bad run options", { skip }, async () => {
    const ordered = f.q.ordered("files", "paused", { slots: 4, onFailure: "pause" });
    // @ts-expect-error the pause policy takes per-event handlers only: the type refuses handleBatch, JavaScript gets INVALID_INPUT
    await refused(ordered.run({ handleBatch: () => {} }), "INVALID_INPUT");
    const wide = f.q.ordered("files", "wide", { slots: 4 });
    const err = await refused(wide.run({ handler: () => {}, worker: 9, workers: 10 }), "INVALID_INPUT");
    assert.match(err.message, /4 slots/);
    await refused(wide.work({ handler: () => {}, worker: 4, workers: 5 }), "INVALID_INPUT");
    // @ts-expect-error worker/workers are Tier B options: the type refuses them, JavaScript gets INVALID_INPUT
    await refused(f.q.exclusive("files", "ex").run({ handler: () => {}, worker: 0, workers: 2 }), "INVALID_INPUT");
    await refused(f.q.consumer("files", "bad").run({ handler: () => {}, maxEvents: 0 }), "INVALID_INPUT");
    assert.deepEqual(await f.raw(`select consumer_name from "${f.schema}".consumer`), [], "no consumer row was written");
    // Worker 3 of 10 over 4 slots does own a slot: accepted.
    const seen: (number | undefined)[] = [];
    await wide.run({ handler: (ev) => void seen.push(ev.slot), worker: 3, workers: 10 });
    assert.ok(seen.every((s) => s === 3), "worker 3 read slot 3 only");
    assert.equal(await count(f, "consumer"), 1);
    await wide.unsubscribe();
  });
});
