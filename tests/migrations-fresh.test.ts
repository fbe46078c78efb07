// The committed src/migrations.ts must be what scripts/build-migrations.ts
// renders from src/sql/*.sql; and the renderer itself, on a temporary directory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildMigrations, HEADER, readSqlFiles, renderMigrations } from "../scripts/build-migrations.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

test("src/migrations.ts is fresh (else: run npm run build:migrations)", () => {
  const expected = renderMigrations(readSqlFiles(join(root, "src/sql")));
  const actual = readFileSync(join(root, "src/migrations.ts"), "utf8");
  assert.ok(
    actual === expected,
    "src/migrations.ts is stale: it does not match src/sql/*.sql — run npm run build:migrations",
  );
});

function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "keyq-migrations-"));
  writeFileSync(join(dir, "package.json"), '{ "type": "module" }\n'); // the generated .ts is ESM
  return fn(dir).finally(() => rmSync(dir, { recursive: true, force: true }));
}

test("build-migrations renders an empty list from no files (or no directory)", async () => {
  await withTempDir(async (dir) => {
    const sql = join(dir, "sql");
    assert.equal(buildMigrations(sql, join(dir, "none.ts")), 0);
    mkdirSync(sql);
    assert.equal(buildMigrations(sql, join(dir, "empty.ts")), 0);
    const text = readFileSync(join(dir, "empty.ts"), "utf8");
    assert.ok(text.startsWith(HEADER));
    assert.match(text, /export const migrations: readonly Migration\[\] = \[\];\n$/);
    const mod = (await import(pathToFileURL(join(dir, "empty.ts")).href)) as { migrations: unknown[] };
    assert.deepEqual(mod.migrations, []);
  });
});

test("build-migrations sorts by version and embeds each file's SQL verbatim", async () => {
  await withTempDir(async (dir) => {
    const sql = join(dir, "sql");
    mkdirSync(sql);
    const tricky = "create function f() returns text language plpgsql as $$\nbegin\n  return 'a \"quoted\" \\\\ `tick` ${x} — é';\nend $$;\n";
    writeFileSync(join(sql, "002_more.sql"), "select 2;\r\n");
    writeFileSync(join(sql, "001_engine.sql"), tricky);
    writeFileSync(join(sql, "README.md"), "not a migration");
    assert.equal(buildMigrations(sql, join(dir, "out.ts")), 2);
    const mod = (await import(pathToFileURL(join(dir, "out.ts")).href)) as {
      migrations: { version: number; name: string; sql: string }[];
    };
    assert.deepEqual(mod.migrations, [
      { version: 1, name: "engine", sql: tricky },
      { version: 2, name: "more", sql: "select 2;\n" },
    ]);
  });
});

test("renderMigrations refuses bad names, gaps and duplicates", () => {
  assert.throws(() => renderMigrations([{ name: "1_engine.sql", text: "" }]), /NNN_name\.sql/);
  assert.throws(() => renderMigrations([{ name: "002_x.sql", text: "" }]), /without gaps/);
  assert.throws(
    () => renderMigrations([{ name: "001_a.sql", text: "" }, { name: "001_b.sql", text: "" }]),
    /without gaps or duplicates/,
  );
});
