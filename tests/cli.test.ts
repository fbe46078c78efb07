// The keyq command line, spawned: exit codes and one run end to end.
// Parsing, units, thresholds and the driver fallback: tests/unit/cli.test.ts.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { VERSION } from "../bin/version.ts";
import { dbSkip } from "./helpers/db.ts";
import { withSchema } from "./helpers/fixture.ts";
import { scoped } from "./helpers/scope.ts";

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
    await withSchema(async ({ url, schema }) => {
      const env = { DATABASE_URL: url, KEYQ_SCHEMA: schema };
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
      await scoped(async (defer) => {
        const sql = defer.use(postgres(url, { max: 1, onnotice: () => {} }), (s) => s.end());
        await keyq(fromPostgresJs(sql), { schema }).consumer("files", "audit").subscribe();
      });
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
      // "current table" is 0-based, as in --json (it showed 1 for currentTable 0).
      assert.match((await cli(["queues"], env)).out, /^files\s+3\s+0\s+5\s+1 s\s+1 h\s+1 h\s/m);
    }, "cli");
  });
});
