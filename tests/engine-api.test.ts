// The typed engine seam against the real engine: every declaration in
// src/engine/declarations.ts (function name, argument names and types, return type) must
// match pg_proc of a freshly migrated schema, every engine function must be
// declared or on the internal allow-list, and every KQ### raise of the
// engine must be in the one SQLSTATE table of src/errors.ts. A deliberately
// wrong declaration shows the comparison can fail.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { ENGINE, type EngineFn, FORMAT_TYPE, INTERNAL_FUNCTIONS, statement } from "../src/engine/calls.ts";
import { DATABASE_ERRORS, fromDatabaseError } from "../src/errors.ts";
import { connect, databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();

/** One function as pg_proc has it (input arguments only). */
interface CatalogFn {
  name: string;
  args: { name: string; type: string }[];
  /** How many trailing arguments have defaults. */
  defaults: number;
  returns: string;
  setof: boolean;
}

type AnyFn = EngineFn<Record<string, unknown>>;

/** Every difference between the declarations and the catalog, as sentences; empty when they agree. */
function compare(declared: Record<string, AnyFn>, catalog: CatalogFn[], internal: readonly string[]): string[] {
  const problems: string[] = [];
  const byName = new Map(catalog.map((f) => [f.name, f]));
  const names = new Set<string>();
  for (const [ts, d] of Object.entries(declared)) {
    names.add(d.name);
    const f = byName.get(d.name);
    if (!f) {
      problems.push(`${ts}: no engine function ${d.name}()`);
      continue;
    }
    const returns = `${f.setof ? "setof " : ""}${f.returns}`;
    if (returns !== d.returns) problems.push(`${ts}: ${d.name}() returns ${returns}, declared ${d.returns}`);
    const passed = new Set(d.args.map((a) => a.sql));
    const want = [...d.args.map((a) => ({ name: a.sql, type: FORMAT_TYPE[a.type] })), ...d.defaulted.map((a) => ({ name: a.sql, type: FORMAT_TYPE[a.type] }))];
    const have = f.args.map((a) => `${a.name} ${a.type}`).sort().join(", ");
    const wanted = want.map((a) => `${a.name} ${a.type}`).sort().join(", ");
    if (have !== wanted) problems.push(`${ts}: ${d.name}(${have}) in the engine, declared (${wanted})`);
    const order = f.args.filter((a) => passed.has(a.name)).map((a) => a.name).join(",");
    if (order !== d.args.map((a) => a.sql).join(",")) problems.push(`${ts}: arguments declared in another order than ${d.name}(${order})`);
    const optional = new Set(f.args.slice(f.args.length - f.defaults).map((a) => a.name));
    for (const a of d.defaulted) if (!optional.has(a.sql)) problems.push(`${ts}: ${d.name}(${a.sql}) has no default but TS leaves it out`);
  }
  for (const n of internal) {
    if (names.has(n)) problems.push(`${n}: both declared and internal`);
    if (!byName.has(n)) problems.push(`${n}: on the internal list but not in the engine`);
  }
  for (const f of catalog) {
    if (!names.has(f.name) && !internal.includes(f.name)) problems.push(`${f.name}: an engine function neither declared in ENGINE nor internal`);
  }
  return problems;
}

/** docs/engine.md, whose table lists the functions SQL callers use. */
const ENGINE_DOC = readFileSync(new URL("../docs/engine.md", import.meta.url), "utf8");

/** An argument name that reads in named notation: a word, not a letter or an abbreviation. */
const readable = (name: string) => name.length >= 3 && !["lim", "cnt", "num", "idx"].includes(name);

/** The signatures (`name(arg, …)`, catalog order) that `doc` does not show. */
function missingFromDoc(fns: CatalogFn[], doc: string): string[] {
  return fns.map((f) => `${f.name}(${f.args.map((a) => a.name).join(", ")})`).filter((sig) => !doc.includes(`\`${sig}\``));
}

describe("engine API", () => {
  test("the wire of a declared call is the one the engine has always had", () => {
    const st = statement("keyq", ENGINE.receiveOrdered, {
      queue: "q",
      consumer: "c",
      slots: [2, 0],
      maxEvents: 10,
      helpAfter: null,
      slotCount: 4,
    }, [["statement_timeout", "100ms"]]);
    assert.equal(
      st.text,
      `select set_config('statement_timeout', $7::text, true), "keyq".receive_ordered(queue => $1::text::text, consumer => $2::text::text, ` +
        `slots => $3::text::int[], max_events => $4::text::int, help_after => $5::text::float8, slot_count => $6::text::int)::text as r`,
    );
    assert.deepEqual(st.params, ["q", "c", "{2,0}", "10", null, "4", "100ms"]);
    const send = statement("s", ENGINE.send, { queue: "q", type: "T", payload: null, key: null, dedupKey: null, ttl: null, trace: null });
    assert.deepEqual(send.params, ["q", "T", "null", null, null, null, null], "a null payload is JSON null, not SQL NULL");
    const fence = statement("s", ENGINE.fence, { queue: "q", consumer: "c", slot: 0, keys: ['a"b', "c\\d"], holder: "h", ms: 1.5 });
    assert.match(
      fence.text,
      /fence\(queue => \$1::text::text, consumer => \$2::text::text, slot => \$3::text::int, keys => \$4::text::text\[\], holder => \$5::text::text, lease_ms => \$6::text::float8\)/,
    );
    assert.equal(fence.params[3], '{"a\\"b","c\\\\d"}');
  });

  test("a driver error mapped to a KeyqError keeps it as cause; the table has one row per engine SQLSTATE", () => {
    const err = Object.assign(new Error("queue missing"), { code: "KQ001", hint: "KEYQ:QUEUE_NOT_FOUND" });
    const mapped = fromDatabaseError(err);
    assert.ok(mapped instanceof KeyqError);
    assert.equal(mapped.code, "QUEUE_NOT_FOUND");
    assert.equal(mapped.cause, err);
    const missing = Object.assign(new Error('schema "nope" does not exist'), { code: "3F000" });
    const nm = fromDatabaseError(missing, "nope");
    assert.ok(nm instanceof KeyqError && nm.code === "NOT_MIGRATED" && nm.cause === missing);
    const inside = Object.assign(new Error('schema "nope" does not exist'), { code: "3F000", where: "PL/pgSQL function" });
    assert.equal(fromDatabaseError(inside, "nope"), inside, "inside an engine function it is a bug, not NOT_MIGRATED");
    const other = Object.assign(new Error("deadlock"), { code: "40P01" });
    assert.equal(fromDatabaseError(other, "keyq"), other, "anything else passes through");
  });

  test("the declarations match pg_proc of a migrated schema (and a wrong one is reported)", { skip }, async () => {
    const url = (await databaseUrl())!;
    const schema = freshSchema("api");
    const sql = connect(url);
    try {
      const q = keyq(fromPostgresJs(sql), { schema });
      await q.migrate();
      const rows = await sql.unsafe(
        `select p.proname as name, p.proargnames as names, p.proargmodes::text[] as modes, p.pronargdefaults as defaults,
                array(select format_type(t, null) from unnest(p.proargtypes::oid[]) with ordinality u(t, i) order by i) as types,
                format_type(p.prorettype, null) as returns, p.proretset as setof
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = $1 order by 1`,
        [schema],
      );
      const catalog: CatalogFn[] = rows.map((r) => {
        const names = (r.names as string[] | null ?? []).filter((_, i) => !r.modes || ["i", "b", "v"].includes((r.modes as string[])[i]!));
        const types = r.types as string[];
        return {
          name: r.name as string,
          args: types.map((t, i) => ({ name: names[i] ?? "", type: t.replaceAll(`${schema}.`, "") })),
          defaults: r.defaults as number,
          returns: r.returns as string,
          setof: r.setof as boolean,
        };
      });
      assert.ok(catalog.length > 20, `the engine has its functions (${catalog.length})`);
      const declared = ENGINE as unknown as Record<string, AnyFn>;
      assert.deepEqual(compare(declared, catalog, INTERNAL_FUNCTIONS), []);

      // The functions SQL callers use read in named notation, and docs/engine.md lists each with its arguments in order.
      const entry = new Set([...Object.values(declared).map((d) => d.name), "tick_all", "rotate"]);
      const called = catalog.filter((f) => entry.has(f.name));
      assert.equal(called.length, entry.size, "every declared function is in the catalog");
      assert.deepEqual(called.flatMap((f) => f.args.filter((a) => !readable(a.name)).map((a) => `${f.name}(${a.name})`)), []);
      assert.deepEqual(missingFromDoc(called, ENGINE_DOC), []);
      const [ack] = called.filter((f) => f.name === "ack");
      assert.deepEqual(missingFromDoc([{ ...ack!, args: [...ack!.args, { name: "extra", type: "int" }] }], ENGINE_DOC), [
        "ack(queue, consumer, slot, outcome, extra)",
      ], "the doc check can fail");
      assert.equal(readable("lim") || readable("s") || readable("n"), false, "the name check can fail");

      // The comparison can fail: a renamed argument, a wrong type, a missing
      // function and an undeclared engine function are each reported.
      const receive = ENGINE.receive as unknown as AnyFn;
      const wrong: Record<string, AnyFn> = {
        ...declared,
        receive: { ...receive, args: receive.args.map((a) => (a.sql === "max_events" ? { ...a, sql: "max" } : a)) },
        tick: { ...(ENGINE.tick as unknown as AnyFn), args: [{ key: "queue", sql: "queue", type: "int" }, { key: "force", sql: "force", type: "boolean" }] },
        ghost: { ...(ENGINE.tick as unknown as AnyFn), name: "ghost" },
      };
      const problems = compare(wrong, catalog, INTERNAL_FUNCTIONS.filter((n) => n !== "tick_all"));
      assert.equal(problems.filter((p) => p.startsWith("receive:")).length, 2, problems.join("\n"));
      assert.ok(problems.some((p) => p.startsWith("tick:") && p.includes("queue integer")), problems.join("\n"));
      assert.ok(problems.includes("ghost: no engine function ghost()"), problems.join("\n"));
      assert.ok(problems.includes("tick_all: an engine function neither declared in ENGINE nor internal"), problems.join("\n"));

      // Every KQ### the engine raises maps, by the one table, to the code its hint names.
      const src = await sql.unsafe(
        `select string_agg(p.prosrc, E'\\n') as src from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = $1`,
        [schema],
      );
      const raises = [...String(src[0]!.src).matchAll(/errcode = '(KQ\d+)', hint = 'KEYQ:([A-Z_]+)'/g)];
      assert.ok(raises.length >= 5, `the engine raises KQ errors (${raises.length})`);
      for (const [, state, code] of raises) assert.equal(DATABASE_ERRORS[state!]?.code, code, `${state} → ${code}`);

      // And a real refusal keeps the driver's error as cause.
      const err = await q.send("nope", { type: "T", payload: 1 }).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof KeyqError && err.code === "QUEUE_NOT_FOUND", String(err));
      assert.equal((err.cause as { code?: string }).code, "KQ001");
    } finally {
      await sql.end();
      await dropSchema(url, schema);
    }
  });
});
