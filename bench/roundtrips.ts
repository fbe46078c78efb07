/**
 * Network round trips, counted on the wire: a TCP proxy in front of
 * Postgres counts the times the client starts sending after the server
 * last spoke (a turn). A statement that needs a reply before it can go on
 * (postgres.js's describe-then-bind) costs two turns; a pipelined
 * Parse/Bind/Execute/Sync costs one. The bench's own counter, independent
 * of the test helpers.
 *
 * @module
 */

import net from "node:net";
import pg from "pg";
import { keyq, type TxDriver } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { APP, connect, DATABASE_URL, dropSchema, freshSchema, type Sql } from "./db.ts";
import type { Sizes } from "./sizes.ts";
import { makeEvents } from "./util.ts";

/** A listening counting proxy. */
export interface CountingProxy {
  /** The DATABASE_URL with host and port pointing at the proxy. */
  url: string;
  /** Client turns so far, over every connection through the proxy. */
  turns(): number;
  close(): Promise<void>;
}

/** Starts a proxy on 127.0.0.1 (an ephemeral port) in front of the DATABASE_URL's host and port. */
export async function countingProxy(): Promise<CountingProxy> {
  const target = new URL(DATABASE_URL);
  let turns = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname || "127.0.0.1");
    let last: "client" | "server" | null = null;
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => {
        client.destroy();
        upstream.destroy();
        sockets.delete(s);
      });
    }
    client.on("data", (chunk) => {
      if (last !== "client") turns++;
      last = "client";
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      last = "server";
      client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(DATABASE_URL);
  url.hostname = "127.0.0.1";
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.href,
    turns: () => turns,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Round trips per statement and per `send`, through keyq's adapter for one driver. */
export interface RoundTrips {
  /** A small parameterised statement through the adapter's `query`. */
  perStatement: number;
  /** One `q.send` of one event. */
  perSend: number;
  /** One batch of a plain consumer's `run()` (maxEvents 10, no-op handler; the run's start_run and its empty look included). */
  perBatch: number;
  /**
   * One cold invocation per kind: a fresh connection (its start included)
   * and a fresh client run() a consumer with 10 waiting events (Tier B over
   * 4 slots), the user's driver defaults.
   */
  cold: { plain: number; exclusive: number; ordered: number };
}

/** A fresh connection of `driver` (nothing sent yet) through `url`, with the driver's defaults. */
function fresh(driver: "postgres-js" | "pg", url: string): { driver: TxDriver; close(): Promise<void> } {
  if (driver === "postgres-js") {
    const sql = connect(`${APP}-rt-cold`, { url });
    return { driver: fromPostgresJs(sql), close: () => sql.end({ timeout: 5 }) };
  }
  const pool = new pg.Pool({ connectionString: url, application_name: `${APP}-rt-cold`, max: 1 });
  return { driver: fromPg(pool), close: () => pool.end() };
}

/**
 * Counts turns of `n` parameterised statements and `n` sends through keyq's
 * postgres.js adapter or pg adapter (a Pool; each on one connection with the
 * driver's defaults, through the proxy), after a warm-up.
 */
export async function roundTrips(admin: Sql, sizes: Sizes, driver: "postgres-js" | "pg"): Promise<RoundTrips> {
  const proxy = await countingProxy();
  const schema = freshSchema(`kqb_rt_${driver === "pg" ? "pg" : "pjs"}`);
  const sqlJs = driver === "postgres-js" ? connect(`${APP}-rt`, { url: proxy.url }) : null;
  // A Pool of one connection: a run's batches chain there (each COMMIT goes with the next receive); a Client does not chain.
  const pgPool = driver === "pg" ? new pg.Pool({ connectionString: proxy.url, application_name: `${APP}-rt`, max: 1 }) : null;
  try {
    const d = sqlJs ? fromPostgresJs(sqlJs) : fromPg(pgPool!);
    const q = keyq(d, { schema });
    await q.migrate();
    await q.createQueue("files", { rotationPeriod: "1 hour" });
    const consumer = q.consumer("files", "rt");
    await consumer.subscribe();
    const n = sizes.rtStatements;
    const events = makeEvents(n + 5, 7).map((e) => ({ type: e.type, key: e.key, payload: e.payload }));
    for (let i = 0; i < 5; i++) {
      await d.query("select $1::int as n", [String(i)]);
      await q.send("files", events[n + i]!);
    }
    let t = proxy.turns();
    for (let i = 0; i < n; i++) await d.query("select $1::int as n", [String(i)]);
    const perStatement = (proxy.turns() - t) / n;
    t = proxy.turns();
    for (let i = 0; i < n; i++) await q.send("files", events[i]!);
    const perSend = (proxy.turns() - t) / n;
    t = proxy.turns();
    let handled = 0;
    let batches = 0;
    while (handled < n + 5) {
      const r = await consumer.run({ handler: () => void handled++, maxEvents: 10, budgetMs: 30_000 });
      batches += r.batches;
      if (r.batches === 0) throw new Error(`round trips (${driver}): run() found nothing with ${handled}/${n + 5} handled`);
    }
    const perBatch = (proxy.turns() - t) / batches;
    const cold = { plain: 0, exclusive: 0, ordered: 0 };
    for (const kind of ["plain", "exclusive", "ordered"] as const) {
      const make = (k: typeof q) =>
        kind === "plain" ? k.consumer("files", "cold") : kind === "exclusive" ? k.exclusive("files", "cold") : k.ordered("files", "cold", { slots: 4 });
      await make(q).subscribe();
      await q.sendBatch("files", events.slice(0, 10).map((e, i) => ({ ...e, key: `c${i}` })));
      const opened = fresh(driver, proxy.url);
      try {
        t = proxy.turns();
        const r = await make(keyq(opened.driver, { schema })).run({ handler: () => {} });
        cold[kind] = proxy.turns() - t;
        if (r.events !== 10) throw new Error(`round trips (${driver}): a cold ${kind} run() delivered ${r.events} events, not 10`);
      } finally {
        await opened.close();
      }
      await make(q).unsubscribe();
    }
    return { perStatement, perSend, perBatch, cold };
  } finally {
    await sqlJs?.end({ timeout: 5 });
    await pgPool?.end();
    await proxy.close();
    await dropSchema(admin, schema);
  }
}
