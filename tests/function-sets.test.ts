// One source per function: a fresh install creates each engine function once
// (the migrations' fresh forms define none but slot_of, the function set
// creates the rest), counted from the script and, in a private database, by
// an event trigger on what PostgreSQL really created and dropped. And two
// builds of one version with different function sets, deployed against one
// schema, do not replace each other's functions on every migrate(): the
// higher serial wins, the older build leaves it alone and says so.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { KeyqError, migrationSql } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { type EngineBuild, migrateBuild, thisBuild } from "../src/engine/migrate.ts";
import { functionsHash } from "../scripts/build-migrations.ts";
import { catalogDump } from "../scripts/catalog-dump.ts";
import { splitStatements } from "../scripts/sql-statements.ts";
import { connect, databaseUrl, dbSkip, type Sql } from "./helpers/db.ts";
import { withSchema } from "./helpers/fixture.ts";

const skip = await dbSkip();

/** The functions a script's statements define, in order (any schema qualifier). */
function definitions(sql: string): string[] {
  const def = /^create\s+(?:or\s+replace\s+)?function\s+(?:"[^"]+"|:?[A-Za-z_]\w*)\.([a-z_]\w*)\s*\(/i;
  return splitStatements(sql).flatMap((s) => def.exec(s.code)?.[1] ?? []);
}

/** The functions this build's set defines, plus the frozen ones (from the migrations). */
const setFunctions = [...thisBuild.functions.flatMap((f) => definitions(f.sql)), ...thisBuild.frozenFunctions].sort();

/** This build as it was before fresh forms: every migration's full text on a fresh install too. */
const fullBuild: EngineBuild = { ...thisBuild, migrations: thisBuild.migrations.map(({ fresh: _, ...m }) => m) };

test("the function set defines each function once, and no other build file defines one of them", () => {
  assert.ok(setFunctions.length > 50, `the set defines ${setFunctions.length} functions`);
  assert.equal(new Set(setFunctions).size, setFunctions.length, "no function defined twice in the set");
  const fresh = thisBuild.migrations.flatMap((m) => definitions(m.fresh ?? m.sql));
  assert.deepEqual(fresh, [...thisBuild.frozenFunctions], "fresh forms define only the frozen functions, once each");
  const full = thisBuild.migrations.flatMap((m) => definitions(m.sql));
  assert.ok(full.length > fresh.length, `the full migrations define ${full.length} (upgrades still run them)`);
});

test("migrationSql() creates each function exactly once", () => {
  const created = definitions(migrationSql("kq_count"));
  assert.deepEqual([...created].sort(), setFunctions);
  const before = definitions(installScript(fullBuild));
  console.log(`# create function statements in a fresh install: ${before.length} before (full migrations), ${created.length} now`);
  assert.ok(before.length > created.length);
});

/** The DBA script of `build` (migrationSql() renders thisBuild's). */
function installScript(build: EngineBuild): string {
  return build.migrations.map((m) => m.fresh ?? m.sql).join("\n") + build.functions.map((f) => f.sql).join("\n");
}

/** A private database with an event trigger logging every function created or dropped. */
async function withCountingDatabase(body: (sql: Sql, log: () => Promise<{ created: string[]; dropped: string[] }>) => Promise<void>): Promise<boolean> {
  const url = (await databaseUrl())!;
  const admin = connect(url);
  const name = `keyq_fnset_${randomBytes(4).toString("hex")}`;
  try {
    const [su] = await admin.unsafe(`select rolsuper from pg_roles where rolname = current_user`);
    if (!su?.rolsuper) return false; // event triggers need a superuser
    await admin.unsafe(`create database ${name} template template0`);
    const u = new URL(url);
    u.pathname = `/${name}`;
    const sql = connect(u.href);
    try {
      await sql.unsafe(`
        create table public.fn_log (event text, fn text);
        create function public.fn_created() returns event_trigger language plpgsql as $$
        begin
          insert into public.fn_log select 'create', object_identity from pg_event_trigger_ddl_commands()
           where command_tag = 'CREATE FUNCTION';
        end $$;
        create function public.fn_dropped() returns event_trigger language plpgsql as $$
        begin
          insert into public.fn_log select 'drop', object_identity from pg_event_trigger_dropped_objects()
           where object_type = 'function';
        end $$;
        create event trigger fn_created on ddl_command_end execute function public.fn_created();
        create event trigger fn_dropped on sql_drop execute function public.fn_dropped();`);
      const log = async () => {
        const rows = await sql.unsafe(`delete from public.fn_log returning event, fn`);
        const of = (e: string) => rows.filter((r) => r.event === e).map((r) => String(r.fn).replace(/^[^.]+\.([^(]+)\(.*$/, "$1")).sort();
        return { created: of("create"), dropped: of("drop") };
      };
      await body(sql, log);
    } finally {
      await sql.end({ timeout: 2 });
    }
    return true;
  } finally {
    await admin.unsafe(`drop database if exists ${name} with (force)`).catch(() => {});
    await admin.end({ timeout: 2 });
  }
}

test("a fresh migrate() creates each function once and drops none; the full migrations give the same schema", { skip }, async (t) => {
  const ran = await withCountingDatabase(async (sql, log) => {
    const driver = fromPostgresJs(sql);
    const r = await migrateBuild(thisBuild, driver, "kq_fresh");
    assert.equal(r.functions, "applied");
    const fresh = await log();
    assert.deepEqual(fresh.created, setFunctions, "each function of the set (and slot_of) created once");
    assert.deepEqual(fresh.dropped, [], "no function created and dropped again");
    await migrateBuild(fullBuild, driver, "kq_full"); // how a fresh install ran before fresh forms
    const full = await log();
    console.log(`# functions created by a fresh migrate(): ${full.created.length} before (dropping ${full.dropped.length}), ${fresh.created.length} now`);
    assert.ok(full.created.length > fresh.created.length && full.dropped.length > 0);
    assert.equal((await migrateBuild(thisBuild, driver, "kq_fresh")).functions, "current");
    assert.deepEqual(await log(), { created: [], dropped: [] }, "a second migrate() creates nothing");
    // Either way the same schema (tests/schema-snapshot.test.ts pins the fresh one).
    assert.equal(await catalogDump(sql, "kq_fresh"), await catalogDump(sql, "kq_full"));
  });
  if (!ran) t.skip("event triggers need a superuser");
});

/** `base` with one more function (a different body of the set) and the given serial and version. */
function variant(marker: string, serial: number, version = thisBuild.functionsVersion): EngineBuild {
  const functions = [...thisBuild.functions, {
    name: "99_marker",
    sql: `create function :KEYQ_SCHEMA.build_marker() returns text language sql as $$ select '${marker}' $$;\n`,
  }];
  return { ...thisBuild, functions, functionsHash: functionsHash(functions), functionsSerial: serial, functionsVersion: version };
}

test(
  "two builds of one version: the higher serial's set stays, call after call; an equal serial is refused",
  { skip },
  () =>
    withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url), (s) => s.end({ timeout: 2 }));
      const driver = fromPostgresJs(sql);
      const older = thisBuild;
      const newer = variant("newer", thisBuild.functionsSerial + 1);
      const state = async () => {
        const [p] = await sql.unsafe(
          `select string_agg(oid::text || ':' || xmin::text, ',' order by oid) as procs from pg_proc where pronamespace = '"${schema}"'::regnamespace`,
        );
        const [f] = await sql.unsafe(`select hash, serial, applied_at::text as at from "${schema}".function_set`);
        return { procs: String(p!.procs), hash: String(f!.hash), serial: Number(f!.serial), at: String(f!.at) };
      };
      assert.equal((await migrateBuild(older, driver, schema)).functions, "applied");
      assert.equal((await migrateBuild(newer, driver, schema)).functions, "applied", "a later build replaces an earlier one's set");
      const settled = await state();
      assert.equal(settled.hash, newer.functionsHash);
      for (const build of [older, newer, older, older, newer]) {
        const r = await migrateBuild(build, driver, schema);
        assert.equal(r.functions, build === newer ? "current" : "newer", "the older build leaves the newer set alone and says so");
        assert.deepEqual(await state(), settled, "no function re-created, nothing recorded");
      }
      const [m] = await sql.unsafe(`select "${schema}".build_marker() as m`);
      assert.equal(m!.m, "newer");
      // A twin: another set under the newer build's serial. Refused, nothing applied.
      await assert.rejects(migrateBuild(variant("twin", newer.functionsSerial), driver, schema), (err: unknown) => {
        assert.ok(err instanceof KeyqError && err.code === "FUNCTION_SET_CONFLICT", String(err));
        return true;
      });
      assert.deepEqual(await state(), settled);
      // Versions order first: an older version's higher serial is left alone, a newer version's lower serial applies.
      assert.equal((await migrateBuild(variant("old", 999, "0.0.1"), driver, schema)).functions, "newer");
      assert.deepEqual(await state(), settled);
      assert.equal((await migrateBuild(variant("next", 0, "999.0.0"), driver, schema)).functions, "applied");
      const [n] = await sql.unsafe(`select "${schema}".build_marker() as m`);
      assert.equal(n!.m, "next");
    }, "fnset"),
);
