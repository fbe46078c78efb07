import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { closingLines, counts, failedTest } from "../../scripts/lib/test-output.ts";

describe("test output (scripts/test.ts summary)", () => {
  it("names the failed tests of Node, Bun and Deno", () => {
    assert.equal(failedTest("    not ok 3 - each event exactly once"), "each event exactly once");
    assert.equal(failedTest("not ok 12 - tier-a growth"), "tier-a growth");
    assert.equal(failedTest("(fail) wake-ups > an idle worker wakes [1203.55ms]"), "wake-ups > an idle worker wakes");
    assert.equal(failedTest("(fail) plain"), "plain");
    assert.equal(
      failedTest("wake-ups ... an idle worker wakes => ./tests/wakeups.test.ts:12:3"),
      "wake-ups ... an idle worker wakes (./tests/wakeups.test.ts:12:3)",
    );
    assert.equal(failedTest("\x1b[31mnot ok 1 - red\x1b[0m"), "red");
    for (const line of ["ok 3 - fine", "# fail 0", "(pass) fine [1ms]", "  ---"]) assert.equal(failedTest(line), undefined, line);
  });

  it("reads the closing counts", () => {
    const tap = "ok 1 - a\n# tests 2\n# pass 1\n# fail 1\n# skipped 0\n";
    assert.equal(counts(tap), "1 passed, 1 failed, 0 skipped");
    assert.deepEqual(closingLines(tap), ["# pass 1", "# fail 1"]);
    assert.equal(counts(" 5 pass\n 2 skip\n 0 fail\n"), "5 passed, 0 failed, 2 skipped");
    assert.equal(counts("nothing"), "no test counts found");
  });
});
