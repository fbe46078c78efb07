/**
 * The version is written once, in package.json; every other copy is derived
 * from it: jsr.json and deno.json "version", bin/version.ts (`keyq
 * --version`), src/generated/migrations.ts (functionsVersion, rendered by
 * scripts/build-migrations.ts) and the `keyq-X.Y.Z.tgz` name in the README
 * and docs/*.md.
 *
 *   node --import tsx scripts/version.ts           # check: list the copies that differ, exit 1 if any
 *   node --import tsx scripts/version.ts --write   # rewrite them from package.json
 *
 * `npm version <new>` runs it with --write (package.json "version" script);
 * scripts/check-exports.ts (the check:exports step of .ci/run) runs the check.
 *
 * @example
 * ```ts
 * import { versionCopies } from "./version.ts";
 * const stale = versionCopies(".").filter((c) => c.found !== c.want);
 * console.log(stale.length === 0);
 * ```
 *
 * @module
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { buildMigrations, packageVersion } from "./build-migrations.ts";

/** One copy of the version: where, what it says, what package.json says. */
export interface VersionCopy {
  /** The file, relative to the repository root. */
  file: string;
  /** The version written there (null: the pattern was not found). */
  found: string | null;
  /** package.json's version. */
  want: string;
  /** Writes `want` into the file. */
  write(): void;
}

const SEMVER = String.raw`\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?`;

/** A copy found by a regular expression whose group 1 is the version. */
function copy(root: string, file: string, pattern: RegExp, want: string, all = false): VersionCopy | null {
  const path = join(root, file);
  const global = new RegExp(pattern.source, `${pattern.flags.replace("g", "")}g`);
  if (!existsSync(path)) return null;
  const text = readFileSync(path, "utf8");
  const found = [...text.matchAll(global)].map((m) => m[1]!);
  if (all && found.length === 0) return null; // mentions are optional
  const stale = found.find((v) => v !== want);
  return {
    file,
    found: found.length === 0 ? null : stale ?? found[0]!,
    want,
    write: () => writeFileSync(path, text.replace(global, (m, v: string) => m.replace(v, want))),
  };
}

/** Every derived copy of the version in the repository at `root`. */
export function versionCopies(root: string): VersionCopy[] {
  const want = packageVersion(root);
  const docs = existsSync(join(root, "docs")) ? readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`) : [];
  const copies = [
    copy(root, "jsr.json", new RegExp(String.raw`^\s*"version":\s*"(${SEMVER})"`, "m"), want),
    copy(root, "deno.json", new RegExp(String.raw`^\s*"version":\s*"(${SEMVER})"`, "m"), want),
    copy(root, "bin/version.ts", new RegExp(String.raw`export const VERSION: string = "(${SEMVER})";`), want),
    ...["README.md", ...docs].map((f) => copy(root, f, new RegExp(String.raw`keyq-(${SEMVER})\.tgz`), want, true)),
  ];
  const generated = copy(root, "src/generated/migrations.ts", new RegExp(String.raw`export const functionsVersion: string = "(${SEMVER})";`), want);
  if (generated) {
    // Rendered from package.json: re-render rather than patch (the serial stays: the version is not in the hash).
    generated.write = () => void buildMigrations(join(root, "src/sql"), join(root, "src/generated/migrations.ts"), want);
  }
  return [...copies, generated].filter((c): c is VersionCopy => c !== null);
}

/** The problems of `root`'s version copies, one sentence each (none when they all agree). */
export function versionProblems(root: string): string[] {
  return versionCopies(root)
    .filter((c) => c.found !== c.want)
    .map((c) => `${c.file} says version ${c.found ?? "(none found)"}, package.json ${c.want}: run node --import tsx scripts/version.ts --write.`);
}

const root = resolve(fileURLToPath(import.meta.url), "../..");
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--write")) {
    for (const c of versionCopies(root).filter((c) => c.found !== c.want)) {
      c.write();
      console.log(`version: ${c.file} ${c.found} → ${c.want}`);
    }
  }
  const problems = versionProblems(root);
  for (const p of problems) console.error(`version: ${p}`);
  if (problems.length) process.exit(1);
  console.log(`version: ${packageVersion(root)} everywhere (${versionCopies(root).map((c) => c.file).join(", ")})`);
}
