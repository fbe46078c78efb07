// Error mapping without a database: engine SQLSTATEs and hints to KeyqError
// codes, a missing schema to NOT_MIGRATED, and which failures a worker
// retries (src/faults.ts), with the backoff between retries.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fromDatabaseError, KeyqError } from "../../src/errors.ts";
import { backoffMs, classify } from "../../src/faults.ts";
import { mapError } from "../../src/engine/reply.ts";

/** A driver error as postgres.js and pg shape it. */
const pgError = (code: string, message = "boom", extra: Record<string, unknown> = {}) => Object.assign(new Error(message), { code, ...extra });

describe("SQLSTATE to code", () => {
  test("KQ### with a KEYQ: hint becomes a KeyqError with that code and the sqlstate", () => {
    const mapped = fromDatabaseError(pgError("KQ001", 'Queue "files" does not exist', { hint: "KEYQ:QUEUE_NOT_FOUND" }));
    assert.ok(mapped instanceof KeyqError);
    assert.equal(mapped.code, "QUEUE_NOT_FOUND");
    assert.equal(mapped.message, 'Queue "files" does not exist');
    assert.deepEqual(mapped.details, { sqlstate: "KQ001" });
    const noHint = fromDatabaseError(pgError("KQ009", "odd"));
    assert.ok(noHint instanceof KeyqError && noHint.code === "INVALID_INPUT", "a KQ error without a hint is bad input");
  });

  test("other errors pass through unchanged", () => {
    for (const err of [pgError("23505"), pgError("08006"), new Error("x"), "text", null, undefined, { code: 5 }]) {
      assert.equal(fromDatabaseError(err), err);
    }
  });

  test("a missing schema or engine function at top level is NOT_MIGRATED; inside a function it is a bug", () => {
    const missing = mapError(pgError("3F000", 'schema "kq_x" does not exist'), "kq_x");
    assert.ok(missing instanceof KeyqError && missing.code === "NOT_MIGRATED");
    assert.match(missing.message, /^The keyq schema "kq_x" is missing or out of date \(schema "kq_x" does not exist\); call migrate\(\) first\.$/);
    const fn = mapError(pgError("42883", "function kq_x.send(text) does not exist"), "kq_x");
    assert.ok(fn instanceof KeyqError && fn.code === "NOT_MIGRATED");
    const inner = pgError("42883", "function kq_x.helper() does not exist", { where: "PL/pgSQL function kq_x.send" });
    assert.equal(mapError(inner, "kq_x"), inner);
    const other = pgError("3F000", 'schema "somewhere_else" does not exist');
    assert.equal(mapError(other, "kq_x"), other, "another schema's absence is not ours");
    const engine = mapError(pgError("KQ004", "slots", { hint: "KEYQ:SLOT_COUNT_MISMATCH" }), "kq_x");
    assert.ok(engine instanceof KeyqError && engine.code === "SLOT_COUNT_MISMATCH");
  });
});

describe("fault classification", () => {
  test("SQLSTATEs: class 08 and shutdowns are connection faults; contention is transient; the rest permanent", () => {
    const table: [string, string][] = [
      ["57P01", "connection"],
      ["57P02", "connection"],
      ["57P03", "connection"],
      ["57P05", "connection"],
      ["25P03", "connection"],
      ["08006", "connection"],
      ["08001", "connection"],
      ["08P01", "connection"],
      ["53300", "transient"],
      ["53200", "transient"],
      ["40001", "transient"],
      ["40P01", "transient"],
      ["55P03", "transient"],
      ["57014", "transient"],
      ["23505", "permanent"],
      ["42P01", "permanent"],
      ["22P02", "permanent"],
      ["KQ001", "permanent"],
    ];
    for (const [code, kind] of table) assert.equal(classify(pgError(code)), kind, code);
  });

  test("driver and socket codes, Bun's bunCode, errno", () => {
    assert.equal(classify(pgError("CONNECTION_CLOSED")), "connection");
    assert.equal(classify(pgError("CONNECTION_ENDED")), "permanent", "the user ended the pool");
    assert.equal(classify(pgError("ECONNREFUSED")), "connection");
    assert.equal(classify(Object.assign(new Error("x"), { bunCode: "ERR_POSTGRES_CONNECTION_CLOSED" })), "connection");
    assert.equal(classify(Object.assign(new Error("x"), { errno: "ECONNRESET" })), "connection");
    assert.equal(classify(Object.assign(new Error("x"), { code: 42 })), "permanent");
  });

  test("messages of drivers without codes (pg, Neon)", () => {
    assert.equal(classify(new Error("Connection terminated unexpectedly")), "connection");
    assert.equal(classify(new Error("terminating connection due to administrator command")), "connection");
    assert.equal(classify(new Error("WebSocket was closed")), "connection");
    assert.equal(classify(new Error("Cannot use a pool after calling end on the pool")), "permanent");
    assert.equal(classify(new Error("Client was closed and is not queryable")), "permanent");
    assert.equal(classify(new Error("syntax error at or near x")), "permanent");
  });

  test("causes are followed (a bounded depth); KeyqErrors by code and reason", () => {
    const wrapped = new Error("outer", { cause: new Error("outer 2", { cause: pgError("57P01") }) });
    assert.equal(classify(wrapped), "connection");
    let deep: Error = pgError("57P01");
    for (let i = 0; i < 6; i++) deep = new Error(`level ${i}`, { cause: deep });
    assert.equal(classify(deep), "permanent", "a cause chain deeper than 4 is not followed");
    const self = new Error("self");
    (self as { cause?: unknown }).cause = self;
    assert.equal(classify(self), "permanent");
    assert.equal(classify(new KeyqError("BAD_REPLY", "x")), "connection");
    assert.equal(classify(new KeyqError("BATCH_ABORTED", "x", { reason: "connection" })), "connection");
    assert.equal(classify(new KeyqError("BATCH_ABORTED", "x", { reason: "deadline" })), "transient");
    assert.equal(classify(new KeyqError("QUEUE_NOT_FOUND", "x")), "permanent");
    for (const v of [null, undefined, "57P01", 42]) assert.equal(classify(v), "permanent");
  });
});

describe("retry backoff", () => {
  const b = { baseMs: 100, capMs: 5_000 };

  test("doubles per attempt up to the cap, with equal jitter (half fixed, half random)", () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 8].map((a) => backoffMs(a, b, () => 0)), [50, 100, 200, 400, 800, 1600, 2500, 2500]);
    assert.deepEqual([1, 2, 3, 7].map((a) => backoffMs(a, b, () => 1)), [100, 200, 400, 5000]);
    assert.equal(backoffMs(3, b, () => 0.5), 300);
  });

  test("huge attempt numbers stay finite and capped; the default random stays in range", () => {
    assert.equal(backoffMs(10_000, b, () => 1), 5000);
    for (let i = 0; i < 200; i++) {
      const ms = backoffMs(4, b);
      assert.ok(ms >= 400 && ms <= 800, String(ms));
    }
  });
});
