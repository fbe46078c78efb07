// The benchmark's pure helpers: medians, ratio formatting, target verdicts,
// the docs/benchmark.md block replacement and the hot-key stream. No database.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { meets, replaceBetweenMarkers, result, targetText } from "../bench/rows.ts";
import { fmtRatio, makeEvents, median } from "../bench/util.ts";

describe("bench helpers", () => {
  test("median of odd and even counts ignores NaN rounds", () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.equal(median([Number.NaN, 5, 7]), 6);
    assert.ok(Number.isNaN(median([Number.NaN])));
  });

  test("ratios format by size, missing ones as a dash", () => {
    assert.equal(fmtRatio(0.857), "0.86×");
    assert.equal(fmtRatio(19.93), "19.9×");
    assert.equal(fmtRatio(0.00234), "0.0023×");
    assert.equal(fmtRatio(null), "—");
    assert.equal(fmtRatio(Number.POSITIVE_INFINITY), "—");
  });

  test("targets read and judge both ways", () => {
    assert.equal(targetText({ on: "ratio", op: ">=", value: 5 }, "ev/s"), "≥ 5×");
    assert.equal(targetText({ on: "keyq", op: "<=", value: 2 }, "%"), "≤ 2 %");
    assert.equal(targetText(undefined, ""), "—");
    assert.equal(meets({ on: "ratio", op: ">=", value: 0.5 }, 0.49), false);
    assert.equal(meets({ on: "keyq", op: "<=", value: 1 }, 1), true);
    assert.equal(meets({ on: "keyq", op: "<=", value: 1 }, Number.NaN), null);
  });

  test("a row's ratio is the median of the per-round ratios, not the ratio of medians", () => {
    const r = result({
      id: "x",
      label: "x",
      unit: "ev/s",
      reference: "y",
      ratio: true,
      target: { on: "ratio", op: ">=", value: 1 },
      keyq: [10, 100, 30],
      ref: [20, 50, 10],
      ratios: [0.5, 2, 3],
    });
    assert.equal(r.keyq?.median, 30);
    assert.equal(r.ref?.median, 20);
    assert.equal(r.ratio?.median, 2);
    assert.equal(r.met, true);
  });

  test("the docs/benchmark.md block is replaced between its markers only", () => {
    const readme = "a\n<!-- bench-table:start -->\nold\n<!-- bench-table:end -->\nb";
    assert.equal(replaceBetweenMarkers(readme, "new"), "a\n<!-- bench-table:start -->\nnew\n<!-- bench-table:end -->\nb");
    assert.throws(() => replaceBetweenMarkers("no markers", "new"), /markers/);
  });

  test("the hot-key stream puts about the given share on one key", () => {
    const events = makeEvents(4000, 1, { keys: 1000, hotShare: 0.5 });
    const hot = events.filter((e) => e.key === "tenant-hot").length;
    assert.ok(hot > 1800 && hot < 2200, `hot events: ${hot}`);
    assert.ok(new Set(events.map((e) => e.key)).size > 800);
    assert.deepEqual(makeEvents(5, 9), makeEvents(5, 9));
  });
});
