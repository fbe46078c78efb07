// Every ```ts block in docs/ (every .md under docs/, docs/api/ excepted) runs
// as its own complete program: it imports `keyq` and `keyq/<driver>` from the
// packed npm package (packed once for this file, tests/helpers/packed.ts),
// reads process.env.DATABASE_URL and process.env.KEYQ_SCHEMA (a fresh schema
// per block, dropped afterwards), must finish by itself, and fails its test
// when it exits non-zero (a throw). ```ts ignore blocks are skipped and
// counted; blocks of other languages (sh, json, yaml, text…) are not run.
//
// Cost: every runtime runs every block. keyq's tarball is built once per
// source state and shared with tests/readme.test.ts and the other runtimes'
// passes (tests/helpers/packed.ts), so a pass costs the blocks themselves,
// two at a time: about 1 s each under Deno, Bun and Node 22.18+ (which run
// TypeScript by themselves), a few seconds under Node 20 (through tsx).
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { after, describe, test } from "node:test";
import { runtimeName } from "./helpers/drivers.ts";
import { databaseUrl, dbSkip, dropSchema, freshSchema } from "./helpers/db.ts";
import { nodeStripsTypes, type PackedProject, packedProject, root } from "./helpers/packed.ts";

const skip = await dbSkip();
const runtime = runtimeName();

export interface DocBlock {
  /** The page, relative to the repository (docs/guide.md). */
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** Position among the page's runnable blocks (0-based). */
  index: number;
  code: string;
}

/** The ```ts blocks of one page: the runnable ones, and how many are marked ```ts ignore. */
export function blocksOf(page: string, text: string): { run: DocBlock[]; ignored: number } {
  const run: DocBlock[] = [];
  let ignored = 0;
  for (const m of text.matchAll(/^```(\S*)([^\n]*)\n([\s\S]*?)^```[ \t]*$/gm)) {
    if (m[1] !== "ts") continue;
    if (/\bignore\b/.test(m[2]!)) {
      ignored++;
      continue;
    }
    const line = text.slice(0, m.index).split("\n").length;
    run.push({ page, line, index: run.length, code: m[3]! });
  }
  return { run, ignored };
}

/** Every .md under docs/ (recursively, docs/api/ left out), sorted. */
export function docPages(dir = join(root, "docs")): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const full = join(dir, name);
    if (statSync(full).isDirectory()) {
      if (name !== "api") out.push(...docPages(full));
    } else if (name.endsWith(".md")) out.push(relative(root, full));
  }
  return out;
}

/** Bare package names a program imports (`keyq/pg` → keyq, `@scope/x/y` → @scope/x), `node:` left out. */
export function packagesOf(code: string): string[] {
  const names = new Set<string>();
  for (const m of code.matchAll(/(?:^|\n)\s*import\s[^;]*?from\s+"([^".][^"]*)"|import\("([^".][^"]*)"\)/g)) {
    const spec = (m[1] ?? m[2])!;
    if (spec.startsWith("node:")) continue;
    const parts = spec.split("/");
    names.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!);
  }
  return [...names].sort();
}

const pages = docPages().map((page) => ({ page, ...blocksOf(page, readFileSync(join(root, page), "utf8")) }));
const all = pages.flatMap((p) => p.run);
const chosen = all;
const ignored = pages.reduce((n, p) => n + p.ignored, 0);
console.log(
  `docs: ${pages.length} pages, ${all.length} runnable ts blocks, ${ignored} marked ignore; ` +
    `this ${runtime} pass runs all ${chosen.length}`,
);

describe(`docs/ code blocks (${runtime})`, { concurrency: 2 }, () => {
  test("extraction: ts blocks only, ignore counted, imports named", () => {
    const page =
      'x\n```ts\nimport postgres from "postgres";\nimport { fromPg } from "keyq/pg";\n```\n```sh\nnpm i\n```\n```ts ignore\nno();\n```\n```json\n{}\n```\n';
    const { run, ignored } = blocksOf("docs/x.md", page);
    assert.equal(run.length, 1);
    assert.equal(ignored, 1);
    assert.equal(run[0]!.line, 2);
    assert.deepEqual(packagesOf(run[0]!.code), ["keyq", "postgres"]);
    assert.deepEqual(packagesOf('const { PGlite } = await import("@electric-sql/pglite");\nimport process from "node:process";'), ["@electric-sql/pglite"]);
    assert.ok(pages.length >= 8, `docs/ has ${pages.length} pages`);
    assert.deepEqual(["20.19.0", "22.17.1", "22.18.0", "23.6.0", "24.0.0"].map((v) => nodeStripsTypes(v)), [false, false, true, true, true]);
    for (const b of all) assert.match(b.code, /from "keyq(\/[a-z-]+)?"/, `${b.page}:${b.line} imports keyq: each block is a complete program`);
  });

  test("every relative link of README.md and docs/ points to a file that exists", () => {
    const missing: string[] = [];
    let links = 0;
    for (const page of ["README.md", ...docPages()]) {
      const text = readFileSync(join(root, page), "utf8").replace(/^```[\s\S]*?^```$/gm, "");
      for (const m of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        links++;
        if (!existsSync(join(root, page, "..", target))) missing.push(`${page}: ${target}`);
      }
    }
    assert.ok(links > 40, `found ${links} relative links`);
    assert.deepEqual(missing, []);
  });

  // Set up by the first block's test (a hook would run under Bun's 5 s default timeout), shared by the rest.
  let setup: Promise<{ project: PackedProject; url: string }> | undefined;
  const ready = () =>
    setup ??= (async () => {
      const url = (await databaseUrl())!;
      // keyq/otel imports its optional peer @opentelemetry/api, which a block need not import itself.
      const peers = chosen.some((b) => b.code.includes('"keyq/otel"')) ? ["@opentelemetry/api"] : [];
      const wanted = [...new Set([...chosen.flatMap((b) => packagesOf(b.code)), ...peers])].filter((p) => p !== "keyq");
      const packable = ["postgres", "valibot"];
      return { url, project: await packedProject(packable, wanted.filter((p) => !packable.includes(p))) };
    })();
  after(async () => (await setup?.catch(() => undefined))?.project.remove());

  for (const [n, b] of chosen.entries()) {
    test(`${b.page}:${b.line} runs as its own program`, { skip, timeout: 600_000 }, async () => {
      const { project, url } = await ready();
      const schema = freshSchema("docs");
      try {
        const { code, out } = await project.run(`block-${n + 1}.ts`, b.code, { DATABASE_URL: url, KEYQ_SCHEMA: schema }, 150_000);
        if (out.trim()) console.log(out.trim());
        assert.equal(code, 0, `${b.page}:${b.line} failed under ${runtime}:\n${out}`);
      } finally {
        await dropSchema(url, schema);
      }
    });
  }
});
