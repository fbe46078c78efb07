import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { closingLines, counts, failedTest, failureReader } from "../../scripts/lib/test-output.ts";

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

  it("keeps each failed test's first error line, as Node, Bun and Deno print it", () => {
    const read = (out: string) => {
      const r = failureReader();
      for (const line of out.split("\n")) r.line(line);
      return r.failures;
    };
    // Excerpts of real output of one file with two failing tests.
    const node = [
      "    # Subtest: one fails",
      "    not ok 1 - one fails",
      "      ---",
      "      failureType: 'testCodeFailure'",
      "      error: |-",
      "        only 31 of 32 workers",
      "        ",
      "        31 !== 32",
      "      code: 'ERR_ASSERTION'",
      "      ...",
      "    ok 2 - two passes",
      "    not ok 3 - three throws",
      "      ---",
      "      error: 'boom here'",
      "      ...",
      "    not ok 4 - four throws",
      "      ---",
      "      error: \"Cannot read properties of undefined (reading 'key')\"",
      "      ...",
      "not ok 1 - suite",
      "  ---",
      "  error: '2 subtests failed'",
    ].join("\n");
    assert.deepEqual(read(node), [
      { name: "one fails", error: "only 31 of 32 workers" },
      { name: "three throws", error: "boom here" },
      { name: "four throws", error: "Cannot read properties of undefined (reading 'key')" },
      { name: "suite", error: "2 subtests failed" },
    ]);
    const bun = [
      '4 |   test("one fails", () => { assert.equal(31, 32, "only 31 of 32 workers"); });',
      "AssertionError: only 31 of 32 workers",
      "",
      "31 !== 32",
      "(fail) suite > one fails [3.19ms]",
      "(pass) suite > two passes [0.15ms]",
      "error: boom here",
      "      at <anonymous> (/work/main/tests/zz-tmp.test.ts:6:42)",
      "(fail) suite > three throws [0.10ms]",
    ].join("\n");
    assert.deepEqual(read(bun), [
      { name: "suite > one fails", error: "AssertionError: only 31 of 32 workers" },
      { name: "suite > three throws", error: "boom here" },
    ]);
    const deno = [
      " ERRORS ",
      "",
      "suite ... one fails => ext:deno_node/testing.ts:1:23191",
      "error: AssertionError: only 31 of 32 workers",
      "",
      "suite ... three throws => ext:deno_node/testing.ts:1:21231",
      "error: Error: boom here",
      "",
      " FAILURES ",
      "",
      "suite ... one fails => ext:deno_node/testing.ts:1:23191",
      "suite ... three throws => ext:deno_node/testing.ts:1:21231",
    ].join("\n");
    assert.deepEqual(read(deno), [
      { name: "suite ... one fails (ext:deno_node/testing.ts:1:23191)", error: "AssertionError: only 31 of 32 workers" },
      { name: "suite ... three throws (ext:deno_node/testing.ts:1:21231)", error: "Error: boom here" },
    ]);
  });
});
