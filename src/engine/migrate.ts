/**
 * Applies the engine to a schema, and renders it as plain SQL for DBAs.
 *
 * How the engine evolves (README, "How the engine evolves"):
 * - Tables, types, indexes and data live in numbered migrations
 *   (src/sql/migrations/NNN_name.sql), applied once each, in order, and
 *   never edited once released: a change is a new migration. 001–005 are
 *   0.1's files, as 0.1 databases recorded them.
 * - Functions live in src/sql/functions/*.sql. Whenever the set's hash
 *   (functionsHash) differs from the one recorded in the schema's
 *   function_set table, migrate() drops every function of the schema except
 *   the frozen ones and creates the set anew: a changed body, return type,
 *   argument list or a removed function needs no migration. A set recorded
 *   by a newer keyq version is left alone (no downgrade in a rolling deploy).
 * - Frozen functions (slot_of: indexes depend on it) live in migrations only.
 * - An empty schema is installed through the migrations' fresh forms (their
 *   function definitions left out, but a frozen function's last one): the
 *   function set then creates each function once. A schema at any version
 *   upgrades through the migrations' full texts, as it always did.
 * - After each re-creation, secureSql() applies least privilege
 *   (docs/roles.md): no EXECUTE for PUBLIC, SECURITY DEFINER entry
 *   functions, and every EXECUTE grant of the previous set given again.
 *
 * All of it runs in one transaction behind an advisory lock; a migrate()
 * with nothing to do reads two rows and runs no DDL.
 *
 * @module
 */

import { type Driver, type Executor, transactional } from "../driver.ts";
import { KeyqError } from "../errors.ts";
import * as generated from "../generated/migrations.ts";
import type { FunctionFile, Migration } from "../generated/migrations.ts";
import { mapError } from "./reply.ts";
import type { MigrateResult } from "../types.ts";
import { checkSchemaName } from "../validate.ts";

/**
 * One build's engine: its migrations and function set, as
 * src/generated/migrations.ts holds them. migrate() applies this build's;
 * tests pass another build to play two deployments against one schema.
 */
export interface EngineBuild {
  readonly migrations: readonly Migration[];
  readonly frozenFunctions: readonly string[];
  readonly functions: readonly FunctionFile[];
  readonly functionsHash: string;
  readonly functionsVersion: string;
  readonly functionsSerial: number;
}

/**
 * This build's engine (src/generated/migrations.ts).
 *
 * @example
 * ```ts
 * import { thisBuild } from "./migrate.ts";
 * console.log(thisBuild.functionsVersion, thisBuild.functionsSerial);
 * ```
 */
export const thisBuild: EngineBuild = generated;

const versionOf = (b: EngineBuild): number => b.migrations.length === 0 ? 0 : b.migrations[b.migrations.length - 1]!.version;

/** The newest schema version this build knows. */
export const latestVersion: number = versionOf(thisBuild);

function render(sql: string, schema: string): string {
  return sql.replaceAll(":KEYQ_SCHEMA_NAME", `'${schema}'`).replaceAll(":KEYQ_SCHEMA", `"${schema}"`);
}

function bootstrap(schema: string): string {
  return `create schema if not exists "${schema}";
create table if not exists "${schema}".migration (
  version int primary key,
  name text not null,
  applied_at timestamptz not null default now()
);`;
}

function recordMigration(m: Migration, schema: string): string {
  return `insert into "${schema}".migration (version, name) values (${m.version}, '${m.name}');`;
}

/**
 * The function set as one script: drops the schema's functions (all but the
 * frozen ones: a changed signature or return type cannot be replaced), then
 * creates the set and records its hash. The schema belongs to keyq.
 */
function functionSetSql(schema: string, build: EngineBuild): string {
  const { frozenFunctions, functions, functionsHash, functionsSerial, functionsVersion } = build;
  const keep = frozenFunctions.map((f) => `'${f}'`).join(", ");
  const drop = `do $keyq$
declare f record;
begin
  -- EXECUTE grants on the old set (a DBA's, keyq's own) come back after the re-creation.
  perform pg_catalog.set_config('keyq.function_acl', coalesce((
    select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('fn', p.proname, 'grantee', a.grantee))
      from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     where p.pronamespace = '"${schema}"'::regnamespace and a.privilege_type = 'EXECUTE'
       and a.grantee <> 0 and a.grantee <> p.proowner), '[]')::text, true);
  for f in select p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) as args
             from pg_catalog.pg_proc p
            where p.pronamespace = '"${schema}"'::regnamespace and p.prokind = 'f'
              and p.proname <> all (array[${keep}]::text[])
  loop
    execute pg_catalog.format('drop function %I.%I(%s)', '${schema}', f.proname, f.args);
  end loop;
end $keyq$;`;
  const record = `delete from "${schema}".function_set;
insert into "${schema}".function_set (hash, version, serial) values ('${functionsHash}', '${functionsVersion}', ${functionsSerial});`;
  return [drop, ...functions.map((f) => `-- functions/${f.name}.sql\n\n${render(f.sql, schema)}`), secureSql(schema, frozenFunctions), record].join(
    "\n\n",
  );
}

/**
 * Least privilege over the set just created (docs/roles.md): PUBLIC loses
 * EXECUTE on every function of the schema; every function but the frozen
 * ones gets the pinned search_path (slot_of must stay inlinable: it
 * qualifies every operator instead); the entry functions run SECURITY
 * DEFINER (they check the caller themselves); the EXECUTE grants captured
 * before the drop and the ones keyq's grants imply are given again.
 */
function secureSql(schema: string, frozenFunctions: readonly string[]): string {
  const keep = frozenFunctions.map((f) => `'${f}'`).join(", ");
  return `-- least privilege (docs/roles.md)
do $keyq$
declare f record;
begin
  for f in select p.oid::regprocedure as sig,
                  p.proname in (select e.fn from "${schema}".entry_functions() e
                                union all values ('grant_access'), ('revoke_access')) as entry,
                  p.proname = any (array[${keep}]::text[]) as frozen
             from pg_catalog.pg_proc p
            where p.pronamespace = '"${schema}"'::regnamespace and p.prokind = 'f'
  loop
    execute pg_catalog.format('revoke execute on function %s from public', f.sig);
    if not f.frozen then
      execute pg_catalog.format('alter function %s set search_path = pg_catalog, pg_temp', f.sig);
    end if;
    if f.entry then
      execute pg_catalog.format('alter function %s security definer', f.sig);
    end if;
  end loop;
  for f in select distinct p.oid::regprocedure as sig, r.rolname
             from pg_catalog.jsonb_array_elements(
                    pg_catalog.current_setting('keyq.function_acl', true)::jsonb) x
             join pg_catalog.pg_roles r on r.oid = (x->>'grantee')::oid
             join pg_catalog.pg_proc p on p.proname = x->>'fn'
                  and p.pronamespace = '"${schema}"'::regnamespace
  loop
    execute pg_catalog.format('grant execute on function %s to %I', f.sig, f.rolname);
  end loop;
end $keyq$;
select "${schema}".apply_grants();`;
}

/**
 * The whole engine as one SQL script, for DBAs who apply migrations by hand.
 * Running it is equivalent to `migrate()` on an empty schema: the
 * migrations' fresh forms, then the function set (each function created once).
 *
 * @example
 * ```ts
 * import { migrationSql } from "@keyq/keyq";
 * const sql = migrationSql("keyq");
 * console.log(sql.split("\n").length > 100);
 * ```
 */
export function migrationSql(schema = "keyq"): string {
  checkSchemaName(schema);
  return installSql(schema, thisBuild);
}

/** migrationSql() of `build`. */
function installSql(schema: string, build: EngineBuild): string {
  const parts = [`begin;`, bootstrap(schema)];
  for (const m of build.migrations) {
    const form = m.fresh === undefined ? "" : " (fresh install: its functions come from the function set)";
    parts.push(`-- ${String(m.version).padStart(3, "0")}_${m.name}.sql${form}`, render(m.fresh ?? m.sql, schema), recordMigration(m, schema));
  }
  parts.push(functionSetSql(schema, build), `commit;`);
  return parts.join("\n\n");
}

/** major.minor.patch as numbers (a pre-release tag is ignored). */
function semver(v: string): number[] {
  return v.split(/[-+]/)[0]!.split(".").map((n) => Number(n) || 0);
}

/** a < b by major.minor.patch. */
function olderVersion(a: string, b: string): boolean {
  const [x, y] = [semver(a), semver(b)];
  for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  return false;
}

/** What migrate() did with the function set (MigrateResult.functions). */
type SetOutcome = MigrateResult["functions"];

/**
 * Re-applies the function set when the recorded hash is not this build's,
 * unless a newer set is recorded: a newer keyq version's (during a rolling
 * deploy, an old process that restarts must not put the old functions
 * back), or a later build of this version (a higher serial): then it is
 * left alone and the result says "newer". A different set of this version
 * with this serial is refused: two builds would otherwise replace each
 * other's functions on every start.
 */
async function applyFunctions(tx: Executor, schema: string, build: EngineBuild): Promise<SetOutcome> {
  const { functionsHash, functionsSerial, functionsVersion } = build;
  const rows = await tx.query(`select hash, version, serial::text as serial from "${schema}".function_set`);
  const recorded = rows.length === 1 ? rows[0]! : undefined;
  if (recorded?.hash === functionsHash) return "current";
  if (recorded) {
    const version = String(recorded.version);
    if (olderVersion(functionsVersion, version)) return "newer";
    if (!olderVersion(version, functionsVersion)) {
      const serial = Number(recorded.serial);
      if (serial > functionsSerial) return "newer";
      if (serial === functionsSerial) {
        throw new KeyqError(
          "FUNCTION_SET_CONFLICT",
          `Schema "${schema}" holds another function set of keyq ${version} with the same serial ${serial} (hash ${
            String(recorded.hash).slice(0, 12)
          }, this build's ${
            functionsHash.slice(0, 12)
          }): two different builds of one version are deployed. Deploy one build, or rebuild with npm run build:migrations so the newer set gets the next serial.`,
          { schema, version, serial, recorded: recorded.hash, hash: functionsHash },
        );
      }
    }
  }
  await tx.query(functionSetSql(schema, build));
  return "applied";
}

/** Applies pending migrations; safe to call from many processes at once. */
export function migrate(driver: Driver, schema: string): Promise<MigrateResult> {
  return migrateBuild(thisBuild, driver, schema);
}

/**
 * migrate() with another build's engine (tests: two deployments of one
 * version against one schema). An empty schema (no migration recorded) is
 * installed through the migrations' fresh forms.
 *
 * @example
 * ```ts
 * import type { Driver } from "../driver.ts";
 * import { migrateBuild, thisBuild } from "./migrate.ts";
 * declare const driver: Driver;
 * const r = await migrateBuild(thisBuild, driver, "keyq");
 * console.log(r.functions); // "applied", "current" or "newer"
 * ```
 */
export async function migrateBuild(build: EngineBuild, driver: Driver, schema: string): Promise<MigrateResult> {
  const db = transactional(driver);
  const latest = versionOf(build);
  try {
    return await db.transaction(async (tx) => {
      // "create … if not exists" on existing objects would print NOTICEs on every start.
      await tx.query("set local client_min_messages = warning");
      await tx.query("select pg_advisory_xact_lock(hashtextextended($1::text, 0))", [`keyq:migrate:${schema}`]);
      await tx.query(bootstrap(schema));
      const rows = await tx.query(`select coalesce(max(version), 0)::text as v from "${schema}".migration`);
      const from = Number(rows[0]?.v ?? 0);
      if (from > latest) {
        throw new KeyqError(
          "SCHEMA_TOO_NEW",
          `Schema "${schema}" is at version ${from}, newer than this keyq build knows (${latest}); upgrade keyq.`,
          { schema, version: from, known: latest },
        );
      }
      const applied: number[] = [];
      for (const m of build.migrations) {
        if (m.version <= from) continue;
        // From nothing, the function set creates every function: no migration's.
        await tx.query(render(from === 0 ? m.fresh ?? m.sql : m.sql, schema));
        await tx.query(`insert into "${schema}".migration (version, name) values ($1::int, $2::text)`, [
          String(m.version),
          m.name,
        ]);
        applied.push(m.version);
      }
      const functions = await applyFunctions(tx, schema, build);
      return { from, to: Math.max(from, latest), applied, functions };
    });
  } catch (err) {
    throw mapError(err, schema);
  }
}
