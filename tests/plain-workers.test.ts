// A plain consumer shared by several workers: the cursor is handed over at
// each commit (no polling on busy), every event is handled exactly once and
// in order; and batch reports count statements, the handler's included.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KeyqError } from "../mod.ts";
import { ENGINE } from "../src/engine/calls.ts";
import { reply } from "../src/engine/reply.ts";
import { fromPlain, type PlainBatch } from "../src/engine/wire.ts";
import { payloadOf } from "../src/batch/handler.ts";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

describe("plain consumer, several workers", () => {
  test("4 workers on 4 connections: every event once, in order, one batch at a time, no busy or idle spinning", { skip }, async () => {
    const f = await pgFixture({ max: 5 });
    try {
      await f.q.createQueue("jobs");
      const c = f.q.consumer("jobs", "audit");
      await c.subscribe();
      const N = 2_000;
      for (let i = 0; i < N; i += 200) {
        await f.q.sendBatch("jobs", Array.from({ length: 200 }, (_, j) => ({ type: "E", payload: i + j, key: `k${(i + j) % 7}` })));
        if (i % 600 === 0) await f.q.tick("jobs", { force: true }); // several windows
      }
      await f.q.tick("jobs", { force: true });
      const seen: number[] = [];
      let inFlight = 0, maxInFlight = 0, busy = 0, empty = 0, batches = 0;
      const worker = async () => {
        while (seen.length < N) {
          const r = await c.batch({
            maxEvents: 50,
            handler: async (ev, tx) => {
              inFlight++;
              maxInFlight = Math.max(maxInFlight, inFlight);
              await tx.query("select 1"); // a real round trip while the batch holds the cursor
              seen.push(ev.payload as number);
              inFlight--;
            },
          });
          if (r.busy) busy++;
          else if (r.events === 0) empty++;
          else batches++;
        }
      };
      await Promise.all([worker(), worker(), worker(), worker()]);
      assert.equal(seen.length, N, "every event handled exactly once");
      assert.deepEqual(seen, Array.from({ length: N }, (_, i) => i), "in send order");
      assert.equal(maxInFlight, 1, "batches of one plain consumer never overlap");
      // Busy only when a holder kept the cursor past the 2 s wait (a loaded
      // machine); polling, as before the hand-off, gave several busy looks per batch.
      assert.ok(busy <= Math.ceil(batches / 20), `busy looks ${busy} for ${batches} batches: a second worker waits for the cursor instead`);
      assert.ok(empty <= 3 + 4, `empty looks ${empty}: at most one per window end and per idle worker at the end`);
      assert.ok(batches >= N / 50, `batches ${batches}`);
      const [row] = await f.raw(`select count(*)::int as n from "${f.schema}".retry`);
      assert.equal(row!.n, 0);
    } finally {
      await f.close();
    }
  });

  test("a worker still answers busy when the holder keeps the cursor past the wait", { skip }, async () => {
    const f = await pgFixture({ max: 3 });
    try {
      await f.q.createQueue("jobs");
      const c = f.q.consumer("jobs", "audit");
      await c.subscribe();
      await f.q.sendBatch("jobs", [{ type: "E", payload: 1 }, { type: "E", payload: 2 }]);
      await f.q.tick("jobs", { force: true });
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      let started!: () => void;
      const inside = new Promise<void>((r) => (started = r));
      const slow = c.batch({
        maxEvents: 1,
        handler: async () => {
          started();
          await held;
        },
      });
      await inside;
      const t0 = Date.now();
      const r = await c.batch({ maxEvents: 1, statementTimeout: 400, handler: () => {} }); // waits min(2 s, 400/2 ms)
      assert.equal(r.busy, true);
      assert.ok(Date.now() - t0 >= 150, "it waited before answering busy");
      release();
      assert.equal((await slow).events, 1);
      assert.equal((await c.batch({ handler: () => {} })).events, 1, "the other event is still there");
    } finally {
      await f.close();
    }
  });
});

describe("batch reports", () => {
  test("statements count BEGIN, receive, COMMIT and the handler's own queries; roundTrips is the same number", { skip }, async () => {
    const f = await pgFixture();
    try {
      await f.q.createQueue("jobs");
      const c = f.q.consumer("jobs", "audit");
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 5 }, (_, i) => ({ type: "E", payload: i })));
      await f.q.tick("jobs", { force: true });
      const noop = await c.batch({ maxEvents: 2, handler: () => {} });
      assert.equal(noop.events, 2);
      assert.equal(noop.statements, 3, "BEGIN, receive, COMMIT");
      assert.equal(noop.roundTrips, noop.statements);
      const writing = await c.batch({ maxEvents: 2, handler: async (_ev, tx) => void (await tx.query("select 1")) });
      assert.equal(writing.events, 2);
      // The handlers' own queries, and each event's SAVEPOINT (the first event's RELEASE rides in the second's text).
      assert.equal(writing.statements, 3 + 2 + 2, `statements ${writing.statements}`);
      const batchOf = await c.batch({ handleBatch: async (evs, { tx }) => void (await tx.query("select $1::int", [String(evs.length)])) });
      assert.equal(batchOf.events, 1);
      assert.equal(batchOf.statements, 3 + 1, "handleBatch's query through tx is counted");
      await f.q.sendBatch("jobs", [{ type: "E", payload: 7 }]);
      await f.q.tick("jobs", { force: true });
      const nested = await c.batch({
        handleBatch: async (_evs, { tx }) => {
          assert.ok(tx.savepoint, "the postgres.js adapter offers savepoints");
          await tx.savepoint!(async (sp) => void (await sp.query("select 1")));
        },
      });
      assert.equal(nested.events, 1);
      assert.equal(nested.statements, 3 + 2 + 1, "a savepoint of handleBatch: SAVEPOINT, RELEASE and the query inside");
      await f.q.send("jobs", { type: "E", payload: 9 });
      const run = await c.run({ handler: async (_ev, tx) => void (await tx.query("select 1")) });
      assert.equal(run.events, 1);
      // the run's start (tick and maintenance in one statement, start_run), one batch (3 + 1 query + its event's SAVEPOINT);
      // no empty look after it: a batch that is not full read everything ticked.
      assert.equal(run.statements, 1 + 5, `run statements ${run.statements}`);
      assert.equal(run.roundTrips, run.statements);
      await f.q.sendBatch("jobs", [{ type: "E", payload: 10 }, { type: "E", payload: 11 }]);
      await f.q.tick("jobs", { force: true });
      const failing = await c.batch({
        maxEvents: 2,
        handler: async (ev, tx) => {
          await tx.query("select 1");
          if (ev.payload === 11) throw new Error("fails");
        },
      });
      assert.equal(failing.events, 2);
      assert.equal(failing.retried, 1);
      // One attempt: BEGIN, receive, COMMIT; each event SAVEPOINT + query (the failed one then
      // ROLLBACK TO its savepoint); the ack. No rerun: no handler is called twice.
      assert.equal(failing.statements, 3 + 2 + 3 + 1, `statements ${failing.statements}`);
    } finally {
      await f.close();
    }
  });
});

/** A receive_plain_rows reply as the client decodes it: the engine seam's check, then the events. */
const decodePlain = (rows: unknown) =>
  fromPlain(reply<PlainBatch>(rows, "receive_plain_rows", ENGINE.receivePlain.shape, ENGINE.receivePlain.parse, ENGINE.receivePlain.lines));

/** Rows of one text each, as the driver hands them over. */
const textRows = (...texts: string[]) => texts.map((r) => ({ r }));

describe("fenced batch reports", () => {
  test("statements count the fence on the pool and the unfence in the batch", { skip }, async () => {
    const f = await pgFixture({ max: 3 });
    try {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive("jobs", "m", { fenced: true });
      await c.subscribe();
      await f.q.sendBatch("jobs", [{ type: "E", payload: 1, key: "a" }, { type: "E", payload: 2, key: "b" }]);
      const r = await c.run({ maxBatches: 1, handler: () => {} });
      assert.equal(r.events, 2);
      // the run's start (subscribe, tick/plan, maintenance: start_run), then BEGIN, receive, fence (pool), unfence, COMMIT.
      assert.equal(r.statements, 1 + 5, `statements ${r.statements}`);
      const plain = await f.q.exclusive("jobs", "n").run({ maxBatches: 1, handler: () => {} });
      assert.equal(plain.statements, 1 + 3, "an unfenced batch sends no fence statements");
    } finally {
      await f.close();
    }
  });
});

describe("plain wire form", () => {
  test("decodes rows and retries, and refuses anything else as BAD_REPLY", () => {
    const r = decodePlain(textRows(
      JSON.stringify({
        busy: false,
        retries: [{ id: "3", txid: "9", type: "R", key: null, payload: 0, time: "2026-01-01T00:00:00+00:00", retry: 1, redelivered: true }],
      }),
      '["4", "9", "T", "k", "2026-01-01T00:00:00+00:00", null]\n{"a": [1]}',
    ));
    assert.equal(r.busy, false);
    assert.deepEqual(r.events.map((e) => [e.id, e.retry, e.redelivered ?? false]), [["3", 1, true], ["4", 0, false]]);
    assert.equal(r.events[1]!.raw, '{"a": [1]}', "a row's payload stays JSON text until a handler reads it");
    assert.deepEqual(payloadOf(r.events[1]!), { a: [1] });
    const head = '{"busy":false,"retries":[]}';
    const row = (id: string) => `["${id}","7","T",null,"2026-01-01T00:00:00+00:00",null]`;
    assert.equal(decodePlain(textRows(head, `${row("1")}\n1`)).events[0]!.raw, "1", "a head and one line make a good reply");
    assert.deepEqual(decodePlain(textRows(head, `${row("1")}\n"x"`, `${row("2")}\n[2]`)).events.map((e) => [e.id, e.raw]), [["1", '"x"'], [
      "2",
      "[2]",
    ]], "lines in order, each with its payload");
    assert.deepEqual(decodePlain(textRows('{"busy":true,"retries":[]}')).events, [], "a busy head alone");
    for (
      const bad of [
        [],
        textRows("nope"),
        textRows('{"busy":false}'),
        textRows(head, '["1"]\n1'), // a short row
        textRows(head, row("1")), // a row without its payload
        textRows(head, `${row("1")},${row("2")}\n1`), // two rows on one line
        textRows(head, '["1","7","T",null,"2026-01-01T00:00:00+00:00"]\n1'), // no trace
        textRows('{"busy":false,"retries":[],"rows":[]}'), // the one-text form's head
        textRows('{"busy":false,"retries":[{"id":"1"}]}'), // a retry without its fields
        [{ r: head }, { x: 1 }],
        [{ x: 1 }],
      ]
    ) {
      assert.throws(() => decodePlain(bad), (e: unknown) => e instanceof KeyqError && e.code === "BAD_REPLY", JSON.stringify(bad));
    }
  });

  test("an ordered reply carries its slot, checked", () => {
    const decode = (...texts: string[]) =>
      fromPlain(
        reply<PlainBatch>(
          textRows(...texts),
          "receive_ordered_rows",
          ENGINE.receiveOrderedWire.shape,
          ENGINE.receiveOrderedWire.parse,
          ENGINE.receiveOrderedWire.lines,
        ),
      );
    const ok = decode('["1","7","T","k","2026-01-01T00:00:00+00:00",null]\n2', '{"busy":false,"slot":5,"retries":[]}');
    assert.equal(ok.slot, 5);
    assert.equal(ok.events[0]!.raw, "2", "the head comes last, after the rows");
    assert.equal(decode('{"busy":true,"slot":null,"retries":[]}').slot, undefined);
    for (
      const bad of [
        ['{"busy":false,"retries":[]}'],
        ['{"busy":false,"slot":-1,"retries":[]}'],
        ['{"busy":false,"slot":"1","retries":[]}'],
        ['{"busy":false,"slot":5,"retries":[]}', '["1","7","T","k","2026-01-01T00:00:00+00:00",null]\n2'], // the head first
        ['{"busy":false,"slot":5,"retries":[],"rows":[]}'], // the one-text form's head
      ]
    ) {
      assert.throws(() => decode(...bad), (e: unknown) => e instanceof KeyqError && e.code === "BAD_REPLY", JSON.stringify(bad));
    }
  });
});
