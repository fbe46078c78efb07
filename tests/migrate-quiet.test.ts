// migrate() with nothing to do is quiet: a plain postgres(url), which prints
// every NOTICE by default, receives none on a second migrate().
import assert from "node:assert/strict";
import { test } from "node:test";
import postgres from "postgres";
import { keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { withSchema } from "./helpers/fixture.ts";

const skip = await dbSkip();

test("a second migrate() sends no NOTICE to a plain postgres.js client", { skip }, async () => {
  await withSchema(async ({ url, schema }, defer) => {
    const notices: string[] = [];
    const sql = defer.use(postgres(url, { max: 1, idle_timeout: 1, onnotice: (n) => void notices.push(String(n.message)) }), (s) => s.end({ timeout: 2 }));
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
  }, "quiet");
});
