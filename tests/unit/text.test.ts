// Text and JSON Postgres stores unchanged, values as messages show them, and
// the text a handler's error is stored as. No database.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { describeError, MAX_MESSAGE, storable } from "../../src/error-text.ts";
import { checkJson, checkText, show, textProblem } from "../../src/text.ts";
import { refusal } from "../helpers/refused.ts";

/** No NUL, no unpaired surrogate. */
const clean = (s: string): boolean => !/\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

describe("text Postgres can store", () => {
  test("NUL and unpaired surrogates are found, with their index; pairs and plain text pass", () => {
    assert.equal(textProblem("plain"), undefined);
    assert.equal(textProblem("😀 pair"), undefined);
    assert.equal(textProblem("ab\0c"), "contains a NUL character (U+0000) at index 2, which Postgres text cannot hold");
    assert.match(textProblem("x\ud800")!, /unpaired surrogate \(U\+D800\) at index 1/);
    assert.match(textProblem("\udc00x")!, /unpaired surrogate \(U\+DC00\) at index 0/);
    assert.match(textProblem("😀".slice(1))!, /U\+DE00/);
  });

  test("checkText names the field and the event, and returns good text", () => {
    assert.equal(checkText("key", "k1", "send()"), "k1");
    const e = refusal(() => checkText("key", "k\0", "send()"), "INVALID_INPUT");
    assert.match(e.message, /^The key of send\(\) contains a NUL character .*; remove it or encode the value \(e\.g\. base64\)\.$/);
    assert.equal(e.details.field, "key");
  });

  test("payloads JSON would change are refused with their path", () => {
    checkJson({ a: [1, "x", null, true, { b: {} }], u: undefined }, "send()");
    const cases: [unknown, RegExp][] = [
      [{ a: [1, undefined] }, /undefined at payload\.a\[1\].*use null/],
      [{ when: new Date(0) }, /a Date at payload\.when.*toISOString/],
      [{ m: new Map() }, /a Map at payload\.m/],
      [{ n: Number.NaN }, /NaN at payload\.n/],
      [{ big: 5n }, /the bigint 5n at payload\.big/],
      [{ "a b": { f: () => {} } }, /a function at payload\["a b"\]\.f/],
      [{ s: "x\0" }, /the string at payload\.s contains a NUL/],
      [{ ["k\ud800"]: 1 }, /the property name "k\\ud800" at payload .* rename it/],
    ];
    for (const [payload, re] of cases) assert.match(refusal(() => checkJson(payload, "send()"), "INVALID_PAYLOAD").message, re);
    const cyc: Record<string, unknown> = {};
    cyc.self = cyc;
    assert.match(refusal(() => checkJson(cyc, "send()"), "INVALID_PAYLOAD").message, /nesting deeper than 1000 levels \(a cycle\?\)/);
    const trap = new Proxy({}, {
      ownKeys: () => {
        throw new Error("trap");
      },
    });
    assert.match(refusal(() => checkJson(trap, "send()"), "INVALID_PAYLOAD").message, /could not be read \("trap"\)/);
  });
});

describe("show", () => {
  test("values as given: strings quoted, -0, NaN, bigint, symbol, function, objects, classes", () => {
    const cases: [unknown, string][] = [
      ["a", '"a"'],
      [-0, "-0"],
      [Number.NaN, "NaN"],
      [5n, "5n"],
      [Symbol("x"), "Symbol(x)"],
      [function named() {}, "function named"],
      [() => {}, "function (anonymous)"],
      [undefined, "undefined"],
      [null, "null"],
      [{ a: 1 }, '{"a":1}'],
      [[1, undefined], '[1,"undefined"]'],
      [new Map(), "a Map"],
      [{ n: Infinity }, '{"n":"Infinity"}'],
      [Object.create(null), "{}"],
    ];
    for (const [value, shown] of cases) assert.equal(show(value), shown);
    assert.equal(show("x".repeat(200)).length, 80);
    assert.ok(show("x".repeat(200)).endsWith("..."));
  });
});

describe("describeError", () => {
  test("reduces any thrown value to bounded, storable text", () => {
    const cyc: Record<string, unknown> = {};
    cyc.c = cyc;
    const values: unknown[] = [
      null,
      undefined,
      0,
      -0,
      Number.NaN,
      12n,
      Symbol(),
      () => {},
      Object.create(null),
      cyc,
      "\0",
      "\ud800",
      new Error("😀".slice(1) + "x".repeat(10_000)),
      { message: 5, code: 7, name: {} },
      new Proxy({}, {
        get() {
          throw new Error("trap");
        },
        getPrototypeOf() {
          throw new Error("trap");
        },
      }),
    ];
    for (const v of values) {
      const d = describeError(v);
      assert.equal(typeof d.message, "string");
      assert.ok(clean(d.message) && d.message.length <= MAX_MESSAGE + 100, d.message.slice(0, 50));
      assert.ok(JSON.parse(JSON.stringify(d)));
    }
    assert.equal(describeError({ message: 5, code: 7 }).code, "7");
  });

  test("message, code and name as stored", () => {
    const err = Object.assign(new TypeError("bad thing"), { code: "E_BAD" });
    assert.deepEqual(describeError(err), { message: "bad thing", code: "E_BAD", name: "TypeError" });
    assert.deepEqual(describeError("just text"), { message: "just text" });
    assert.deepEqual(describeError({ reason: 1n }), { message: '{"reason":"1n"}' });
    assert.equal(describeError(Object.create(null)).message, "{}");
  });

  test("storable cuts long text, says how much, and replaces NUL and lone surrogates", () => {
    assert.equal(storable("abcdef", 3), "abc… (3 more characters)");
    assert.equal(storable("a\0b", 10), "a\\u0000b");
    assert.equal(storable("a\ud800b\udc00", 10), "a\ufffdb\ufffd");
    assert.equal(storable("😀", 10), "😀");
    assert.equal(storable("😀x", 1), "\ufffd… (2 more characters)", "a cut inside a pair leaves no lone half");
  });
});
