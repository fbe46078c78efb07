// What the driver adapters share (src/drivers/internal/shared.ts) and the one list of
// connection-loss codes (faults.ts connectionLost). No database.
import assert from "node:assert/strict";
import { test } from "node:test";
import { poolerError, wentAstray } from "../../src/drivers/internal/shared.ts";
import { classify, connectionLost } from "../../src/faults.ts";

test("wentAstray: the pooler's prepared-statement SQLSTATEs; strict reads 08P01's message", () => {
  assert.equal(wentAstray({ code: "26000", message: 'prepared statement "P1" does not exist' }), true);
  assert.equal(wentAstray({ code: "42P05", message: 'prepared statement "P0" already exists' }), true);
  const bind = { code: "08P01", message: 'bind message supplies 3 parameters, but prepared statement "P7" requires 2' };
  assert.equal(wentAstray(bind), true);
  assert.equal(wentAstray(bind, true), true);
  assert.equal(wentAstray({ code: "08P01", message: "invalid frontend message type 0" }), true, "postgres.js notes any 08P01");
  assert.equal(wentAstray({ code: "08P01", message: "invalid frontend message type 0" }, true), false, "Bun.SQL only a prepared statement's");
  for (const e of [{ code: "23505" }, { code: 26000 }, null, undefined, "26000"]) assert.equal(wentAstray(e), false);
});

test("poolerError: PREPARED_STATEMENTS_UNSUPPORTED naming the client, the SQLSTATE and the option that fixes it", () => {
  const cause = { code: "42P05", message: 'prepared statement "P0" already exists' };
  const e = poolerError("Bun.SQL", "new Bun.SQL(url, { prepare: false })", cause);
  assert.equal(e.code, "PREPARED_STATEMENTS_UNSUPPORTED");
  assert.match(e.message, /^Bun\.SQL sent a named prepared statement .*\(42P05: prepared statement "P0" already exists\): a transaction-mode pooler/);
  assert.match(e.message, /Create the client with new Bun\.SQL\(url, \{ prepare: false \}\)\.$/);
  assert.deepEqual(e.details, { code: "42P05", prepare: true });
  assert.equal(e.cause, cause);
  const seen = poolerError("postgres.js", "postgres(url, { prepare: false })", null, "its COMMIT silently rolled back", " The batch was rolled back.");
  assert.match(seen.message, /\(its COMMIT silently rolled back\).*postgres\(url, \{ prepare: false \}\)\. The batch was rolled back\.$/);
  assert.equal(seen.cause, undefined);
});

test("connectionLost: every code the postgres.js adapter stopped on before, by code only; classify agrees", () => {
  const gone = [
    "CONNECTION_CLOSED",
    "CONNECTION_DESTROYED",
    "CONNECT_TIMEOUT",
    "57P01",
    "57P02",
    "57P03",
    "25P03",
    "57P05",
    "08006",
    "08P01",
    "ECONNRESET",
    "EPIPE",
    "ECONNREFUSED",
  ];
  for (const code of gone) {
    assert.equal(connectionLost({ code }), true, code);
    assert.equal(classify({ code }), "connection", code);
  }
  for (const code of ["CONNECTION_ENDED", "53300", "40001", "23505", "42P01"]) assert.equal(connectionLost({ code }), false, code);
  // Words and causes are classify's: a driver's own code list does not read them.
  assert.equal(connectionLost({ message: "Connection terminated unexpectedly" }), false);
  assert.equal(connectionLost({ cause: { code: "57P01" } }), false);
  assert.equal(connectionLost(null), false);
});
