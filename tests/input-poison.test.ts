// Input contract: whatever a handler throws (NUL bytes, cut surrogate pairs,
// cycles, symbols, 5 MB messages) is stored as text and the consumer moves on
// (split from tests/input-contract.test.ts).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MAX_MESSAGE } from "../src/error-text.ts";
import { dbSkip } from "./helpers/db.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

/** Storable: no NUL, no unpaired surrogate. */
const storable = (s: string): boolean => !/\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

describe("input contract: poisoned errors", () => {
  let f: Fixture;
  before(async () => {
    if (skip) return;
    f = await pgFixture({ max: 3 });
  });
  after(async () => {
    await f?.close();
  });

  test("the poisoned errors: whatever a handler throws is stored as text; the consumer moves on", { skip }, async () => {
    await f.q.createQueue("poison", { maxRetries: 1, retryBase: 1, retryCap: 2 });
    const cyclic: Record<string, unknown> = { why: "cycle" };
    cyclic.self = cyclic;
    const throwing = Object.defineProperty(new Error("x"), "message", {
      get() {
        throw new Error("getter");
      },
    });
    const poisons: Record<string, () => unknown> = {
      nul: () => new Error("bad\0byte"),
      cutPair: () => new Error("cut " + "😀".slice(0, 1)),
      bareObject: () => Object.create(null),
      nulString: () => "plain string \0 with NUL",
      huge: () => new Error("x".repeat(5_000_000)),
      cyclicObject: () => cyclic,
      throwingGetter: () => throwing,
      symbol: () => Symbol("s"),
      undefinedValue: () => undefined,
      codeWithNul: () => Object.assign(new Error("coded"), { code: "E\0", name: "Bad\ud800" }),
    };
    const kinds = Object.keys(poisons);
    const events = kinds.flatMap((k, i) => [{ type: "Poison", payload: k, key: `p${i}` }, { type: "Good", payload: i, key: `g${i}` }]);
    const c = f.q.consumer("poison", "victim");
    await c.subscribe();
    await f.q.sendBatch<unknown>("poison", events);
    const good: number[] = [];
    const handler = (ev: { type: string; payload: unknown }) => {
      if (ev.type === "Poison") throw poisons[ev.payload as string]!();
      good.push(ev.payload as number);
    };
    const first = await c.run({ handler, maxEvents: 7 });
    assert.deepEqual(good.sort((a, b) => a - b), kinds.map((_, i) => i), "every good event behind a poisoned one committed");
    let retried = first.retried;
    let dead = first.deadLettered;
    for (let i = 0; i < 100 && dead < kinds.length; i++) {
      await new Promise((r) => setTimeout(r, 20));
      const r = await c.run({ handler });
      retried += r.retried;
      dead += r.deadLettered;
    }
    assert.equal(retried, kinds.length, "every poisoned event was retried once (maxRetries 1)");
    assert.equal(dead, kinds.length, "then dead-lettered");
    const letters = await f.q.dlq.list<string>({ queue: "poison", consumer: "victim" });
    assert.equal(letters.length, kinds.length);
    for (const d of letters) {
      const e = d.error!;
      assert.equal(typeof e.message, "string");
      assert.ok(storable(e.message) && e.message.length <= MAX_MESSAGE + 100, `${d.payload}: ${e.message.slice(0, 80)}`);
    }
    const by = Object.fromEntries(letters.map((d) => [d.payload, d.error!]));
    assert.equal(by.nul!.message, "bad\\u0000byte");
    assert.equal(by.cutPair!.message, "cut \ufffd");
    assert.equal(by.bareObject!.message, "{}");
    assert.match(by.huge!.message, /more characters\)$/);
    assert.match(by.cyclicObject!.message, /object/i);
    assert.equal(by.symbol!.message, "Symbol(s)");
    assert.equal(by.undefinedValue!.message, "undefined");
    assert.deepEqual([by.codeWithNul!.code, by.codeWithNul!.name], ["E\\u0000", "Bad\ufffd"]);
    assert.equal((await f.q.status({ queue: "poison" }))[0]!.consumers[0]!.cursors[0]!.windowOpen, false);
  });
});
