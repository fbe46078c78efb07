// The keyq command line: strict flag parsing, exit codes, human units, the
// status --check thresholds, the driver fallback, and one run end to end.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import process from "node:process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { keyq, KeyqError, type QueueStatus } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { cliMessage, connect, parseCommandLine, thresholds } from "../bin/cli.ts";
import { humanSeconds, parseArgs, renderTable, UsageError } from "../bin/format.ts";
import { checkStatus, DEFAULT_THRESHOLDS, queueSettings } from "../bin/status.ts";
import { VERSION } from "../bin/version.ts";
import { databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();
const root = fileURLToPath(new URL("..", import.meta.url));

/** bin/keyq.ts under the runtime running this test file. */
function cliCommand(): string[] {
  if ("Deno" in globalThis) return [process.execPath, "run", "--allow-all", "bin/keyq.ts"];
  if ("Bun" in globalThis) return [process.execPath, "bin/keyq.ts"];
  return [process.execPath, "--import", "tsx", "bin/keyq.ts"];
}

function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  const [cmd, ...pre] = cliCommand();
  return new Promise((resolve) => {
    execFile(cmd!, [...pre, ...args], { cwd: root, env: { ...process.env, ...env } }, (error, out, err) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, out, err });
    });
  });
}

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
    assert.deepEqual([0.25, 1.23, 42, 300, 5400, 172800].map(humanSeconds), ["250 ms", "1.2 s", "42 s", "5 min", "1.5 h", "2 d"]);
    assert.equal(humanSeconds(null), "");
    const info = { name: "files", tables: 3, currentTable: 0, rotatedAt: "r", rotationPeriod: 3600, tickMaxCount: 1000, tickMaxLag: 0, tickIdlePeriod: 60, maxRetries: 5, retryBase: 1, retryCap: 3600, createdAt: "c" };
    const shown = queueSettings(info);
    assert.deepEqual(Object.keys(shown), ["name", "tables", "current table", "max retries", "retry base", "retry cap", "rotation period", "tick max count", "tick max lag", "tick idle period", "created at"]);
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
    assert.deepEqual(thresholds({ "max-lag": "10", "max-tick-age": "1m" }), { ...DEFAULT_THRESHOLDS, maxLag: 10, maxTickAge: 60 });
    assert.throws(() => thresholds({ "max-lag": "ten" }), /--max-lag needs a whole number/);
    assert.throws(() => thresholds({ "max-tick-age": "soon" }), /--max-tick-age needs a duration/);
    const cursor = { slot: 2, lagEvents: 50, lagSeconds: 120, polledAgo: 900, stale: true, windowOpen: false };
    const status: QueueStatus[] = [{
      queue: "files", tables: 3, currentTable: 0, rotatedAt: "", lastTick: "7", lastTickAge: 400, eventsSinceTick: 0,
      consumers: [{ name: "lifecycle", kind: "ordered", slots: 8, retries: 0, deadLetters: 3, blockedKeys: 1, cursors: [cursor] }],
    }];
    assert.deepEqual(checkStatus(status, { maxLag: 100 }), []);
    assert.deepEqual(checkStatus(status, DEFAULT_THRESHOLDS), [
      "queue files: last tick 6.7 min ago (max 5 min)",
      "queue files, consumer lifecycle: 3 dead letters (max 0)",
      "queue files, consumer lifecycle: 1 blocked keys (max 0)",
      "queue files, consumer lifecycle, slot 2: stale, not polled for 15 min (it holds back rotation)",
    ]);
    assert.deepEqual(checkStatus(status, { maxLag: 10, maxLagAge: 60 }), [
      "queue files, consumer lifecycle, slot 2: 50 events behind (max 10)",
      "queue files, consumer lifecycle, slot 2: 2 min behind (max 1 min)",
    ]);
  });

  test("errors name CLI commands, not JavaScript calls", () => {
    const e = new KeyqError("NOT_MIGRATED", 'The keyq schema "x" is missing or out of date (y); call migrate() first.');
    assert.match(cliMessage(e), /run "keyq migrate" first\.$/);
    const q = new KeyqError("QUEUE_NOT_FOUND", 'Queue "files" does not exist; create it with createQueue("files") first.');
    assert.match(cliMessage(q), /create it with "keyq create-queue files" first\.$/);
  });

  test("uses postgres when installed, else pg, else says what to install", async () => {
    const missing = (s: string) => Object.assign(new Error(`Cannot find package '${s}'`), { code: "ERR_MODULE_NOT_FOUND" });
    const fakePg = { default: { Pool: class {
      end = () => Promise.resolve();
      query = () => Promise.resolve({ rows: [] });
      connect = () => Promise.resolve({});
    } } };
    const viaPg = await connect("postgres://x@127.0.0.1:1/x", (s) => s === "postgres" ? Promise.reject(missing(s)) : Promise.resolve(fakePg));
    assert.equal(viaPg.driver.name, "pg");
    await viaPg.close();
    await assert.rejects(connect("postgres://x", (s) => Promise.reject(missing(s))), /No Postgres driver found: install one next to keyq \("npm install postgres" or "npm install pg"\)/);
    await assert.rejects(connect("postgres://x", () => Promise.reject(new Error("boom"))), /boom/, "other import errors are not hidden");
  });

  test("bin/version.ts matches package.json", () => {
    assert.equal(VERSION, JSON.parse(readFileSync(`${root}/package.json`, "utf8")).version);
  });
});

describe("keyq CLI: exit codes (spawned)", () => {
  test("--help, -h and help exit 0; --version prints the version; no command exits 2", async () => {
    for (const args of [["--help"], ["-h"], ["help"], ["status", "--help"]]) {
      const r = await cli(args);
      assert.equal(r.code, 0, `${args.join(" ")}: ${r.err}`);
      assert.match(r.out, /^usage: keyq <command>/);
    }
    const v = await cli(["--version"]);
    assert.deepEqual([v.code, v.out.trim()], [0, VERSION]);
    const none = await cli([]);
    assert.equal(none.code, 2);
    assert.match(none.err, /^usage: keyq/);
  });

  test("a flag without its value, an unknown flag or command exits 2 naming it; no DATABASE_URL exits 2", async () => {
    const cases: [string[], RegExp][] = [
      [["send", "files", "E", "{}", "--key"], /Flag --key needs a value/],
      [["send", "files", "E", "{}", "--keys", "t1"], /Unknown flag --keys/],
      [["nope"], /Unknown command "nope"/],
      [["status"], /Set DATABASE_URL/],
    ];
    for (const [args, message] of cases) {
      const r = await cli(args, { DATABASE_URL: "" });
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.err}`);
      assert.match(r.err, message);
    }
  });

  test("migrate, create-queue, send, status --check (exit 1 when crossed), maintain against a database", { skip }, async () => {
    const url = (await databaseUrl())!;
    const schema = freshSchema("cli");
    const env = { DATABASE_URL: url, KEYQ_SCHEMA: schema };
    try {
      const early = await cli(["status"], env);
      assert.equal(early.code, 1);
      assert.match(early.err, /NOT_MIGRATED: .*run "keyq migrate" first/);
      assert.equal((await cli(["migrate"], env)).code, 0);
      const created = await cli(["create-queue", "files"], env);
      assert.equal(created.code, 0, created.err);
      assert.match(created.out, /^retry cap\s+1 h$/m);
      const noQueue = await cli(["send", "nope", "E", "{}"], env);
      assert.equal(noQueue.code, 1);
      assert.match(noQueue.err, /QUEUE_NOT_FOUND: .*"keyq create-queue nope" first/);
      // A consumer subscribes (from code, as in production), then events arrive and are ticked.
      const { default: postgres } = await import("postgres");
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      try {
        await keyq(fromPostgresJs(sql), { schema }).consumer("files", "audit").subscribe();
      } finally {
        await sql.end();
      }
      const sent = await cli(["send", "files", "FileCreated", '{"path":"/a"}', "--key", "t1", "--json"], env);
      assert.deepEqual(JSON.parse(sent.out), { id: "1", deduped: false });
      await cli(["send", "files", "FileCreated", '{"path":"/b"}', "--key", "t1"], env);
      assert.equal((await cli(["tick", "files", "--force"], env)).code, 0);
      const ok = await cli(["status", "--check", "--max-lag", "5"], env);
      assert.equal(ok.code, 0, ok.out + ok.err);
      assert.match(ok.out, /check: ok/);
      const crossed = await cli(["status", "--max-lag", "1"], env);
      assert.equal(crossed.code, 1, crossed.out + crossed.err);
      assert.match(crossed.out, /CHECK FAILED:\n {2}queue files, consumer audit: 2 events behind \(max 1\)/);
      const asJson = JSON.parse((await cli(["status", "--json", "--check", "--max-lag", "1"], env)).out);
      assert.equal(asJson.problems.length, 1);
      assert.equal(asJson.status[0].queue, "files");
      const maintained = await cli(["maintain", "files"], env);
      assert.equal(maintained.code, 0, maintained.err);
      assert.match(maintained.out, /^queue\s+skipped\s+rotated\s+ticks pruned\s+dedup keys expired$/m);
      assert.match((await cli(["queues"], env)).out, /^files\s+3\s+1\s+5\s+1 s\s+1 h\s+1 h\s/m);
    } finally {
      await dropSchema(url, schema);
    }
  });
});
