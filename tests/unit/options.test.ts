// Option checks of the public API, through a counting fake driver: every
// refusal here happens before keyq sends a single query, so no database.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Consumer, type Driver, keyq, type TxDriver } from "../../mod.ts";
import { refused } from "../helpers/refused.ts";

/** A driver with transactions that counts what reaches it. */
function counting(): { driver: TxDriver; queries: () => number } {
  let n = 0;
  const driver: TxDriver = { name: "fake", query: () => (n++, Promise.resolve([])), transaction: (fn) => (n++, fn(driver)) };
  return { driver, queries: () => n };
}

describe("options, refused before any query", () => {
  test("a misspelt option names the closest valid one, in every call", async () => {
    const { driver, queries } = counting();
    const q = keyq(driver, { schema: "kq_fake" });
    const c = q.consumer("files", "c");
    const handler = () => {};
    const cases: [() => unknown, string, string, string][] = [
      [() => keyq(driver, { schem: "x" } as never), "schem", "schema", "keyq options"],
      [() => c.run({ handler, budgetMS: 5 } as never), "budgetMS", "budgetMs", "run options"],
      [() => c.work({ handler, singal: AbortSignal.abort() } as never), "singal", "signal", "work options"],
      [() => c.batch({ handler, maxEvent: 5 } as never), "maxEvent", "maxEvents", "batch options"],
      [() => q.tick("files", { forse: true } as never), "forse", "force", "tick options"],
      [() => q.send("files", { type: "A", payload: 1 }, { txn: {} } as never), "txn", "tx", "send options"],
      [() => q.send("files", { type: "A", payload: 1, dedupkey: "x" } as never), "dedupkey", "dedupKey", "the event"],
      [() => q.createQueue("files", { maxRetrys: 3 } as never), "maxRetrys", "maxRetries", "queue settings"],
    ];
    for (const [call, typo, fix, where] of cases) {
      const e = await refused(call, "INVALID_INPUT");
      assert.ok(e.message.startsWith(`Unknown option "${typo}" in ${where}; did you mean "${fix}"?`), e.message);
      assert.equal(e.details.suggestion, fix);
    }
    assert.equal(queries(), 0);
  });

  test("bad values, misplaced options and conflicting handlers", async () => {
    const { driver, queries } = counting();
    const q = keyq(driver, { schema: "kq_fake" });
    const c = q.consumer("files", "c");
    await refused(() => keyq(driver, { schema: "Bad" }), "INVALID_IDENTIFIER");
    await refused(() => q.send("1files", { type: "A", payload: 1 }), "INVALID_IDENTIFIER");
    assert.match(
      (await refused(() => q.ordered("files", "o", { slots: 0 }), "INVALID_INPUT")).message,
      /"slots" .* is 0: expected a whole number from 1 to 1024/,
    );
    assert.match(
      (await refused(() => c.batch({ handler: () => {}, budgetMs: 5 } as never), "INVALID_INPUT")).message,
      /"budgetMs" applies to run\(\) and work\(\), not batch\(\)/,
    );
    assert.match((await refused(() => c.batch({ handler: () => {}, handleBatch: () => {} } as never), "INVALID_INPUT")).message, /exactly one of "handler"/);
    assert.match((await refused(() => q.send("files", { type: "A", payload: 1, ttl: "1h" }), "INVALID_INPUT")).message, /"ttl" .* needs a "dedupKey"/);
    await refused(() => q.send("files", { type: "A", payload: 1, key: "k\0" }), "INVALID_INPUT");
    await refused(() => q.send("files", { type: "A", payload: new Date() }), "INVALID_PAYLOAD");
    assert.equal(queries(), 0);
  });
});

describe("refusal before any request: drivers without transactions", () => {
  test("a counting fake driver sees 0 queries for run/work/batch", async () => {
    let queries = 0;
    const fake: Driver = { name: "fake-http", query: () => (queries++, Promise.resolve([])) };
    const q = keyq(fake, { schema: "kq_fake" });
    // The types give such a client no consuming calls (tests/types/drivers.types.ts); JavaScript callers get the refusal.
    const consumers = [q.consumer("files", "c"), q.exclusive("files", "x"), q.ordered("files", "o", { slots: 2 })] as unknown as Consumer[];
    const messages = new Set<string>();
    for (const c of consumers) {
      messages.add((await refused(c.run({ handler: () => {} }), "TRANSACTIONS_UNSUPPORTED")).message);
      messages.add((await refused(c.work({ handler: () => {}, signal: AbortSignal.timeout(10_000) }), "TRANSACTIONS_UNSUPPORTED")).message);
      messages.add((await refused(c.batch({ handler: () => {} }), "TRANSACTIONS_UNSUPPORTED")).message);
    }
    // @ts-expect-error migrate() needs a TxDriver
    messages.add((await refused(() => q.migrate(), "TRANSACTIONS_UNSUPPORTED")).message);
    // @ts-expect-error q.transaction() needs a TxDriver
    messages.add((await refused(() => q.transaction(() => Promise.resolve()), "TRANSACTIONS_UNSUPPORTED")).message);
    assert.deepEqual([...messages], [
      "The fake-http driver has no interactive transactions, so it cannot consume, migrate or run q.transaction(); use a Pool or Client driver (for Neon: fromNeonPool), or apply migrationSql() by hand.",
    ], "one refusal, one message");
    assert.equal(queries, 0);
  });

  test("q.transaction(fn) runs fn in the driver's transaction and resolves to its result", async () => {
    const { driver, queries } = counting();
    const q = keyq(driver, { schema: "kq_fake" });
    const out = await q.transaction(async (tx) => (await tx.query("select 1")).length + 41);
    assert.equal(out, 41);
    assert.equal(queries(), 2, "the fake's transaction and the query in it");
  });
});
