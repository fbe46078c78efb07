// The keyq command line: argument parsing, tables, and one run end to end.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import { describe, test } from "node:test";
import { parseArgs, renderTable } from "../bin/format.ts";
import { databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();
const isNode = !("Deno" in globalThis) && !("Bun" in globalThis);

function cli(args: string[], env: Record<string, string>): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ["--import", "tsx", "bin/keyq.ts", ...args], { env: { ...process.env, ...env } }, (error, out, err) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, out, err });
    });
  });
}

describe("keyq CLI", () => {
  test("parses positional words, --flag value, --flag=value and boolean flags", () => {
    assert.deepEqual(parseArgs(["send", "files", "E", "{}", "--key", "t1", "--ttl=1h", "--json"]), {
      positional: ["send", "files", "E", "{}"],
      flags: { key: "t1", ttl: "1h", json: true },
    });
    assert.deepEqual(parseArgs(["tick", "--force", "files"]).flags, { force: true });
  });

  test("renders aligned tables, key/value objects, and (none)", () => {
    assert.equal(renderTable([{ a: 1, bb: "x" }, { a: 22, bb: null }]), "a   bb\n--  --\n1   x\n22");
    assert.equal(renderTable({ id: "1", deduped: false }), "id       1\ndeduped  false");
    assert.equal(renderTable([]), "(none)");
  });

  test("migrate, create-queue, send, status --json against a database", { skip: skip || (!isNode && "spawns node") }, async () => {
    const url = (await databaseUrl())!;
    const schema = freshSchema();
    const env = { DATABASE_URL: url, KEYQ_SCHEMA: schema };
    try {
      assert.equal((await cli(["migrate"], env)).code, 0);
      assert.equal((await cli(["create-queue", "files"], env)).code, 0);
      const sent = await cli(["send", "files", "FileCreated", '{"path":"/a"}', "--key", "t1", "--json"], env);
      assert.deepEqual(JSON.parse(sent.out), { id: "1", deduped: false });
      const status = JSON.parse((await cli(["status", "--json"], env)).out);
      assert.equal(status[0].queue, "files");
      assert.equal(status[0].eventsSinceTick, 1);
      const table = await cli(["queues"], env);
      assert.match(table.out, /^name\s+tables/m);
      const bad = await cli(["send", "nope", "E", "{}"], env);
      assert.equal(bad.code, 1);
      assert.match(bad.err, /QUEUE_NOT_FOUND/);
    } finally {
      await dropSchema(url, schema);
    }
  });
});
