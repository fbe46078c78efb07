// Tier B batches in the compact row form (receive_ordered_rows), shown on a
// real database: the same events as receive_ordered's objects and as the
// one-text form of earlier builds (receive_ordered_wire), payloads parsed
// only when read, and the pause policy's held keys filtered out of the rows
// without losing the slot's null-key events.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fromPlain, parseOrderedLines, parseWire, type PlainBatch } from "../src/engine/wire.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { readRolledBack } from "./helpers/keyq.ts";

const skip = await dbSkip();

describe("Tier B: row form", () => {
  test("pause: a blocked key's later events are held, the slot's null-key and other events still come", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files", { retryBase: "1h", retryCap: "1h" });
      const c = f.q.ordered<number>("files", "idx", { slots: 1, onFailure: "pause" });
      await c.subscribe();
      await f.q.send("files", { type: "E", payload: 1, key: "a" });
      const first = await c.run({ handler: () => Promise.reject(new Error("head fails")) });
      assert.equal(first.retried, 1, "a's head failed and blocks a");
      assert.deepEqual((await c.blockedKeys()).map((b) => b.key), ["a"]);
      // A later window: the engine holds a's event; null-key and b events are delivered.
      await f.q.sendBatch("files", [{ type: "E", payload: 2, key: "a" }, { type: "E", payload: 3 }, { type: "E", payload: 4, key: "b" }]);
      const seen: string[] = [];
      await c.run({ handler: (ev) => void seen.push(`${ev.key}:${ev.payload}`) });
      assert.deepEqual(seen, ["null:3", "b:4"]);
      assert.deepEqual((await c.blockedKeys()).map((b) => [b.key, b.held]), [["a", 1]], "a's later event is held, not lost");
    });
  });

  test("the rows, the one-text form and the SQL callers' objects hold the same events; payloads stay JSON text on the wire", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      const c = f.q.ordered("files", "idx", { slots: 2 });
      await c.subscribe();
      const payload = { s: 'quote " and \\ and ü\nand a line break', n: [1, 2.5, null] };
      await f.q.sendBatch("files", [{ type: "E", payload: payload as unknown, key: "k1" }, { type: "E", payload: "x", key: "k1" }]);
      await f.q.tick("files");
      const slot = await c.slotOf("k1");
      // Each read is rolled back, so all read the same events.
      const call = (fn: string) => `"${f.schema}".${fn}(queue => 'files', consumer => 'idx', slots => '{${slot}}', max_events => 10)`;
      const read = (fn: string) => readRolledBack(f.q, `select ${call(fn)}::text`);
      const lines = JSON.parse(await readRolledBack(f.q, `select array_to_json(array(select ${call("receive_ordered_rows")}))::text`)) as string[];
      const head = JSON.parse(lines.at(-1)!) as { slot: number; rows?: unknown };
      const rows = lines.slice(0, -1).map((l) => JSON.parse(l.slice(0, l.indexOf("\n"))) as unknown[]);
      const payloads = lines.slice(0, -1).map((l) => l.slice(l.indexOf("\n") + 1));
      const o = JSON.parse(await read("receive_ordered")) as { slot: number; events: { id: string; payload: unknown }[] };
      assert.equal(head.slot, slot, "the last row is the batch's head");
      assert.equal(head.rows, undefined);
      assert.equal(o.slot, slot);
      assert.deepEqual(rows.map((r) => r[0]), o.events.map((e) => e.id));
      assert.equal(rows[0]!.length, 6, "a row's head holds no payload: [id, txid, type, key, time, trace]");
      assert.deepEqual(payloads.map((p) => JSON.parse(p)), [payload, "x"], "each payload follows its row's head after a newline");
      // The one-text form of earlier builds: the same batch.
      const text = await read("receive_ordered_wire");
      const byText = fromPlain(parseWire(text) as PlainBatch);
      const byRows = fromPlain(parseOrderedLines(lines) as PlainBatch);
      assert.equal(byText.slot, slot);
      assert.deepEqual(byText, byRows);
      assert.deepEqual(byRows.events.map((e) => JSON.parse(e.raw!)), [payload, "x"]);
      assert.deepEqual(o.events.map((e) => e.payload), [payload, "x"]);
    });
  });
});
