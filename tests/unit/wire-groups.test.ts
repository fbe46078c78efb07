// The Tier B wire reply of a batch that read several slots: "groups" must
// account for every retry and row, each slot once, the first being "slot";
// each event then carries the slot it came from (retries of every slot come
// first, then rows, each part in group order).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fromPlain, isOrderedBatch, type PlainBatch, type PlainRow } from "../../src/engine/wire.ts";

const row = (id: string): PlainRow => [id, "7", "T", `k${id}`, "2026-01-01T00:00:00+00:00", "1", null];
const retry = (id: string) => ({ id, txid: "5", type: "T", key: `k${id}`, payload: 1, time: "2026-01-01T00:00:00+00:00", retry: 1, redelivered: true });

describe("wire: a Tier B batch of several slots", () => {
  test("groups and drained are checked", () => {
    const ok = { busy: false, slot: 2, retries: [retry("1")], rows: [row("2"), row("3"), row("4")], groups: [[2, 1, 1], [0, 0, 2]], drained: true };
    assert.equal(isOrderedBatch(ok), true);
    assert.equal(isOrderedBatch({ ...ok, drained: undefined }), true);
    assert.equal(isOrderedBatch({ busy: false, slot: null, retries: [], rows: [], groups: [] }), true);
    const bad: [string, unknown][] = [
      ["a row no group counts", { ...ok, groups: [[2, 1, 1], [0, 0, 1]] }],
      ["a retry no group counts", { ...ok, groups: [[2, 0, 1], [0, 0, 2]] }],
      ["a slot twice", { ...ok, groups: [[2, 1, 1], [2, 0, 2]] }],
      ["a first group that is not slot", { ...ok, groups: [[0, 0, 2], [2, 1, 1]] }],
      ["a negative count", { ...ok, groups: [[2, 1, 1], [0, -1, 3]] }],
      ["a group of two", { ...ok, groups: [[2, 1], [0, 0, 2]] }],
      ["groups with no slot", { ...ok, slot: null }],
      ["drained false", { ...ok, drained: false }],
    ];
    for (const [what, reply] of bad) assert.equal(isOrderedBatch(reply), false, what);
  });

  test("each event carries its group's slot; one group leaves the batch's slot to every event", () => {
    const b: PlainBatch = { busy: false, slot: 2, retries: [retry("1"), retry("9")], rows: [row("2"), row("3"), row("4")], groups: [[2, 1, 1], [0, 1, 2]] };
    const r = fromPlain(b);
    assert.deepEqual(r.events.map((e) => [e.id, e.slot]), [["1", 2], ["9", 0], ["2", 2], ["3", 0], ["4", 0]]);
    assert.deepEqual([r.slot, r.slots], [2, [2, 0]]);
    const one = fromPlain({ busy: false, slot: 3, retries: [], rows: [row("2")], groups: [[3, 0, 1]], drained: true });
    assert.deepEqual([one.slot, one.slots, one.drained, one.events[0]!.slot], [3, undefined, true, undefined]);
  });
});
