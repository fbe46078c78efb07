// The README's Tour runs as written: every ```ts block between the tour
// markers, in order, becomes one program (import lines hoisted to the top,
// exact duplicates dropped), run in a fresh ESM project that installs the
// packed npm package (tests/helpers/packed.ts), under the runtime running
// this file, against the test database with KEYQ_SCHEMA set to a schema of
// its own, which is dropped afterwards. It runs twice in that schema, as a
// new user would run it again, and must leave nothing outside it. A block
// that throws fails the test; the program must finish by itself.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { runtimeName } from "./helpers/drivers.ts";
import { connect, databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";
import { packedProject, root } from "./helpers/packed.ts";

const skip = await dbSkip();
const runtime = runtimeName();

/** The Tour's ```ts blocks as one program: imports first (deduplicated), then the blocks in order. */
export function tourProgram(readme: string): { program: string; blocks: number } {
  const start = readme.indexOf("<!-- tour:start -->");
  const end = readme.indexOf("<!-- tour:end -->");
  assert.ok(start >= 0 && end > start, "README.md has <!-- tour:start --> … <!-- tour:end -->");
  const blocks = [...readme.slice(start, end).matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
  const imports: string[] = [];
  const bodies = blocks.map((b, i) => {
    const lines = b.split("\n");
    for (const l of lines.filter((l) => /^import .* from ".*";$/.test(l))) if (!imports.includes(l)) imports.push(l);
    return `// --- README Tour block ${i + 1}\n${lines.filter((l) => !/^import .* from ".*";$/.test(l)).join("\n")}`;
  });
  return { program: `${imports.join("\n")}\n\n${bodies.join("\n")}\n`, blocks: blocks.length };
}

/** Every relation and schema outside `schema` that is not a system one: what a run could leave behind. */
async function outside(url: string, schema: string): Promise<string[]> {
  const sql = connect(url, { max: 1 });
  try {
    const rows = await sql.unsafe<{ name: string }[]>(
      `select 'schema ' || nspname as name from pg_namespace where nspname in ('keyq', 'keyq_tour')
       union all select 'relation ' || n.nspname || '.' || c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' order by 1`,
    );
    return rows.map((r) => r.name).filter((n) => !n.includes(schema));
  } finally {
    await sql.end();
  }
}

describe(`README Tour (${runtime})`, () => {
  test("extraction: every ts block of the Tour, imports hoisted once, sql.end() last", () => {
    const { program, blocks } = tourProgram(readFileSync(join(root, "README.md"), "utf8"));
    assert.ok(blocks >= 10, `the Tour has ${blocks} ts blocks`);
    assert.equal(program.match(/^import \{[^}]*\bkeyq\b[^}]*\} from "keyq";$/gm)?.length, 1);
    assert.match(program.trimEnd(), /await sql\.end\(\);[^\n]*$/, "the program ends with sql.end()");
    assert.doesNotMatch(program, /\?\?\s*"postgres(ql)?:\/\//, "no fallback to a shared database: it says what to set instead");
    const fake = '<!-- tour:start -->\n```ts\nimport a from "a";\nx();\n```\n```sh\nno\n```\n```ts\nimport a from "a";\ny();\n```\n<!-- tour:end -->';
    assert.equal(tourProgram(fake).program, 'import a from "a";\n\n// --- README Tour block 1\nx();\n\n// --- README Tour block 2\ny();\n\n');
  });

  test("the Tour's setup names every step: type=module, the driver, tsx", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const install = readme.indexOf("## Install");
    assert.ok(install > 0 && install < readme.indexOf("<!-- tour:start -->"), "Install comes before the Tour");
    assert.match(readme, /npm pkg set type=module/);
    // keyq is not published yet: the README installs the packed tarball (npm install keyq once it is).
    assert.match(readme, /npm install (keyq|\S*keyq-\d+\.\d+\.\d+\.tgz) postgres valibot tsx/);
    assert.ok(readme.split("\n").length < 300, `README.md has ${readme.split("\n").length} lines`);
  });

  test("runs twice as one program in the same schema, with the packed package, and leaves nothing outside it", { skip, timeout: 900_000 }, async () => {
    const url = (await databaseUrl())!;
    const schema = freshSchema("readme");
    const project = await packedProject(["postgres", "valibot"]);
    const before = await outside(url, schema);
    try {
      const { program } = tourProgram(readFileSync(join(root, "README.md"), "utf8"));
      for (const round of [1, 2]) {
        const started = Date.now();
        const { code, out } = await project.run("tour.ts", program, { DATABASE_URL: url, KEYQ_SCHEMA: schema });
        console.log(`${out.trim()}\n(tour, run ${round}: ${Date.now() - started} ms under ${runtime})`);
        assert.equal(code, 0, `the Tour failed under ${runtime} (run ${round}):\n${out}`);
        if (round === 1) assert.match(out, /^appended event 1$/m);
        else assert.match(out, /^appended event \d+$/m);
        assert.match(out, /^false true true$/m, "the second send of one dedup key is deduped");
        assert.match(out, /event \d+ failed \(retry 0\): no thumbnail for \/a\.txt/);
        assert.match(out, /^4 \d+ \[\]$/m, "Tier B (subscribed before producing) delivered the 4 events, no key blocked");
        assert.match(out, /^stopped after \d+ events$/m);
        assert.match(out, /QUEUE_NOT_FOUND|does not exist/, "the Errors block caught its error");
        const sql = connect(url, { max: 1 });
        try {
          const rows = await sql.unsafe(`select count(*)::int as n from "${schema}".file_index`);
          assert.equal(rows[0]!.n, 1, "the indexer applied create, overwrite, delete of /a.txt and create of /b.txt");
        } finally {
          await sql.end();
        }
      }
      assert.deepEqual(await outside(url, schema), before, "the Tour created nothing outside its schema");
      // Without DATABASE_URL it says what to set, and touches no database.
      const bare = await project.run("tour.ts", program, { DATABASE_URL: "", KEYQ_SCHEMA: schema, PGHOST: "", PGDATABASE: "" });
      assert.notEqual(bare.code, 0);
      assert.match(bare.out, /Set DATABASE_URL/);
    } finally {
      project.remove();
      await dropSchema(url, schema);
    }
  });
});
