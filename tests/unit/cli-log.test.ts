// The CLI's log and operator commands without a database: positions, queue
// settings as flags, confirmations, exit codes, hints that name commands.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KeyqError } from "../../mod.ts";
import { checkUrl, cliMessage, parseCommandLine, report } from "../../bin/cli.ts";
import { UsageError } from "../../bin/format.ts";
import { position, settingFlags, settingsFromFlags } from "../../bin/log.ts";
import { scoped } from "../helpers/scope.ts";

describe("keyq CLI: log and operator commands (no database)", () => {
  test("positions: latest, earliest, an id, an ISO date; anything else is a usage error", () => {
    assert.equal(position("latest", "t"), "latest");
    assert.equal(position("earliest", "t"), "earliest");
    assert.equal(position("42", "t"), "42");
    assert.deepEqual(position("2026-12-01T10:00:00Z", "t"), new Date("2026-12-01T10:00:00Z"));
    for (const bad of ["yesterday", "-1", "1.5", "2026-13-45", undefined]) assert.throws(() => position(bad, "t"), UsageError, String(bad));
  });

  test("queue settings as flags: counts are whole numbers, durations as given, tables only when creating", () => {
    assert.ok(settingFlags(true).includes("tables") && !settingFlags(false).includes("tables"));
    assert.ok(settingFlags(false).includes("retention") && settingFlags(false).includes("max-retries"));
    assert.deepEqual(settingsFromFlags({ "max-retries": "3", retention: "7d", tables: "4" }, true), { maxRetries: 3, retention: "7d", tables: 4 });
    assert.deepEqual(settingsFromFlags({ retention: "0", tables: "4" }, false), { retention: "0" });
    assert.throws(() => settingsFromFlags({ "tick-max-count": "lots" }, true), /--tick-max-count needs a whole number/);
    assert.throws(() => parseCommandLine(["update-queue", "q", "--tables", "4"]), /--tables does not apply to "keyq update-queue"/);
    assert.deepEqual(parseCommandLine(["seek", "q", "c", "earliest", "--slot", "3", "--yes"]).flags, { slot: "3", yes: true });
    assert.throws(() => parseCommandLine(["pause", "q", "c", "--yes"]), /--yes does not apply to "keyq pause"/);
  });

  test("a malformed DATABASE_URL is named (its password hidden); a refused value exits 2; other errors exit 1", async () => {
    assert.doesNotThrow(() => checkUrl("postgres://u:p@h:5432/db"));
    assert.doesNotThrow(() => checkUrl("postgresql://h/db"));
    assert.throws(() => checkUrl("localhost:5432/db"), /DATABASE_URL is not a postgres:\/\/ URL/);
    assert.throws(() => checkUrl("mysql://u:secret@h/db"), (e: Error) => e instanceof UsageError && !e.message.includes("secret"));
    await scoped((defer) => {
      const original = console.error;
      defer(() => (console.error = original));
      console.error = () => {};
      assert.equal(report(new KeyqError("INVALID_INPUT", "bad")), 2);
      assert.equal(report(new KeyqError("POSITION_OUT_OF_RANGE", "old")), 1);
      assert.equal(report(new KeyqError("DRIVER_NOT_FOUND", "none")), 1);
    });
  });

  test("hints name CLI commands, not library calls", () => {
    const msg = (code: "QUEUE_NOT_FOUND" | "DEAD_LETTER_NOT_FOUND" | "QUEUE_EXISTS", m: string) => cliMessage(new KeyqError(code, m));
    assert.equal(
      msg("QUEUE_NOT_FOUND", 'Queue "nope" does not exist; create it with createQueue("nope") or list them with listQueues().'),
      'Queue "nope" does not exist; create it with "keyq create-queue nope" or list them with "keyq queues".',
    );
    assert.match(msg("DEAD_LETTER_NOT_FOUND", "Dead letter 9 does not exist; list them with dlq.list()."), /"keyq dlq list"/);
    assert.match(
      msg("QUEUE_EXISTS", 'Queue "q" already exists with maxRetries 5, not 3; call updateQueue("q", { maxRetries }) to change it.'),
      /"keyq update-queue q --max-retries <value>"/,
    );
  });
});
