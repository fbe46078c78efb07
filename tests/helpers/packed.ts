/**
 * A fresh ESM project with the packed npm package installed, as a user gets
 * it (npm pack, then npm install --offline, as scripts/pack-check.ts does),
 * and a way to run a TypeScript program in it under the runtime running the
 * test. Shared by tests/readme.test.ts (the README's Tour) and
 * tests/docs.test.ts (every ```ts block of docs/).
 */
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { runtimeName } from "./drivers.ts";

export const root: string = fileURLToPath(new URL("../..", import.meta.url));

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

/** Every file the npm package is built from, hashed: the key of the cached tarball. */
function sourceHash(): string {
  const h = createHash("sha256");
  const walk = (rel: string): void => {
    const full = join(root, rel);
    if (statSync(full).isDirectory()) { for (const n of readdirSync(full).sort()) walk(join(rel, n)); }
    else h.update(rel).update("\0").update(readFileSync(full)).update("\0");
  };
  for (
    const rel of ["package.json", "tsconfig.build.json", "mod.ts", "src", "bin", "scripts/fix-dts.ts", "README.md", "CHANGELOG.md", "LICENSE", "docs/keyq.svg"]
  ) {
    if (existsSync(join(root, rel))) walk(rel);
  }
  return h.digest("hex").slice(0, 16);
}

/**
 * keyq's tarball, built once per source state and cached in
 * .cache/packed/<hash>/: test files that pack it (this one, under several
 * runtimes, in parallel) would otherwise build into the same dist/ at once.
 * A lock folder serialises the build; a lock older than 10 minutes is stale.
 */
async function keyqTarball(): Promise<string> {
  const cache = join(root, ".cache", "packed");
  const dir = join(cache, sourceHash());
  const lock = join(cache, ".lock");
  mkdirSync(cache, { recursive: true });
  for (let waited = 0;; waited += 500) {
    const found = existsSync(dir) ? readdirSync(dir).find((n) => n.endsWith(".tgz")) : undefined;
    if (found) return join(dir, found);
    try {
      mkdirSync(lock);
    } catch {
      if (Date.now() - statSync(lock, { throwIfNoEntry: false })!.mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
      if (waited > 900_000) throw new Error(`waited 15 minutes for ${lock}`);
      await new Promise((r) => setTimeout(r, 500));
      continue;
    }
    try {
      if (existsSync(dir)) continue;
      const tmp = mkdtempSync(join(cache, "tmp-"));
      pack(root, tmp, true);
      renameSync(tmp, dir);
      for (const old of readdirSync(cache)) if (join(cache, old) !== dir && old !== ".lock") rmSync(join(cache, old), { recursive: true, force: true });
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

export interface PackedProject {
  /** The project's folder. */
  dir: string;
  /** Writes `name` into the project and runs it under this runtime (killed after `timeoutMs`). */
  run(name: string, program: string, env: Record<string, string>, timeoutMs?: number): Promise<{ code: number | null; out: string }>;
  /** Removes the folder. */
  remove(): void;
}

/**
 * Packs keyq (building it, or from the cache) and the dependency-free packages `packed` into a
 * fresh ESM project and installs them offline; `linked` packages (with
 * dependencies of their own: pg, PGlite, Neon) are symlinked from this
 * repository's node_modules instead.
 */
export async function packedProject(packed: string[], linked: string[] = []): Promise<PackedProject> {
  const dir = mkdtempSync(join(tmpdir(), "keyq-packed-"));
  const keyq = join(dir, "keyq.tgz");
  copyFileSync(await keyqTarball(), keyq);
  const tarballs = [keyq, ...packed.map((p) => pack(join(root, "node_modules", p), dir, false))];
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "keyq-packed-project", private: true, type: "module" }, null, 2));
  sh("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", ...tarballs], dir);
  for (const p of linked) {
    const to = join(dir, "node_modules", p);
    if (existsSync(to)) continue;
    mkdirSync(dirname(to), { recursive: true });
    symlinkSync(join(root, "node_modules", p), to, "dir");
  }
  return {
    dir,
    run: (name, program, env, timeoutMs = 240_000) => {
      writeFileSync(join(dir, name), program);
      return runIn(dir, runCommand(name), env, timeoutMs);
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Node 22.18+ and 23.6+ strip TypeScript types by themselves (a user's `node app.ts`); older Node needs tsx. */
export function nodeStripsTypes(version: string = process.versions.node): boolean {
  const [major, minor] = version.split(".").map(Number) as [number, number];
  return major > 23 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18);
}

/** How this runtime runs a TypeScript file: Deno and Bun directly, Node by itself when it can, else through tsx (from this repository). */
export function runCommand(file: string): string[] {
  const runtime = runtimeName();
  if (runtime === "deno") return [process.execPath, "run", "--allow-all", file];
  if (runtime === "bun") return [process.execPath, file];
  if (nodeStripsTypes()) return [process.execPath, "--disable-warning=ExperimentalWarning", file];
  return [process.execPath, "--import", import.meta.resolve("tsx"), file];
}

/** Runs `cmd` in `cwd` with `env` added (a value of "" removes the variable); it must finish by itself. */
export function runIn(cwd: string, cmd: string[], env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  const full: Record<string, string | undefined> = { ...process.env, ...env };
  for (const [k, v] of Object.entries(env)) if (v === "") delete full[k];
  return new Promise((resolve, reject) => {
    const child = spawn(cmd[0]!, cmd.slice(1), { cwd, env: full, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (out += String(d)));
    child.stderr.on("data", (d) => (out += String(d)));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => (clearTimeout(timer), resolve({ code, out })));
  });
}
