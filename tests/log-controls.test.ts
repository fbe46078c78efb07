// Operator controls through the API and the CLI: pause/resume, a blocked
// key's head skipped or dead-lettered now, unsubscribe, create/update/drop a
// queue with its settings, seek, history; confirmations for destructive
// commands, exit codes (usage errors 2 everywhere), --json everywhere, the
// same values in the table and in JSON, hints naming CLI commands.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { KeyqEvent } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();
const root = fileURLToPath(new URL("..", import.meta.url));

function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  const cmd = "Deno" in globalThis
    ? [process.execPath, "run", "--allow-all", "bin/keyq.ts"]
    : "Bun" in globalThis
    ? [process.execPath, "bin/keyq.ts"]
    : [process.execPath, "--import", "tsx", "bin/keyq.ts"];
  return new Promise((resolve) => {
    execFile(cmd[0]!, [...cmd.slice(1), ...args], { cwd: root, env: { ...process.env, ...env } }, (error, out, err) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, out, err });
    });
  });
}

describe("operator controls (API)", () => {
  test("pause and resume by hand; skip or dead-letter a blocked key's head now; unsubscribe by name", { skip, timeout: 120_000 }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files", { maxRetries: 5, retryBase: "1h" });
      const c = f.q.ordered("files", "life", { slots: 2, onFailure: "pause" });
      await c.subscribe();
      assert.equal(await f.q.pause("files", "life"), true);
      assert.equal(await f.q.pause("files", "life"), false, "already paused");
      await f.q.sendBatch("files", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: "bad" })));
      await f.q.send("files", { type: "E", payload: 9, key: "good" });
      const got: KeyqEvent[] = [];
      const handler = (ev: KeyqEvent) => {
        got.push(ev);
        if (ev.key === "bad" && ev.payload === 1) throw new Error("poison");
      };
      const paused = await c.run({ handler });
      assert.equal(paused.events, 0, "a paused consumer reads nothing");
      assert.equal((await f.q.status({ queue: "files" }))[0]!.consumers[0]!.paused, true);
      assert.equal(await f.q.resume("files", "life"), true);
      await c.run({ handler });
      const blocked = await f.q.blocked("files", "life");
      assert.deepEqual(blocked.map((b) => [b.key, b.held]), [["bad", 2]]);
      await assert.rejects(f.q.settleHead("files", "life", "good", "skip"), { code: "KEY_NOT_BLOCKED" });
      await assert.rejects(f.q.settleHead("files", "life", "bad", "drop" as never), { code: "INVALID_INPUT" });
      const settled = await f.q.settleHead("files", "life", "bad", "deadLetter");
      assert.equal(settled.headId, blocked[0]!.headId);
      got.length = 0;
      await c.run({ handler });
      assert.deepEqual(got.map((e) => e.payload), [2, 3], "the held events go out next, in order");
      assert.equal(await f.q.dlq.count({ queue: "files", consumer: "life" }), 1, "the head is a dead letter");

      // skip: the same, without a dead letter.
      await f.q.sendBatch("files", [1, 4].map((i) => ({ type: "E", payload: i, key: "bad" })));
      await c.run({ handler });
      assert.equal((await f.q.blocked("files", "life")).length, 1);
      await f.q.settleHead("files", "life", "bad", "skip");
      got.length = 0;
      await c.run({ handler });
      assert.deepEqual(got.map((e) => e.payload), [4]);
      assert.equal(await f.q.dlq.count({ queue: "files", consumer: "life" }), 1, "skip writes no dead letter");

      assert.equal(await f.q.unsubscribe("files", "life"), true);
      assert.equal(await f.q.unsubscribe("files", "life"), false);
      await assert.rejects(f.q.pause("files", "life"), { code: "CONSUMER_NOT_FOUND" });
    });
  });
});

describe("operator controls (CLI, spawned)", () => {
  test("usage errors exit 2 everywhere; a malformed DATABASE_URL is named; sql --json; hints name CLI commands", { skip, timeout: 120_000 }, async () => {
    await withPg(async (f) => {
      const env = { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema };
      const usage: [string[], RegExp][] = [
        [["dlq", "replay", "abc"], /Dead letter ids are whole numbers/],
        [["seek", "files", "c", "yesterday", "--yes"], /is not a position/],
        [["create-queue", "files", "--max-retries", "many"], /--max-retries needs a whole number/],
        [["create-queue", "files", "--retention", "forever"], /INVALID_INPUT: Option "retention"/],
        [["update-queue", "files", "--tables", "4"], /--tables does not apply to "keyq update-queue"/],
        [["drop-queue", "files"], /deletes queue "files".*Pass --yes/],
        [["unsubscribe", "files", "c"], /Pass --yes/],
        [["seek", "files", "c", "earliest"], /Pass --yes/],
      ];
      for (const [args, message] of usage) {
        const r = await cli(args, env);
        assert.equal(r.code, 2, `${args.join(" ")}: ${r.err}`);
        assert.match(r.err, message, args.join(" "));
      }
      const badUrl = await cli(["status"], { DATABASE_URL: "localhost:5432/db" });
      assert.equal(badUrl.code, 2);
      assert.match(badUrl.err, /DATABASE_URL is not a postgres:\/\/ URL/);
      const sqlJson = await cli(["sql", "--json"], env);
      assert.equal(sqlJson.code, 0);
      assert.match(JSON.parse(sqlJson.out).sql, /create table/);
      const nope = await cli(["status", "nope"], env);
      assert.equal(nope.code, 1);
      assert.match(nope.err, /QUEUE_NOT_FOUND: .*"keyq create-queue nope" or list them with "keyq queues"/);
      assert.doesNotMatch(nope.err, /createQueue|listQueues/);
    });
  });

  test("create-queue/update-queue flags, status with the retained range, pause/resume, blocked, seek, history, unsubscribe, drop-queue", {
    skip,
    timeout: 120_000,
  }, async () => {
    await withPg(async (f) => {
      const env = { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema };
      const created = await cli(["create-queue", "files", "--retention", "7d", "--max-retries", "3", "--tables", "4", "--json"], env);
      assert.equal(created.code, 0, created.err);
      const info = JSON.parse(created.out);
      assert.deepEqual([info.retention, info.maxRetries, info.tables, info.currentTable], [604_800_000, 3, 4, 0]);
      const table = await cli(["create-queue", "files"], env);
      assert.match(table.out, /^current table\s+0$/m, "the table shows the JSON's value");
      assert.match(table.out, /^retention\s+7 d$/m);
      const updated = await cli(["update-queue", "files", "--retention", "1h", "--retry-base", "2s", "--json"], env);
      assert.deepEqual([JSON.parse(updated.out).retention, JSON.parse(updated.out).retryBase], [3_600_000, 2_000]);
      assert.equal((await cli(["update-queue", "files"], env)).code, 2, "no setting given");

      const c = f.q.consumer("files", "audit");
      await c.subscribe();
      await f.q.sendBatch("files", [1, 2, 3].map((i) => ({ type: "E", payload: i, key: "t1" })));
      await c.run({ handler: () => {} });
      const status = JSON.parse((await cli(["status", "files", "--json"], env)).out);
      assert.equal(status[0].retained.events, 3);
      assert.equal(status[0].retention, 3_600_000, "milliseconds, as queues --json reports it");
      assert.match((await cli(["status", "files"], env)).out, /retained events/);

      assert.deepEqual(JSON.parse((await cli(["pause", "files", "audit", "--json"], env)).out), { consumer: "audit", paused: true, changed: true });
      assert.equal((await f.q.status({ queue: "files" }))[0]!.consumers[0]!.paused, true);
      assert.match((await cli(["status", "files"], env)).out, /PAUSED/);
      assert.equal((await cli(["resume", "files", "audit"], env)).code, 0);
      assert.equal((await f.q.status({ queue: "files" }))[0]!.consumers[0]!.paused, false);
      assert.deepEqual(JSON.parse((await cli(["blocked", "files", "audit", "--json"], env)).out), []);

      const history = JSON.parse((await cli(["history", "files", "t1", "--json"], env)).out);
      assert.deepEqual(history.map((e: { id: string }) => e.id), ["1", "2", "3"]);
      const sought = await cli(["seek", "files", "audit", "2", "--yes", "--json"], env);
      assert.equal(sought.code, 0, sought.err);
      assert.equal(JSON.parse(sought.out).position.afterId, "1");
      const again: unknown[] = [];
      await c.run({ handler: (ev: KeyqEvent) => void again.push(ev.payload) });
      assert.deepEqual(again, [2, 3]);
      const replayed = await cli(["replay-key", "files", "t1", "--into", "audit", "--json"], env);
      assert.deepEqual(JSON.parse(replayed.out), { replayed: 3 });
      const outOfRange = await cli(["seek", "files", "audit", "2001-01-01T00:00:00Z", "--yes"], env);
      assert.equal(outOfRange.code, 1);
      assert.match(outOfRange.err, /POSITION_OUT_OF_RANGE/);

      assert.deepEqual(JSON.parse((await cli(["unsubscribe", "files", "audit", "--yes", "--json"], env)).out), { removed: true });
      assert.deepEqual(JSON.parse((await cli(["drop-queue", "files", "--yes", "--json"], env)).out), { dropped: true });
      assert.deepEqual(await f.q.listQueues(), []);
    });
  });
});
