// The engine seam without a database: every declared call checks its reply's
// shape (a malformed or stale reply is BAD_REPLY, never a TypeError further
// on), and `engine(exec, schema)` binds the calls once per executor.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Driver, SqlParam } from "../../src/driver.ts";
import { KeyqError } from "../../src/errors.ts";
import { ENGINE, engine } from "../../src/engine/calls.ts";

/** A driver answering every query with one `r` column holding `value` as JSON text; it records the statements. */
function answering(value: unknown): Driver & { seen: { text: string; params: SqlParam[] }[] } {
  const seen: { text: string; params: SqlParam[] }[] = [];
  return {
    name: "fake",
    seen,
    query: (text: string, params: SqlParam[] = []) => {
      seen.push({ text, params });
      return Promise.resolve([{ r: JSON.stringify(value) }]);
    },
  } as unknown as Driver & { seen: typeof seen };
}

const isBadReply = (fn: string) => (e: unknown) => {
  assert.ok(e instanceof KeyqError, String(e));
  assert.equal(e.code, "BAD_REPLY");
  assert.deepEqual(e.details, { fn });
  return true;
};

const queue = { name: "jobs", tables: 3, currentTable: 0, rotatedAt: "2026-01-01T00:00:00Z", maxRetries: 5 };
const history = { id: "1", txid: "7", type: "T", key: "a", payload: 1, time: "2026-01-01T00:00:00Z", position: "2:7:1" };
const dead = { id: "1", queue: "jobs", consumer: "c", slot: 0, eventId: "9", type: "T", key: null, attempts: 3 };

describe("engine replies", () => {
  test("no declaration accepts a missing, a foreign or a stale reply", () => {
    for (const [ts, f] of Object.entries(ENGINE)) {
      for (const bad of [undefined, null, "COMMIT", { unexpected: 1 }, [{ unexpected: 1 }], -1]) {
        assert.equal(f.shape(bad), false, `${ts} refuses ${JSON.stringify(bad)}`);
      }
    }
  });

  test("a well-formed reply passes, the same reply with a field of the wrong type is BAD_REPLY", async () => {
    const cases: [name: string, good: unknown, bad: unknown, call: (d: Driver) => Promise<unknown>][] = [
      [
        "send",
        { id: "1", deduped: false },
        { id: 1, deduped: false },
        (d) => engine(d, "k").send({ queue: "q", type: "T", payload: 1, key: null, dedupKey: null, ttl: null, trace: null }),
      ],
      ["send_batch", ["1", { id: "2", deduped: true }], ["1", { id: 2 }], (d) => engine(d, "k").sendBatch({ queue: "q", events: [], trace: null })],
      [
        "send_rows",
        { ids: [["1", 2]], dup: [[1, "1"]] },
        { ids: [[1, 2]], dup: [] },
        (d) => engine(d, "k").sendRows({ queue: "q", types: ["T"], keys: [null], payloads: "1", dedupKeys: null, ttls: null, trace: null }),
      ],
      ["create_queue", { created: true, queue }, { created: true, queue: { name: "jobs" } }, (d) => engine(d, "k").createQueue({ queue: "q", settings: {} })],
      ["list_queues", [queue], [queue, { ...queue, tables: "3" }], (d) => engine(d, "k").listQueues({})],
      [
        "key_history",
        [history],
        [{ ...history, position: 2 }],
        (d) => engine(d, "k").keyHistory({ queue: "q", key: "a", start: null, after: null, limit: 10 }),
      ],
      ["dlq_list", [dead], [{ ...dead, attempts: "3" }], (d) => engine(d, "k").dlqList({ filter: {}, limit: 10 })],
      ["dlq_count", 4, "4", (d) => engine(d, "k").dlqCount({ filter: {} })],
      ["consumer_slot_of", 3, 1.5, (d) => engine(d, "k").slotOf({ queue: "q", consumer: "c", key: "a", slotCount: 4 })],
      [
        "blocked_keys",
        [{ slot: 0, key: "a", headId: "1", since: "x", held: 2 }],
        [{ slot: 0, key: "a" }],
        (d) => engine(d, "k").blockedKeys({ queue: "q", consumer: "c" }),
      ],
      ["unsubscribe", { removed: true }, { dropped: true }, (d) => engine(d, "k").unsubscribe({ queue: "q", consumer: "c" })],
      [
        "status",
        [{ queue: "q", tables: 3, currentTable: 0, lastTick: null, consumers: [] }],
        [{ queue: "q" }],
        (d) => engine(d, "k").status({ queue: null, staleAfter: 300, afterQueue: null, maxQueues: null }),
      ],
    ];
    for (const [name, good, bad, call] of cases) {
      assert.deepEqual(await call(answering(good)), good, `${name} passes its own reply`);
      await assert.rejects(call(answering(bad)), isBadReply(name), `${name} refuses ${JSON.stringify(bad)}`);
    }
  });

  test("a binding is built once per executor and schema; its calls name the schema", async () => {
    const d = answering(3);
    const db = engine(d, "one");
    assert.equal(engine(d, "one"), db, "the same executor and schema: the same binding");
    const other = engine(d, "two");
    assert.notEqual(other, db);
    assert.equal(other.schema, "two");
    assert.equal(await db.dlqCount({ filter: {} }), 3);
    assert.equal(await other.dlqCount({ filter: {} }), 3);
    assert.match(d.seen[0]!.text, /^select "one"\.dlq_count\(filter => \$1::text::jsonb\)::text as r$/);
    assert.match(d.seen[1]!.text, /^select "two"\.dlq_count\(/);
    assert.equal(Object.keys(db).length, 2, "a binding holds its executor and schema only; the calls are shared");
    assert.equal(Object.getPrototypeOf(db), Object.getPrototypeOf(engine(answering(0), "k")));
  });
});
