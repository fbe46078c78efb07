// Input checks at the public boundary, without a database: identifiers,
// ids, durations, the options parser and its did-you-mean.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as v from "valibot";
import { KeyqError } from "../../src/errors.ts";
import { checkId, checkName, checkSchemaName, closest, durationMs, int, MAX_INTERVAL_MS, MAX_TIMEOUT_MS, parse, text } from "../../src/validate.ts";
import { refusal } from "../helpers/refused.ts";

describe("identifiers", () => {
  test("schema names: lowercase, digits, _, at most 63 bytes, not pg_", () => {
    for (const ok of ["keyq", "_x", "a1_b2", "a".repeat(63)]) assert.equal(checkSchemaName(ok), ok);
    for (const bad of ["", "Keyq", "1abc", "a-b", "a.b", "a".repeat(64), "pg_keyq", "ké", 'a"b', null, 5, undefined]) {
      const e = refusal(() => checkSchemaName(bad), "INVALID_IDENTIFIER");
      assert.equal(e.details.field, "schema");
      assert.match(e.message, /1–63 lowercase letters/);
    }
    assert.match(refusal(() => checkSchemaName("pg_x"), "INVALID_IDENTIFIER").message, /^Schema name "pg_x" is not valid/);
  });

  test("queue and consumer names: a letter first, then letters, digits, _ . : -; 63 bytes", () => {
    for (const ok of ["files", "Files.v2", "a:b-c_d", "x".repeat(63)]) assert.equal(checkName("queue", ok), ok);
    for (const bad of ["", "1files", "_files", "a b", "a/b", "x".repeat(64), "é", {}, ["files"]]) {
      refusal(() => checkName("consumer", bad), "INVALID_IDENTIFIER");
    }
    // 63 bytes, not 63 characters: 32 two-byte letters are 64 bytes.
    refusal(() => checkName("queue", "a" + "é".repeat(31)), "INVALID_IDENTIFIER");
    const e = refusal(() => checkName("consumer", "a b"), "INVALID_IDENTIFIER");
    assert.equal(e.message, 'The consumer name "a b" is not valid; use 1–63 bytes of letters, digits, "_", ".", ":" or "-", starting with a letter.');
    assert.deepEqual(e.details, { field: "consumer", value: "a b" });
  });

  test("ids: decimal strings within int8", () => {
    assert.equal(checkId("id", "42", "replay"), "42");
    assert.equal(checkId("id", "9223372036854775807", "replay"), "9223372036854775807");
    for (const bad of ["9223372036854775808", "-1", "1.5", " 1", "", "0x10", 42, 42n, null]) {
      const e = refusal(() => checkId("id", bad, "replay"), "INVALID_INPUT");
      assert.match(e.message, /^replay takes ids as decimal strings/);
    }
  });
});

describe("durations", () => {
  test("milliseconds and text with units", () => {
    const cases: [number | string, number][] = [
      [0, 0],
      [1500, 1500],
      ["250", 250],
      ["250ms", 250],
      ["30s", 30_000],
      ["1.5 s", 1500],
      [" 5 minutes ", 300_000],
      ["2h", 7_200_000],
      ["1 hour", 3_600_000],
      ["7d", 604_800_000],
      ["1 DAY", 86_400_000],
      ["2 mins", 120_000],
      ["3 secs", 3000],
    ];
    for (const [given, ms] of cases) assert.equal(durationMs("ttl", given), ms, JSON.stringify(given));
    assert.equal(durationMs("ttl", undefined), undefined);
  });

  test("refuses unknown units, negatives, NaN, and values out of range, naming the option", () => {
    for (const bad of ["5 fortnights", "-1s", "1e3", "s", "", "1 2s", -1, Number.NaN, Infinity]) {
      const e = refusal(() => durationMs("batchTimeout", bad), "INVALID_INPUT");
      assert.match(e.message, /^Option "batchTimeout" is .*; give a non-negative duration/);
      assert.equal(e.details.field, "batchTimeout");
    }
    assert.equal(durationMs("x", MAX_INTERVAL_MS), MAX_INTERVAL_MS);
    assert.match(refusal(() => durationMs("x", MAX_INTERVAL_MS + 1), "INVALID_INPUT").message, /at most 100 years/);
    assert.match(refusal(() => durationMs("t", "25d", 0, MAX_TIMEOUT_MS), "INVALID_INPUT").message, /at most 2147483647 ms \(about 24.8 days\)/);
    assert.equal(durationMs("t", "24d", 0, MAX_TIMEOUT_MS), 2_073_600_000);
  });

  test("a positive minimum refuses zero", () => {
    assert.match(refusal(() => durationMs("retryBase", 0, 1), "INVALID_INPUT").message, /give a positive duration/);
    assert.equal(durationMs("retryBase", "1ms", 1), 1);
    refusal(() => durationMs("retryBase", 0.5, 1), "INVALID_INPUT");
  });
});

describe("options parser", () => {
  const schema = v.strictObject({
    maxEvents: v.optional(int(1, 10_000)),
    budgetMs: v.optional(v.number()),
    signal: v.optional(v.instance(AbortSignal)),
    retry: v.optional(v.strictObject({ baseMs: int(1, 100), capMs: int(1, 1000) })),
    name: v.optional(text("name", 1, 5)),
  });

  test("did-you-mean: the closest valid option, and the list", () => {
    assert.equal(closest("budgetMS", ["maxEvents", "budgetMs", "signal"]), "budgetMs");
    assert.equal(closest("singal", ["maxEvents", "budgetMs", "signal"]), "signal");
    assert.equal(closest("zzzzzzzzzz", ["maxEvents", "budgetMs", "signal"]), undefined);
    assert.equal(closest("tx", ["transaction"]), "transaction", "one valid option is the only candidate");
    const e = refusal(() => parse(schema, { maxEvent: 5 }, "run()"), "INVALID_INPUT");
    assert.equal(e.message, 'Unknown option "maxEvent" in run(); did you mean "maxEvents"? Valid options: maxEvents, budgetMs, signal, retry, name.');
    assert.deepEqual(e.details, { field: "maxEvent", option: "maxEvent", suggestion: "maxEvents" });
  });

  test("nested unknown options name their path; far-off names get no guess", () => {
    const e = refusal(() => parse(schema, { retry: { baseMs: 1, capMs: 2, capMS: 3 } }, "work()"), "INVALID_INPUT");
    assert.match(e.message, /^Unknown option "capMS" in "retry" of work\(\); did you mean "capMs"\?/);
    assert.equal(e.details.field, "retry.capMS");
    const far = refusal(() => parse(schema, { qqqqqqqqqqqq: 1 }, "run()"), "INVALID_INPUT");
    assert.match(far.message, /remove it or check its spelling\. Valid options:/);
  });

  test("missing, wrong type, out of range, non-object: each its own message", () => {
    const missing = refusal(() => parse(schema, { retry: { baseMs: 1 } }, "work()"), "INVALID_INPUT");
    assert.equal(missing.message, 'Option "retry.capMs" is missing from work(); add it (expected a whole number from 1 to 1000).');
    const range = refusal(() => parse(schema, { maxEvents: 0 }, "run()"), "INVALID_INPUT");
    assert.equal(range.message, 'Option "maxEvents" of run() is 0: expected a whole number from 1 to 10000.');
    assert.equal(refusal(() => parse(schema, { maxEvents: 1.5 }, "run()"), "INVALID_INPUT").details.value, 1.5);
    assert.equal(refusal(() => parse(schema, "fast", "run()"), "INVALID_INPUT").message, 'Expected run() as an object, not "fast".');
    assert.match(refusal(() => parse(schema, { name: "a\0b" }, "x"), "INVALID_INPUT").message, /name contains a NUL character/);
    assert.deepEqual(parse(schema, undefined, "run()"), {}, "no options at all is fine");
    assert.deepEqual(parse(schema, { maxEvents: 5 }, "run()"), { maxEvents: 5 });
  });

  test("refusals are KeyqErrors with the stable name", () => {
    try {
      parse(schema, { bogus: 1 }, "run()");
      assert.fail("parse accepted an unknown option");
    } catch (err) {
      assert.ok(err instanceof KeyqError);
      assert.equal(err.name, "KeyqError");
      assert.ok(err instanceof Error);
    }
  });
});
