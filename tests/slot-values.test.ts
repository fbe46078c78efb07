// The installed slot_of against the values committed in
// tests/unit/slot-values.ts: a change to the function (which slot indexes
// and every ordered consumer's routing depend on) fails here, and the unit
// test checks the committed values against the formula without a database.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { NULL_KEY_SLOT, SLOT_VALUES } from "./unit/slot-values.ts";

const skip = await dbSkip();

describe("slot_of is frozen", () => {
  test("the installed slot_of and hashtextextended give the committed values", { skip }, () =>
    withPg({ max: 1 }, async (f) => {
      for (const row of SLOT_VALUES) {
        const [h] = await f.raw("select hashtextextended($1, 0)::text as h", [row.key]);
        assert.equal(h!.h, row.hash, `hashtextextended(${JSON.stringify(row.key)}, 0)`);
        for (const [n, slot] of Object.entries(row.slots)) {
          const [r] = await f.raw(`select "${f.schema}".slot_of($1, $2::int) as s`, [row.key, n]);
          assert.equal(Number(r!.s), slot, `slot_of(${JSON.stringify(row.key)}, ${n})`);
        }
      }
      for (const n of ["1", "8", "1000"]) {
        const [r] = await f.raw(`select "${f.schema}".slot_of(null, $1::int) as s`, [n]);
        assert.equal(Number(r!.s), NULL_KEY_SLOT);
      }
    }));
});
