// Slot math without a database: the committed slot_of values (slot-values.ts)
// against the formula, and the properties ordered consumers rely on. The
// database test tests/slot-values.test.ts checks the same table against the
// installed function, so a changed slot_of fails one of the two.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { SLOT_VALUES, slotFromHash } from "./slot-values.ts";

describe("slot math", () => {
  test("every recorded slot is the non-negative remainder of the key's hash", () => {
    for (const row of SLOT_VALUES) {
      for (const [n, slot] of Object.entries(row.slots)) {
        assert.equal(slotFromHash(row.hash, Number(n)), slot, `slot_of(${JSON.stringify(row.key)}, ${n})`);
      }
    }
  });

  test("negative hashes map into 0..n-1, not to a negative slot (SQL % truncates)", () => {
    const negative = SLOT_VALUES.filter((r) => r.hash.startsWith("-"));
    assert.ok(negative.length >= 3, "the table covers negative hashes");
    for (const row of negative) {
      assert.ok(Number(BigInt(row.hash) % 7n) < 0, "a truncating remainder alone would be negative");
      assert.ok(row.slots[7]! >= 0 && row.slots[7]! < 7);
    }
    assert.equal(slotFromHash("-1", 16), 15);
    assert.equal(slotFromHash("-9223372036854775808", 1000), 192); // int8 minimum: no overflow
  });

  test("one slot means slot 0; slots stay in range; powers of two keep the low bits", () => {
    for (const row of SLOT_VALUES) {
      assert.equal(row.slots[1], 0);
      for (const [n, slot] of Object.entries(row.slots)) assert.ok(slot >= 0 && slot < Number(n), `${slot} < ${n}`);
      // Doubling the slot count splits a slot in two: slot(16) mod 2 is slot(2).
      assert.equal(row.slots[16]! % 2, row.slots[2]);
    }
  });

  test("the recorded keys are spread, not all in one slot", () => {
    const used = new Set(SLOT_VALUES.map((r) => r.slots[16]));
    assert.ok(used.size >= 5, `10 keys over 16 slots used ${used.size} slots`);
    assert.equal(new Set(SLOT_VALUES.map((r) => r.hash)).size, SLOT_VALUES.length, "distinct keys, distinct hashes");
  });
});
