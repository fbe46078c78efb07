/**
 * Grants in keyq's terms (docs/roles.md): which role may produce to which
 * queues, consume as which consumers, and operate. The engine keeps them in
 * its `role_grant` table and checks them in every entry function; here they
 * are validated, sent, listed, and rendered as SQL for DBAs.
 *
 * @module
 */

import * as v from "valibot";
import type { Executor } from "../driver.ts";
import { engine } from "../engine/calls.ts";
import { KeyqError } from "../errors.ts";
import type { GrantInput, RevokeInput, RoleGrants } from "../types.ts";
import { checkName, checkSchemaName, parse, show } from "../validate.ts";

const names = v.optional(v.array(v.string("expected a queue name")));
const grantSchema = v.strictObject({
  role: v.string("expected the role's name"),
  produce: names,
  consume: v.optional(v.record(v.string(), v.array(v.string("expected a consumer name")))),
  operate: v.optional(v.boolean("expected true or false")),
});
const revokeSchema = v.strictObject({ ...grantSchema.entries, all: v.optional(v.boolean("expected true or false")) });

/** The grant as the engine takes it. */
interface Checked {
  role: string;
  produce: string[];
  consume: Record<string, string[]>;
  operate: boolean;
  all: boolean;
}

const queueOrAll = (q: unknown): string => (q === "*" ? q : checkName("queue", q));
const consumerOrAll = (c: unknown): string => (c === "*" ? c : checkName("consumer", c));

/** Checks a grant or revoke; every refusal happens before anything is written. */
function check(input: unknown, what: "grant" | "revoke"): Checked {
  const o = parse(what === "grant" ? grantSchema : revokeSchema, input, `${what} options`) as GrantInput & { all?: boolean };
  if (o.role.length === 0 || new TextEncoder().encode(o.role).length > 63 || o.role.includes("\0")) {
    throw new KeyqError("INVALID_INPUT", `The role name ${show(o.role)} is not valid; a Postgres role name has 1–63 bytes.`, {
      field: "role",
      value: o.role,
    });
  }
  const consume: Record<string, string[]> = {};
  for (const [queue, consumers] of Object.entries(o.consume ?? {})) consume[queueOrAll(queue)] = consumers.map(consumerOrAll);
  const out: Checked = {
    role: o.role,
    produce: (o.produce ?? []).map(queueOrAll),
    consume,
    operate: o.operate ?? false,
    all: o.all ?? false,
  };
  const empty = out.produce.length === 0 && Object.values(consume).every((c) => c.length === 0) && !out.operate && !out.all;
  if (empty) {
    throw new KeyqError(
      "INVALID_INPUT",
      `This ${what} names nothing for role "${o.role}"; give produce: ["queue"], consume: { queue: ["consumer"] }, operate: true${
        what === "revoke" ? " or all: true" : ""
      }.`,
      { field: what },
    );
  }
  return out;
}

/** Adds grants to a role (idempotent); the schema owner only. Resolves to the role's grants. */
export async function grant(exec: Executor, schema: string, input: GrantInput): Promise<RoleGrants> {
  const g = check(input, "grant");
  return await engine(exec, schema).grant({ role: g.role, produce: g.produce, consume: g.consume, operate: g.operate });
}

/** Removes grants from a role (`all: true`: every one); the schema owner only. */
export async function revoke(exec: Executor, schema: string, input: RevokeInput): Promise<RoleGrants> {
  const g = check(input, "revoke");
  return await engine(exec, schema).revoke(g);
}

/** Every role's grants (the owner or an operator). */
export async function grants(exec: Executor, schema: string): Promise<RoleGrants[]> {
  return await engine(exec, schema).grants({});
}

/** A string literal for SQL text (standard_conforming_strings). */
const literal = (s: string): string => `'${s.replaceAll("'", "''")}'`;

/**
 * The SQL of a grant (or revoke) for people who apply SQL by hand: run it
 * as the schema owner after the engine script (`migrationSql`).
 *
 * @example
 * ```ts
 * import { grantSql } from "keyq";
 * console.log(grantSql("keyq", { role: "orders_api", produce: ["orders"] }));
 * ```
 */
export function grantSql(schema: string, input: GrantInput | (RevokeInput & { revoke: true })): string {
  checkSchemaName(schema);
  const isRevoke = (input as { revoke?: unknown })?.revoke === true;
  const { revoke: _r, ...rest } = (input ?? {}) as RevokeInput & { revoke?: boolean };
  const g = check(rest, isRevoke ? "revoke" : "grant");
  const args = [
    `role => ${literal(g.role)}`,
    `produce => array[${g.produce.map(literal).join(", ")}]::text[]`,
    `consume => ${literal(JSON.stringify(g.consume))}::jsonb`,
    `operate => ${g.operate}`,
    ...(isRevoke ? [`every_grant => ${g.all}`] : []),
  ];
  return `select "${schema}".${isRevoke ? "revoke_access" : "grant_access"}(${args.join(", ")});`;
}
