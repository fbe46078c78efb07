// The committed src/generated/migrations.ts must be what scripts/build-migrations.ts
// renders from src/sql/migrations/*.sql and src/sql/functions/*.sql; and the
// renderer itself, on a temporary directory.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildMigrations, functionsHash, HEADER, nextStamp, packageVersion, readSqlFiles, readStamp, renderMigrations } from "../scripts/build-migrations.ts";
import { freshMigrations, splitStatements } from "../scripts/sql-statements.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

test("src/generated/migrations.ts is fresh (else: run npm run build:migrations)", () => {
  const functionFiles = readSqlFiles(join(root, "src/sql/functions"));
  const stamp = readStamp(join(root, "src/sql"));
  assert.equal(nextStamp(stamp, functionFiles), stamp, "src/sql/function-set.json does not match src/sql/functions/*.sql — run npm run build:migrations");
  const expected = renderMigrations(
    readSqlFiles(join(root, "src/sql/migrations")),
    functionFiles,
    packageVersion(root),
    stamp.serial,
  );
  const actual = readFileSync(join(root, "src/generated/migrations.ts"), "utf8");
  assert.ok(
    actual === expected,
    "src/generated/migrations.ts is stale: it does not match src/sql/{migrations,functions}/*.sql — run npm run build:migrations",
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
    mkdirSync(join(sql, "migrations"), { recursive: true });
    mkdirSync(join(sql, "functions"));
    assert.equal(buildMigrations(sql, join(dir, "empty.ts")), 0);
    const text = readFileSync(join(dir, "empty.ts"), "utf8");
    assert.ok(text.startsWith(HEADER));
    assert.match(text, /export const migrations: readonly Migration\[\] = \[\];\n/);
    assert.match(text, /export const functions: readonly FunctionFile\[\] = \[\];\n/);
    const mod = (await import(pathToFileURL(join(dir, "empty.ts")).href)) as { migrations: unknown[]; functions: unknown[] };
    assert.deepEqual(mod.migrations, []);
    assert.deepEqual(mod.functions, []);
  });
});

test("build-migrations sorts by version and embeds each file's SQL verbatim", async () => {
  await withTempDir(async (dir) => {
    const sql = join(dir, "sql");
    mkdirSync(join(sql, "migrations"), { recursive: true });
    mkdirSync(join(sql, "functions"));
    const tricky = "create function f() returns text language plpgsql as $$\nbegin\n  return 'a \"quoted\" \\\\ `tick` ${x} — é';\nend $$;\n";
    const frozen = "create function :KEYQ_SCHEMA.slot_of(key text, n int) returns int language sql as $$ select 0 $$;\n";
    writeFileSync(join(sql, "migrations", "002_more.sql"), "select 2;\r\n");
    writeFileSync(join(sql, "migrations", "001_engine.sql"), tricky + frozen);
    writeFileSync(join(sql, "migrations", "README.md"), "not a migration");
    writeFileSync(join(sql, "functions", "02_b.sql"), "select 'b';\r\n");
    writeFileSync(join(sql, "functions", "01_a.sql"), tricky);
    assert.equal(buildMigrations(sql, join(dir, "out.ts")), 4);
    const mod = (await import(pathToFileURL(join(dir, "out.ts")).href)) as {
      migrations: { version: number; name: string; sql: string }[];
      functions: { name: string; sql: string }[];
      functionsHash: string;
    };
    assert.deepEqual(mod.migrations, [
      { version: 1, name: "engine", sql: tricky + frozen },
      { version: 2, name: "more", sql: "select 2;\n" },
    ]);
    assert.deepEqual(mod.functions, [{ name: "01_a", sql: tricky }, { name: "02_b", sql: "select 'b';\n" }]);
    assert.equal(mod.functionsHash, functionsHash(mod.functions));
    assert.notEqual(mod.functionsHash, functionsHash([{ name: "01_a", sql: tricky + " " }, mod.functions[1]!]));
  });
});

test("build-migrations gives a changed function set the next serial, an unchanged one the same", async () => {
  await withTempDir(async (dir) => {
    const sql = join(dir, "sql");
    mkdirSync(join(sql, "migrations"), { recursive: true });
    mkdirSync(join(sql, "functions"));
    writeFileSync(join(sql, "functions", "01_a.sql"), "select 1;\n");
    const serial = async (out: string) => {
      buildMigrations(sql, join(dir, out));
      return ((await import(pathToFileURL(join(dir, out)).href)) as { functionsSerial: number }).functionsSerial;
    };
    assert.equal(await serial("a.ts"), 1);
    assert.equal(await serial("b.ts"), 1, "same functions, same serial");
    writeFileSync(join(sql, "functions", "01_a.sql"), "select 2;\n");
    assert.equal(await serial("c.ts"), 2, "an edited function file bumps the serial");
    assert.deepEqual(readStamp(sql).serial, 2);
  });
});

test("renderMigrations refuses a frozen function (slot_of) in the function set, or in no migration", () => {
  const slotOf = "create or replace function :KEYQ_SCHEMA.slot_of(key text, n int) returns int";
  const m = [{ name: "001_engine.sql", text: slotOf }];
  assert.throws(() => renderMigrations(m, [{ name: "01_engine.sql", text: slotOf }]), /slot_of is frozen/);
  assert.throws(() => renderMigrations([{ name: "001_engine.sql", text: "" }], []), /defined by no migration/);
  assert.doesNotThrow(() => renderMigrations(m, [{ name: "01_engine.sql", text: "select 1;" }]));
});

test("renderMigrations refuses bad names, gaps and duplicates", () => {
  assert.throws(() => renderMigrations([], [{ name: "1_engine.sql", text: "" }]), /NN_name\.sql/);
  assert.throws(() => renderMigrations([{ name: "1_engine.sql", text: "" }]), /NNN_name\.sql/);
  assert.throws(() => renderMigrations([{ name: "002_x.sql", text: "" }]), /without gaps/);
  assert.throws(
    () => renderMigrations([{ name: "001_a.sql", text: "" }, { name: "001_b.sql", text: "" }]),
    /without gaps or duplicates/,
  );
});

test("splitStatements splits at semicolons outside quotes, dollar quotes and comments", () => {
  const sql = `-- a; comment\ncreate table t (a text default 'x;''y');\n/* b; */ do $x$ begin perform 1; end $x$;\n` +
    `select E'\\'; ', "a;b", $1;\n-- trailing; comment\n`;
  const s = splitStatements(sql);
  assert.deepEqual(s.map((x) => x.code), [
    "create table t (a text default 'x;''y');",
    "do $x$ begin perform 1; end $x$;",
    `select E'\\'; ', "a;b", $1;`,
    "",
  ]);
  assert.equal(s.map((x) => x.text).join(""), sql, "nothing lost");
});

test("fresh forms leave out function definitions but a frozen function's last one, and refuse a migration that calls a left-out one", () => {
  const f = (name: string, body = "select 1") =>
    `-- ${name} does this\ncreate or replace function :KEYQ_SCHEMA.${name}() returns int language sql as $$ ${body} $$;\n`;
  const one = `-- header\n\ncreate table :KEYQ_SCHEMA.tick (a int);\n\n${f("tick")}\n${f("slot_of")}`;
  const two = `${f("slot_of", "select 2")}create index on :KEYQ_SCHEMA.tick (a);\n`;
  const [a, b, c] = freshMigrations([one, two, "select 3;\n"], ["slot_of"]);
  assert.equal(a, "-- header\n\ncreate table :KEYQ_SCHEMA.tick (a int);\n");
  assert.equal(b, two, "the frozen function's last definition stays");
  assert.equal(c, "select 3;\n");
  assert.throws(() => freshMigrations([one, "select :KEYQ_SCHEMA.tick();\n"], ["slot_of"]), /Migration 2 calls tick/);
  assert.throws(() => freshMigrations([one, "create index on :KEYQ_SCHEMA.t (:KEYQ_SCHEMA.slot_of());\n", two], ["slot_of"]), /calls slot_of/);
  assert.doesNotThrow(() => freshMigrations([one, "insert into :KEYQ_SCHEMA.tick (a) values (1);\n"], ["slot_of"]));
});

test("the generated module gives a migration a fresh form exactly when it defines functions", () => {
  const out = renderMigrations(
    [
      { name: "001_a.sql", text: "create table :KEYQ_SCHEMA.t (a int);\ncreate function :KEYQ_SCHEMA.slot_of() returns int language sql as $$ select 1 $$;\n" },
      { name: "002_b.sql", text: "create function :KEYQ_SCHEMA.f() returns int language sql as $$ select 1 $$;\nalter table :KEYQ_SCHEMA.t add b int;\n" },
    ],
    [],
  );
  assert.equal(out.match(/^ {4}fresh: `/gm)?.length, 1);
  assert.match(out, /fresh: `alter table :KEYQ_SCHEMA\.t add b int;\n`/);
});
