/**
 * A fresh ESM project with the packed npm package installed, as a user gets
 * it (npm pack, then npm install --offline, as scripts/pack-check.ts does),
 * and a way to run a TypeScript program in it under the runtime running the
 * test. Shared by tests/readme.test.ts (the README's Tour) and
 * tests/docs.test.ts (every ```ts block of docs/).
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
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

export interface PackedProject {
  /** The project's folder. */
  dir: string;
  /** Writes `name` into the project and runs it under this runtime (killed after `timeoutMs`). */
  run(name: string, program: string, env: Record<string, string>, timeoutMs?: number): Promise<{ code: number | null; out: string }>;
  /** Removes the folder. */
  remove(): void;
}

/**
 * Packs keyq (building it) and the dependency-free packages `packed` into a
 * fresh ESM project and installs them offline; `linked` packages (with
 * dependencies of their own: pg, PGlite, Neon) are symlinked from this
 * repository's node_modules instead.
 */
export function packedProject(packed: string[], linked: string[] = []): PackedProject {
  const dir = mkdtempSync(join(tmpdir(), "keyq-packed-"));
  const tarballs = [pack(root, dir, true), ...packed.map((p) => pack(join(root, "node_modules", p), dir, false))];
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

/** How this runtime runs a TypeScript file (Node through tsx, resolved from this repository). */
export function runCommand(file: string): string[] {
  const runtime = runtimeName();
  if (runtime === "deno") return [process.execPath, "run", "--allow-all", file];
  if (runtime === "bun") return [process.execPath, file];
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
