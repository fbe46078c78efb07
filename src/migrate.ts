/**
 * Applies the engine's numbered, immutable migrations in one transaction
 * behind an advisory lock, and renders them as plain SQL for DBAs.
 *
 * @module
 */

import type { Driver } from "./driver.ts";
import { KeyqError } from "./errors.ts";
import { type Migration, migrations } from "./migrations.ts";
import { mapError } from "./sql.ts";
import type { MigrateResult } from "./types.ts";
import { checkSchemaName } from "./validate.ts";

/** The newest schema version this build knows. */
export const latestVersion: number = migrations.length === 0 ? 0 : migrations[migrations.length - 1]!.version;

function render(m: Migration, schema: string): string {
  return m.sql.replaceAll(":KEYQ_SCHEMA_NAME", `'${schema}'`).replaceAll(":KEYQ_SCHEMA", `"${schema}"`);
}

function bootstrap(schema: string): string {
  return `create schema if not exists "${schema}";
create table if not exists "${schema}".migration (
  version int primary key,
  name text not null,
  applied_at timestamptz not null default now()
);`;
}

/**
 * The whole engine as one SQL script, for DBAs who apply migrations by hand.
 * Running it is equivalent to `migrate()` on an empty schema.
 *
 * @example
 * ```ts
 * import { migrationSql } from "keyq";
 * const sql = migrationSql("keyq");
 * console.log(sql.split("\n").length > 100);
 * ```
 */
export function migrationSql(schema = "keyq"): string {
  checkSchemaName(schema);
  const parts = [`begin;`, bootstrap(schema)];
  for (const m of migrations) {
    parts.push(`-- ${String(m.version).padStart(3, "0")}_${m.name}.sql`, render(m, schema));
    parts.push(`insert into "${schema}".migration (version, name) values (${m.version}, '${m.name}');`);
  }
  parts.push(`commit;`);
  return parts.join("\n\n");
}

/** Applies pending migrations; safe to call from many processes at once. */
export async function migrate(driver: Driver, schema: string): Promise<MigrateResult> {
  if (!driver.transaction) {
    throw new KeyqError(
      "TRANSACTIONS_UNSUPPORTED",
      `The ${driver.name} driver has no interactive transactions, so it cannot migrate; use a Pool/Client driver or apply migrationSql() by hand.`,
    );
  }
  try {
    return await driver.transaction(async (tx) => {
      // "create … if not exists" on existing objects would print NOTICEs on every start.
      await tx.query("set local client_min_messages = warning");
      await tx.query("select pg_advisory_xact_lock(hashtextextended($1::text, 0))", [`keyq:migrate:${schema}`]);
      await tx.query(bootstrap(schema));
      const rows = await tx.query(`select coalesce(max(version), 0)::text as v from "${schema}".migration`);
      const from = Number(rows[0]?.v ?? 0);
      if (from > latestVersion) {
        throw new KeyqError(
          "SCHEMA_TOO_NEW",
          `Schema "${schema}" is at version ${from}, newer than this keyq build knows (${latestVersion}); upgrade keyq.`,
          { schema, version: from, known: latestVersion },
        );
      }
      const applied: number[] = [];
      for (const m of migrations) {
        if (m.version <= from) continue;
        await tx.query(render(m, schema));
        await tx.query(`insert into "${schema}".migration (version, name) values ($1::int, $2::text)`, [
          String(m.version),
          m.name,
        ]);
        applied.push(m.version);
      }
      return { from, to: Math.max(from, latestVersion), applied };
    });
  } catch (err) {
    throw mapError(err, schema);
  }
}
