/**
 * Rewrites src/sql/schema.snapshot.sql: migrates a fresh schema on the test
 * database (DATABASE_URL or the local server) and dumps its catalog.
 *
 *   npm run snapshot
 */
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { connect, databaseUrl, dropSchema, freshSchema } from "./lib/db.ts";
import { catalogDump, SNAPSHOT_PATH } from "./catalog-dump.ts";

const url = await databaseUrl();
if (!url) throw new Error("snapshot: no database (set DATABASE_URL)");
const schema = freshSchema("snapshot");
const sql = connect(url);
try {
  await keyq(fromPostgresJs(sql), { schema }).migrate();
  const file = join(resolve(fileURLToPath(import.meta.url), "../.."), SNAPSHOT_PATH);
  writeFileSync(file, await catalogDump(sql, schema));
  console.log(`snapshot: wrote ${file}; review its diff`);
} finally {
  await sql.end();
  await dropSchema(url, schema);
}
