/**
 * A private PostgreSQL cluster for fault tests: initdb + pg_ctl on a free
 * port, its data directory in a temp folder. Tests may kill its backends,
 * stop it with `-m immediate` and start it again; the shared server on 5432
 * is never touched. When the test process runs as root, the cluster belongs
 * to and runs as the `postgres` OS user (Postgres refuses to run as root).
 * Binaries come from `pg_config --bindir`, else /usr/lib/postgresql/<v>/bin.
 * Uses node:child_process only, so it works under Node, Deno and Bun.
 *
 * Startup costs a few seconds: share one cluster per test file.
 *
 * @example
 * ```ts
 * const c = await startCluster({ settings: { idle_in_transaction_session_timeout: "5s" } });
 * try {
 *   console.log(c.url); // postgres://postgres@127.0.0.1:<port>/postgres
 *   await c.stopImmediate();
 *   await c.start();
 * } finally {
 *   await c.destroy();
 * }
 * ```
 */
import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

/** A running (or stopped) private cluster. */
export interface Cluster {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`. */
  readonly url: string;
  readonly port: number;
  /** The data directory (also holds the unix socket and `log`). */
  readonly dir: string;
  /** `pg_ctl stop -m immediate`: every backend dies at once, no checkpoint. */
  stopImmediate(): Promise<void>;
  /** `pg_ctl start -w` (crash recovery first, after an immediate stop). */
  start(): Promise<void>;
  /** Stops the cluster (immediate) and deletes its directory. */
  destroy(): Promise<void>;
}

/** Options for `startCluster`. */
export interface ClusterOptions {
  /** Extra postgresql.conf settings, e.g. `{ max_connections: 50 }`. */
  settings?: Record<string, string | number | boolean>;
}

const asRoot = typeof process.getuid === "function" && process.getuid() === 0;

/** Quotes one word for /bin/sh. */
const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/** Runs `cmd args…` (as the `postgres` user when we are root) and resolves to its stdout. */
export function runAsPostgres(cmd: string, args: string[], timeoutMs = 60_000): Promise<string> {
  const [file, argv] = asRoot ? ["su", ["postgres", "-s", "/bin/bash", "-c", [cmd, ...args].map(q).join(" ")]] : [cmd, args];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { timeout: timeoutMs, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** `runAsPostgres`, synchronously (for exit hooks); output ignored. */
export function syncAsPostgres(cmd: string, args: string[]): void {
  if (asRoot) execFileSync("su", ["postgres", "-s", "/bin/bash", "-c", [cmd, ...args].map(q).join(" ")], { stdio: "ignore" });
  else execFileSync(cmd, args, { stdio: "ignore" });
}

/** The directory holding initdb and pg_ctl. */
export function pgBinDir(): string {
  try {
    const dir = execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim();
    if (existsSync(join(dir, "pg_ctl"))) return dir;
  } catch { /* no pg_config: look in the Debian layout */ }
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(root, v, "bin", "pg_ctl"))) return join(root, v, "bin");
  throw new Error("No PostgreSQL server binaries found: install postgresql (pg_config --bindir or /usr/lib/postgresql/<v>/bin).");
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** A temp directory owned by the `postgres` user when we are root. */
export function postgresTempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (asRoot) execFileSync("chown", ["-R", "postgres:", dir]);
  return dir;
}

const alive = new Set<() => void>();
let hooked = false;

/**
 * Stops what a crashed test left running, when the process exits. Deno's
 * test runner fires no "exit" on `process` (only "unload" on globalThis),
 * and skips a file's top-level `after` when one of its tests is skipped
 * (Deno 2.9): without the unload hook, private clusters and PgBouncers of
 * the roles tests outlived every Deno run.
 */
export function onExit(cleanup: () => void): () => void {
  if (!hooked) {
    hooked = true;
    const all = () => {
      for (const f of alive) {
        try {
          f();
        } catch { /* best effort */ }
      }
      alive.clear();
    };
    process.on("exit", all);
    (globalThis as { addEventListener?: (type: string, fn: () => void) => void }).addEventListener?.("unload", all);
  }
  alive.add(cleanup);
  return () => alive.delete(cleanup);
}

const conf = (v: string | number | boolean): string => typeof v === "string" ? `'${v.replace(/'/g, "''")}'` : String(v);

/**
 * Creates and starts a private cluster. Defaults favour test speed where it
 * does not change behaviour (`fsync = off`: an immediate stop kills the
 * server, not the OS, so nothing committed is lost), and keep production
 * settings otherwise (jit on, the default lock table).
 */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const bin = pgBinDir();
  const dir = postgresTempDir("keyq-cluster-");
  const data = join(dir, "data");
  await runAsPostgres(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"]);
  let port = 0;
  const writeConf = async () => {
    port = await freePort();
    const settings: Record<string, string | number | boolean> = {
      port,
      listen_addresses: "127.0.0.1",
      unix_socket_directories: dir,
      fsync: false,
      full_page_writes: false,
      shared_buffers: "32MB",
      max_connections: 60,
      jit: true,
      log_min_messages: "warning",
      ...options.settings,
    };
    const text = Object.entries(settings).map(([k, v]) => `${k} = ${conf(v)}`).join("\n");
    writeFileSync(join(data, "postgresql.auto.conf"), `${text}\n`);
    if (asRoot) execFileSync("chown", ["postgres:", join(data, "postgresql.auto.conf")]);
  };
  const pgCtl = (args: string[]) => runAsPostgres(join(bin, "pg_ctl"), ["-D", data, ...args], 120_000);
  let running = false;
  const start = async () => {
    await pgCtl(["-l", join(dir, "log"), "-w", "-t", "90", "start"]);
    running = true;
  };
  const stopImmediate = async () => {
    running = false;
    await pgCtl(["-m", "immediate", "-w", "stop"]);
  };
  for (let attempt = 0;; attempt++) {
    await writeConf();
    try {
      await start();
      break;
    } catch (err) {
      if (attempt >= 2) {
        rmSync(dir, { recursive: true, force: true });
        throw err; // the port may have been taken between freePort() and start: try another one twice
      }
    }
  }
  const forget = onExit(() => {
    if (running) syncAsPostgres(join(bin, "pg_ctl"), ["-D", data, "-m", "immediate", "stop"]);
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    stopImmediate,
    start,
    async destroy() {
      forget();
      if (running) await stopImmediate().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
