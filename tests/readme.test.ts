// The README's Tour runs as written: every ```ts block between the tour
// markers, in order, becomes one program (import lines hoisted to the top,
// exact duplicates dropped), run in a fresh ESM project that installs the
// packed npm package (npm pack, then npm install --offline, as
// scripts/pack-check.ts does), under the runtime running this file, against
// the test database in a schema of its own (KEYQ_SCHEMA, and search_path for
// the Tour's own tables), which is dropped afterwards. A block that throws
// fails the test; the program must finish by itself.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runtimeName } from "./helpers/drivers.ts";
import { databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";

const skip = await dbSkip();
const root = fileURLToPath(new URL("..", import.meta.url));
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

function sh(cmd: string, args: string[], cwd: string): string {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
}

/** npm pack of a folder into `dir`; returns the tarball's path. */
function pack(folder: string, dir: string, scripts: boolean): string {
  const out = sh("npm", ["pack", "--json", "--pack-destination", dir, ...(scripts ? [] : ["--ignore-scripts"]), folder], root);
  return join(dir, (JSON.parse(out.slice(out.search(/^\[/m))) as { filename: string }[])[0]!.filename);
}

/** How this runtime runs a TypeScript file (Node through tsx, resolved from this repository). */
function runCommand(file: string): string[] {
  if (runtime === "deno") return [process.execPath, "run", "--allow-all", file];
  if (runtime === "bun") return [process.execPath, file];
  return [process.execPath, "--import", import.meta.resolve("tsx"), file];
}

function run(cmd: string[], cwd: string, env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd[0]!, cmd.slice(1), { cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += String(d)));
    child.stderr.on("data", (d) => (out += String(d)));
    const timer = setTimeout(() => child.kill("SIGKILL"), 240_000); // must finish by itself
    child.on("error", reject);
    child.on("close", (code) => (clearTimeout(timer), resolve({ code, out })));
  });
}

describe(`README Tour (${runtime})`, () => {
  test("extraction: every ts block of the Tour, imports hoisted once, sql.end() last", () => {
    const { program, blocks } = tourProgram(readFileSync(join(root, "README.md"), "utf8"));
    assert.ok(blocks >= 10, `the Tour has ${blocks} ts blocks`);
    assert.equal(program.match(/^import \{[^}]*\bkeyq\b[^}]*\} from "keyq";$/gm)?.length, 1);
    assert.match(program.trimEnd(), /await sql\.end\(\);[^\n]*$/, "the program ends with sql.end()");
    const fake = "<!-- tour:start -->\n```ts\nimport a from \"a\";\nx();\n```\n```sh\nno\n```\n```ts\nimport a from \"a\";\ny();\n```\n<!-- tour:end -->";
    assert.equal(tourProgram(fake).program, 'import a from "a";\n\n// --- README Tour block 1\nx();\n\n// --- README Tour block 2\ny();\n\n');
  });

  test("runs as one program in a fresh ESM project with the packed package", { skip, timeout: 600_000 }, async () => {
    const url = (await databaseUrl())!;
    const schema = freshSchema("readme");
    const work = mkdtempSync(join(tmpdir(), "keyq-readme-"));
    try {
      const tarballs = [
        pack(root, work, true),
        pack(join(root, "node_modules/postgres"), work, false),
        pack(join(root, "node_modules/valibot"), work, false),
      ];
      writeFileSync(join(work, "package.json"), JSON.stringify({ name: "keyq-readme-tour", private: true, type: "module" }, null, 2));
      sh("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", ...tarballs], work);
      const { program } = tourProgram(readFileSync(join(root, "README.md"), "utf8"));
      writeFileSync(join(work, "tour.ts"), program);
      // The Tour's own tables (uploads, file_index) go to the run's schema too, so one drop removes everything.
      const u = new URL(url);
      u.searchParams.set("search_path", schema);
      const started = Date.now();
      const { code, out } = await run(runCommand("tour.ts"), work, { DATABASE_URL: u.href, KEYQ_SCHEMA: schema });
      console.log(`${out.trim()}\n(tour: ${Date.now() - started} ms under ${runtime})`);
      assert.equal(code, 0, `the Tour failed under ${runtime}:\n${out}`);
      assert.match(out, /^appended event 1$/m);
      assert.match(out, /^false true true$/m, "the second send of one dedup key is deduped");
      assert.match(out, /event \d+ failed \(retry 0\): no thumbnail for \/a\.txt/);
      assert.match(out, /^4 \d+ \[\]$/m, "Tier B (subscribed before producing) delivered the 4 events, no key blocked");
      assert.match(out, /^stopped after \d+ events$/m);
      assert.match(out, /QUEUE_NOT_FOUND|does not exist/, "the Errors block caught its error");
      const { default: postgres } = await import("postgres");
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      try {
        const rows = await sql.unsafe(`select count(*)::int as n from "${schema}".file_index`);
        assert.equal(rows[0]!.n, 1, "the indexer applied create, overwrite, delete of /a.txt and create of /b.txt");
      } finally {
        await sql.end();
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
      await dropSchema(url, schema);
    }
  });
});
