// The engine's shape, for review: a freshly migrated schema must dump (by
// catalog queries) exactly as the committed src/sql/schema.snapshot.sql; and
// migrations are immutable: their texts are pinned here, so an edit to a
// released migration (or to the frozen slot_of) fails instead of silently
// diverging from databases that already ran it.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { keyq, migrationSql } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { functionsHash, migrations } from "../src/generated/migrations.ts";
import { catalogDump, normalise, SNAPSHOT_PATH } from "../scripts/catalog-dump.ts";
import { connect, databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();
const root = new URL("..", import.meta.url);

/**
 * sha256 of each migration file. 001–005 are 0.1's files (commit daf212b),
 * as 0.1 databases ran them. Never change a line here for a released
 * migration: write a new migration (README: How the engine evolves).
 */
const PINNED: Record<string, string> = {
  "001_engine.sql": "41599461d51af770dbd7e0e1b3d8822625d2ca4c611e2fd5879202121c9cf47d",
  "002_failures.sql": "f4794557d55162af9945abe29a70187ac8d8291fc521fa328bc0a59cfa8abe17",
  "003_exclusive.sql": "c4939251cbafb5a7b1b666c1f58c2ddd1edfeb35ecc6d1c2cbad006f32b4ed11",
  "004_ordered.sql": "4fdb64982a48a10c0ad264a2f9d8f9a6c6d865a7770ba6b4631948b3b6b2963d",
  "005_status.sql": "b359ac97d5db70f48bcf43b968b5de5c9b8598c31b5323e645fc101ec94736ca",
  "006_lease.sql": "18f965214a76c2939a590c71b0c88eea9e6857520b829aa73243cca17f17c86a",
  "007_slot_of_qualified.sql": "3c910bf8cf4a008fc8223b7ece628b2b0c13ad8e5a78d38557fc1019a9b7411b",
  "008_function_set.sql": "bef594660036f760a46fef561253dd344e58760a07aad33cb414f83051db4ede",
  "009_slot_index_names.sql": "81224d7aa53b39bfd44dd314b2198ffc8140502edfd4d72c067182cd04965796",
  "010_chunk_buckets.sql": "d91e68097ab4bc23e8ca890f9cf96196724e7a655aae92250636e139d40f8161",
  "011_function_set_serial.sql": "c10047ec1a4c425004dfe189415cd006b90cdf0d0caad112b4c794212b5b20ac",
  "012_roles.sql": "03258761f8ae4496611209b9fcf83782ec5e02ad3ba87db212b1d81f98344027",
  "013_trace.sql": "e02e0ef10370447cbfbc020c860206e929cdfe1f28aa1709a74d73b0516b8e8c",
  "014_log.sql": "a914d2949522eeabaf1fc3ac502af0f65c875d7afb3955467dd4887ab41d5805",
  "015_dead_letter_trace.sql": "cd0949726cc559b1c29df694cf31583298e18d6e0548f3860eeeb309137d0fe6",
  "016_chunk_upto.sql": "67f1ce512dfdd0868ce8b50d08904c7c08614b1549324b8bd6841e33040bda65",
  "017_bucket_growth.sql": "7500df100982e40337ccc3c96e08f463fa7f60e068cbad7ec51941b61f32634f",
  "018_chunk_cut_seen.sql": "a20d04031416a2d00e8a145ebf6c7229e5c6f025d2591776ebb80b19b2627e21",
};

test("migrations are immutable: each file's text is the pinned one (a change is a new migration)", () => {
  for (const m of migrations) {
    const name = `${String(m.version).padStart(3, "0")}_${m.name}.sql`;
    const text = readFileSync(new URL(`src/sql/migrations/${name}`, root), "utf8");
    const hash = createHash("sha256").update(text).digest("hex");
    assert.equal(
      hash,
      PINNED[name],
      `src/sql/migrations/${name} changed (or is new and unpinned): migrations are immutable once released — ` +
        "put table changes in a new migration and function changes in src/sql/functions/; pin a new migration's sha256 here",
    );
  }
  assert.equal(migrations.length, Object.keys(PINNED).length, "every pinned migration still exists");
});

test("normalise replaces the schema name in its quoted, literal and bare forms only", () => {
  assert.equal(
    normalise(`"kq_1".f('kq_1') kq_1.t kq_10 xkq_1`, "kq_1"),
    ":KEYQ_SCHEMA.f(:KEYQ_SCHEMA_NAME) :KEYQ_SCHEMA.t kq_10 xkq_1",
  );
});

test("a freshly migrated schema matches src/sql/schema.snapshot.sql", { skip }, async () => {
  const url = (await databaseUrl())!;
  const schema = freshSchema("snap");
  const sql = connect(url);
  try {
    await keyq(fromPostgresJs(sql), { schema }).migrate();
    const actual = await catalogDump(sql, schema);
    const expected = readFileSync(new URL(SNAPSHOT_PATH, root), "utf8");
    if (actual !== expected) {
      const a = actual.split("\n");
      const e = expected.split("\n");
      const i = a.findIndex((line, n) => line !== e[n]);
      assert.fail(
        `The migrated schema differs from ${SNAPSHOT_PATH} (first at line ${i + 1}: ${JSON.stringify(a[i])} vs ` +
          `${JSON.stringify(e[i])}). If the change is intended, run npm run snapshot and review the diff.`,
      );
    }
  } finally {
    await sql.end();
    await dropSchema(url, schema);
  }
});

test("migrationSql() applied by hand gives the same schema, and migrate() then has nothing to do", { skip }, async () => {
  const url = (await databaseUrl())!;
  const schema = freshSchema("snap");
  const sql = connect(url); // one connection: the script has its own BEGIN/COMMIT
  try {
    await sql.unsafe(migrationSql(schema));
    assert.equal(await catalogDump(sql, schema), readFileSync(new URL(SNAPSHOT_PATH, root), "utf8"));
    const r = await keyq(fromPostgresJs(sql), { schema }).migrate();
    assert.deepEqual(r.applied, []);
    const set = [...await sql.unsafe(`select hash from "${schema}".function_set`)];
    assert.deepEqual(set.map((x) => x.hash), [functionsHash]);
  } finally {
    await sql.end();
    await dropSchema(url, schema);
  }
});
