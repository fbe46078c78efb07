// Grants without a database: the command line's grant flags, the SQL that
// `keyq sql grant` prints, and the refusals of bad grants before anything
// is sent. With a database (a private cluster): tests/roles-*.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { grantSql, KeyqError } from "../../mod.ts";
import { grantFlags, parseCommandLine } from "../../bin/cli.ts";
import { UsageError } from "../../bin/format.ts";

const code = (c: string) => (e: unknown) => e instanceof KeyqError && e.code === c;

describe("grants without a database", () => {
  test("grant flags: comma lists, queue:consumer pairs, --operate and --all", () => {
    const { flags } = parseCommandLine([
      "revoke",
      "app",
      "--produce",
      "orders, audit",
      "--consume",
      "orders:billing,orders:lanes,audit:*",
      "--operate",
      "--all",
    ]);
    assert.deepEqual(grantFlags("app", flags, "revoke"), {
      role: "app",
      produce: ["orders", "audit"],
      consume: { orders: ["billing", "lanes"], audit: ["*"] },
      operate: true,
      all: true,
    });
    assert.equal(grantFlags("app", flags, "grant").all, undefined, "--all belongs to revoke");
    for (const bad of ["orders", ":billing", "orders:"]) {
      const { flags: f } = parseCommandLine(["grant", "app", "--consume", bad]);
      assert.throws(() => grantFlags("app", f, "grant"), UsageError, bad);
    }
    assert.throws(() => parseCommandLine(["grants", "--operate"]), UsageError);
    assert.throws(() => parseCommandLine(["grant", "app", "--all"]), UsageError, "grant has no --all");
  });

  test("grantSql: literals quoted, names checked, the same call as grant()", () => {
    assert.equal(
      grantSql("keyq", { role: "o'brien", produce: ["orders"], consume: { orders: ["billing"] }, operate: true }),
      `select "keyq".grant_access(role => 'o''brien', produce => array['orders']::text[], consume => '{"orders":["billing"]}'::jsonb, operate => true);`,
    );
    assert.equal(
      grantSql("kq", { role: "w", all: true, revoke: true }),
      `select "kq".revoke_access(role => 'w', produce => array[]::text[], consume => '{}'::jsonb, operate => false, every_grant => true);`,
    );
    assert.throws(() => grantSql("keyq", { role: "w" }), code("INVALID_INPUT"), "a grant of nothing");
    assert.throws(() => grantSql("keyq", { role: "", produce: ["orders"] }), code("INVALID_INPUT"));
    assert.throws(() => grantSql("keyq", { role: "x".repeat(64), produce: ["orders"] }), code("INVALID_INPUT"));
    assert.throws(() => grantSql("keyq", { role: "w", produce: ["or'ders"] }), code("INVALID_IDENTIFIER"));
    assert.throws(() => grantSql("keyq", { role: "w", consume: { orders: ["bad name"] } }), code("INVALID_IDENTIFIER"));
    assert.throws(() => grantSql("bad schema", { role: "w", operate: true }), code("INVALID_IDENTIFIER"));
    assert.throws(() => grantSql("keyq", { role: "w", operate: true, typo: 1 } as never), code("INVALID_INPUT"));
    assert.match(grantSql("keyq", { role: "w", produce: ["*"], consume: { "*": ["*"] } }), /array\['\*'\]::text\[\], consume => '\{"\*":\["\*"\]\}'/);
  });
});
