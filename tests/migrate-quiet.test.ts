// migrate() with nothing to do is quiet: a plain postgres(url), which prints
// every NOTICE by default, receives none on a second migrate().
import assert from "node:assert/strict";
import { test } from "node:test";
import postgres from "postgres";
import { keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();

test("a second migrate() sends no NOTICE to a plain postgres.js client", { skip }, async () => {
  const url = (await databaseUrl())!;
  const schema = freshSchema("quiet");
  const notices: string[] = [];
  const sql = postgres(url, { max: 1, idle_timeout: 1, onnotice: (n) => void notices.push(String(n.message)) });
  try {
    const q = keyq(fromPostgresJs(sql), { schema });
    const first = await q.migrate();
    assert.ok(first.applied.length > 0, "the first migrate() installs the engine");
    notices.length = 0;
    const second = await q.migrate();
    assert.deepEqual(second.applied, []);
    assert.deepEqual(notices, [], "no NOTICE on a migrate() with nothing to do");
    // The setting is transaction-local: the session still reports NOTICEs afterwards.
    await sql.unsafe(`create schema if not exists "${schema}"`);
    assert.equal(notices.length, 1, "client_min_messages was not changed for the session");
  } finally {
    await sql.end({ timeout: 2 });
    await dropSchema(url, schema);
  }
});
