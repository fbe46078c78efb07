// The keyq command line without a database or a child process: strict flag
// parsing, human units, the status --check thresholds, CLI wording of errors,
// the driver fallback. Spawned runs: tests/cli.test.ts.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { KeyqError, type QueueStatus } from "../../mod.ts";
import { cliMessage, connect, parseCommandLine, report, thresholds } from "../../bin/cli.ts";
import { humanMs, parseArgs, renderTable, UsageError } from "../../bin/format.ts";
import { checkStatus, DEFAULT_THRESHOLDS, queueSettings } from "../../bin/status.ts";
import { VERSION } from "../../bin/version.ts";
import { scoped } from "../helpers/scope.ts";

const root = new URL("../..", import.meta.url);

const spec = { boolean: ["json", "force", "help"], value: ["key", "ttl"], short: { h: "help" } };

describe("keyq CLI: parsing and formatting (no database)", () => {
  test("parses positional words, --flag value, --flag=value, boolean flags, -h and --", () => {
    assert.deepEqual(parseArgs(["send", "files", "E", "{}", "--key", "t1", "--ttl=1h", "--json"], spec), {
      positional: ["send", "files", "E", "{}"],
      flags: { key: "t1", ttl: "1h", json: true },
    });
    assert.deepEqual(parseArgs(["tick", "--force", "files", "-h"], spec).flags, { force: true, help: true });
    assert.deepEqual(parseArgs(["send", "--", "--key"], spec).positional, ["send", "--key"]);
    assert.deepEqual(parseArgs(["send", "--key", "-1"], spec).flags, { key: "-1" });
  });

  test("refuses a value flag without a value, an unknown flag, and a value on a boolean flag, naming the flag", () => {
    assert.throws(() => parseArgs(["send", "q", "--key"], spec), (e) => e instanceof UsageError && /--key needs a value/.test(e.message));
    assert.throws(() => parseArgs(["send", "--key", "--json"], spec), /--key needs a value/);
    assert.throws(() => parseArgs(["send", "--keys", "x"], spec), /Unknown flag --keys \(did you mean --key\?\)/);
    assert.throws(() => parseArgs(["send", "-x"], spec), /Unknown flag -x/);
    assert.throws(() => parseArgs(["tick", "--force=yes"], spec), /--force takes no value/);
  });

  test("each command accepts only its own flags", () => {
    assert.deepEqual(parseCommandLine(["status", "--check", "--max-lag", "10"]).flags, { check: true, "max-lag": "10" });
    assert.throws(() => parseCommandLine(["send", "q", "T", "{}", "--force"]), /--force does not apply to "keyq send"/);
    assert.throws(() => parseCommandLine(["frobnicate"]), /Unknown command "frobnicate"/);
  });

  test("human units: durations and queue settings in a stable order", () => {
    assert.deepEqual([250, 1_230, 42_000, 300_000, 5_400_000, 172_800_000].map(humanMs), ["250 ms", "1.2 s", "42 s", "5 min", "1.5 h", "2 d"]);
    assert.equal(humanMs(null), "");
    const info = {
      name: "files",
      tables: 3,
      currentTable: 0,
      rotatedAt: "r",
      rotationPeriod: 3_600_000,
      tickMaxCount: 1000,
      tickMaxLag: 0,
      tickIdlePeriod: 60_000,
      maxRetries: 5,
      retryBase: 1000,
      retryCap: 3_600_000,
      retention: null,
      createdAt: "c",
    };
    const shown = queueSettings(info);
    assert.deepEqual(Object.keys(shown), [
      "name",
      "tables",
      "current table",
      "max retries",
      "retry base",
      "retry cap",
      "rotation period",
      "tick max count",
      "tick max lag",
      "tick idle period",
      "retention",
      "created at",
    ]);
    assert.equal(shown["current table"], 0, "the same value as --json (currentTable is 0-based)");
    assert.equal(shown.retention, "none");
    assert.equal(queueSettings({ ...info, retention: 604_800_000 }).retention, "7 d");
    assert.equal(shown["retry cap"], "1 h");
    assert.equal(shown["retry base"], "1 s");
  });

  test("renders aligned tables, key/value objects, and (none)", () => {
    assert.equal(renderTable([{ a: 1, bb: "x" }, { a: 22, bb: null }]), "a   bb\n--  --\n1   x\n22");
    assert.equal(renderTable({ id: "1", deduped: false }), "id       1\ndeduped  false");
    assert.equal(renderTable([]), "(none)");
  });

  test("status --check thresholds: defaults, overrides, and what crosses them", () => {
    assert.equal(thresholds({}), null);
    assert.deepEqual(thresholds({ check: true }), DEFAULT_THRESHOLDS);
    assert.deepEqual(thresholds({ "max-lag": "10", "max-tick-age": "1m" }), { ...DEFAULT_THRESHOLDS, maxLag: 10, maxTickAgeMs: 60_000 });
    // A bare number is milliseconds, the unit status --json reports.
    assert.deepEqual(thresholds({ "max-lag-age": "1500", "max-tick-age": "2500.5" }), { ...DEFAULT_THRESHOLDS, maxLagMs: 1500, maxTickAgeMs: 2500.5 });
    assert.throws(() => thresholds({ "max-lag": "ten" }), /--max-lag needs a whole number/);
    assert.throws(() => thresholds({ "max-tick-age": "soon" }), /--max-tick-age needs a duration/);
    const cursor = { slot: 2, lagEvents: 50, lagMs: 120_000, polledAgoMs: 900_000, stale: true, windowOpen: false };
    const status: QueueStatus[] = [{
      queue: "files",
      tables: 3,
      currentTable: 0,
      rotatedAt: "",
      lastTick: "7",
      lastTickAgeMs: 400_000,
      eventsSinceTick: 0,
      retention: null,
      retained: { fromTick: "1", since: "", oldestEventId: null, oldestEventTime: null, events: 0, bytes: 0 },
      consumers: [{ name: "lifecycle", kind: "ordered", slots: 8, paused: false, retries: 0, deadLetters: 3, blockedKeys: 1, cursors: [cursor] }],
    }];
    assert.deepEqual(checkStatus(status, { maxLag: 100 }), []);
    assert.deepEqual(checkStatus(status, DEFAULT_THRESHOLDS), [
      "queue files: last tick 6.7 min ago (max 5 min)",
      "queue files, consumer lifecycle: 3 dead letters (max 0)",
      "queue files, consumer lifecycle: 1 blocked keys (max 0)",
      "queue files, consumer lifecycle, slot 2: stale, not polled for 15 min (it holds back rotation)",
    ]);
    for (const maxLagMs of [60_000, "1m", "60s"]) {
      assert.deepEqual(checkStatus(status, { maxLag: 10, maxLagMs }), [
        "queue files, consumer lifecycle, slot 2: 50 events behind (max 10)",
        "queue files, consumer lifecycle, slot 2: 2 min behind (max 1 min)",
      ]);
    }
    // The reported values as thresholds: exactly at them is not crossed, a millisecond less is.
    assert.deepEqual(checkStatus(status, { maxTickAgeMs: 400_000, maxLagMs: 120_000 }), []);
    assert.equal(checkStatus(status, { maxTickAgeMs: 399_999, maxLagMs: 119_999 }).length, 2);
    // The former names (seconds) are refused, not silently left unchecked.
    assert.throws(() => checkStatus(status, { maxTickAge: 300 } as never), /Unknown option "maxTickAge" in thresholds; did you mean "maxTickAgeMs"\?/);
    assert.throws(() => checkStatus(status, { maxLagMs: "soon" }), /Option "maxLagMs" is "soon"/);
  });

  test("errors name CLI commands, not JavaScript calls", () => {
    const e = new KeyqError("NOT_MIGRATED", 'The keyq schema "x" is missing or out of date (y); call migrate() first.');
    assert.match(cliMessage(e), /run "keyq migrate" first\.$/);
    const q = new KeyqError("QUEUE_NOT_FOUND", 'Queue "files" does not exist; create it with createQueue("files") first.');
    assert.match(cliMessage(q), /create it with "keyq create-queue files" first\.$/);
  });

  test("uses postgres when installed, else pg, else says what to install", async () => {
    const missing = (s: string) => Object.assign(new Error(`Cannot find package '${s}'`), { code: "ERR_MODULE_NOT_FOUND" });
    const fakePg = {
      default: {
        Pool: class {
          end = () => Promise.resolve();
          query = () => Promise.resolve({ rows: [] });
          connect = () => Promise.resolve({});
        },
      },
    };
    const viaPg = await connect("postgres://x@127.0.0.1:1/x", (s) => s === "postgres" ? Promise.reject(missing(s)) : Promise.resolve(fakePg));
    assert.equal(viaPg.driver.name, "pg");
    await viaPg.close();
    await assert.rejects(
      connect("postgres://x", (s) => Promise.reject(missing(s))),
      /No Postgres driver found: install one next to keyq \("npm install postgres" or "npm install pg"\)/,
    );
    await assert.rejects(connect("postgres://x", () => Promise.reject(new Error("boom"))), /boom/, "other import errors are not hidden");
  });

  test("bin/version.ts matches package.json", () => {
    assert.equal(VERSION, JSON.parse(readFileSync(new URL("package.json", root), "utf8")).version);
  });
  test("common flags apply to every command; no command parses to no positional words", () => {
    assert.deepEqual(parseCommandLine(["queues", "--schema", "kq", "--json"]).flags, { schema: "kq", json: true });
    assert.deepEqual(parseCommandLine(["--version"]), { positional: [], flags: { version: true } });
    assert.deepEqual(parseCommandLine(["dlq", "purge", "--older-than=7d", "--queue", "q"]).flags, { "older-than": "7d", queue: "q" });
    assert.throws(() => parseCommandLine(["tick", "q", "--older-than", "7d"]), /--older-than does not apply to "keyq tick"/);
    assert.throws(() => parseCommandLine(["status", "--max-lagg", "3"]), /Unknown flag --max-lagg \(did you mean --max-lag\?\)/);
  });

  test("report: exit 2 for a bad command line, 1 otherwise, the code and CLI wording on stderr", async () => {
    const lines: string[] = [];
    await scoped((defer) => {
      const original = console.error;
      defer(() => (console.error = original));
      console.error = (line: string) => void lines.push(line);
      assert.equal(report(new UsageError("Flag --x needs a value")), 2);
      assert.equal(report(new KeyqError("NOT_MIGRATED", 'The keyq schema "s" is missing (y); call migrate() first.')), 1);
      assert.equal(report(new Error("socket")), 1);
    });
    assert.deepEqual(lines, [
      "keyq: Flag --x needs a value",
      'keyq: NOT_MIGRATED: The keyq schema "s" is missing (y); run "keyq migrate" first.',
      "keyq: socket",
    ]);
  });
});
