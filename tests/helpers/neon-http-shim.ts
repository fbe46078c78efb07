/**
 * A local stand-in for Neon's SQL-over-HTTP endpoint (`POST /sql`) over a real
 * Postgres, for testing `neon()` without the network. It follows Neon's proxy:
 * - body `{query, params}` or `{queries: [...]}` (one non-interactive
 *   transaction; `Neon-Batch-Isolation-Level`/`-Read-Only`/`-Deferrable`);
 * - every query is sent as one unnamed prepared statement (Parse/Bind/Execute,
 *   as Neon's `query_raw_txt` does), so text with several statements fails
 *   with 42601 exactly as on Neon;
 * - `Neon-Raw-Text-Output: true` returns Postgres text; otherwise bool, int2/4,
 *   oid, float4/8 and json/jsonb become JSON values (an approximation);
 *   `Neon-Array-Mode: true` (or per-query `arrayMode`) returns rows as arrays;
 * - results `{fields, rows, command, rowCount, rowAsArray}`, batches
 *   `{results: [...]}`, Postgres errors HTTP 400 with the error fields.
 * Connects only to loopback hosts named in `Neon-Connection-String`.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import pg from "pg";
import type { neonConfig as NeonConfigClass } from "@neondatabase/serverless";
import { snapshotNeon } from "./neon-proxy.ts";

/** A running shim; `url` is the endpoint to put in `neonConfig.fetchEndpoint`. */
export interface NeonHttpShim {
  readonly url: string;
  /** Requests answered so far. */
  readonly requests: number;
  stop(): Promise<void>;
}

type Query = { query: string; params?: unknown[]; arrayMode?: boolean };
type Opts = { raw: boolean; arrayMode: boolean };
const ERROR_FIELDS = [
  "code",
  "detail",
  "hint",
  "position",
  "internalPosition",
  "internalQuery",
  "severity",
  "where",
  "table",
  "column",
  "schema",
  "dataType",
  "constraint",
  "file",
  "line",
  "routine",
] as const;
const JSON_TYPES: Record<number, (v: string) => unknown> = {
  16: (v) => v === "t",
  21: Number,
  23: Number,
  26: Number,
  700: Number,
  701: Number,
  114: JSON.parse,
  3802: JSON.parse,
};

const toText = (v: unknown): string | null => v === null || v === undefined ? null : typeof v === "object" ? JSON.stringify(v) : String(v);

async function runOne(c: pg.ClientBase, q: Query, o: Opts): Promise<Record<string, unknown>> {
  const arrayMode = q.arrayMode ?? o.arrayMode;
  const res = await c.query({
    text: q.query,
    values: (q.params ?? []).map(toText),
    queryMode: "extended",
    rowMode: "array",
    types: { getTypeParser: () => (v: string) => v },
  } as pg.QueryArrayConfig);
  const fields = res.fields.map((f) => ({
    name: f.name,
    dataTypeID: f.dataTypeID,
    tableID: f.tableID,
    columnID: f.columnID,
    dataTypeSize: f.dataTypeSize,
    dataTypeModifier: f.dataTypeModifier,
    format: "text",
  }));
  const rows = res.rows.map((row: unknown[]) => {
    const values = row.map((v, i) => (o.raw || v === null ? v : (JSON_TYPES[fields[i]!.dataTypeID] ?? String)(v as string)));
    return arrayMode ? values : Object.fromEntries(values.map((v, i) => [fields[i]!.name, v]));
  });
  return { fields, rows, command: res.command, rowCount: res.rowCount, rowAsArray: arrayMode };
}

/** Starts the shim on a random 127.0.0.1 port. */
export async function startNeonHttpShim(): Promise<NeonHttpShim> {
  const pools = new Map<string, pg.Pool>();
  const poolFor = (conn: string): pg.Pool => {
    const host = new URL(conn).hostname;
    if (!["127.0.0.1", "localhost", "[::1]"].includes(host)) throw new Error(`shim: refusing host ${host}`);
    let pool = pools.get(conn);
    if (!pool) pools.set(conn, pool = new pg.Pool({ connectionString: conn, max: 4 }));
    return pool;
  };
  let requests = 0;
  const server = http.createServer(async (req, res) => {
    requests++;
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    };
    try {
      let text = "";
      for await (const chunk of req) text += chunk;
      const body = JSON.parse(text) as Query | { queries: Query[] };
      const h = (name: string) => req.headers[name.toLowerCase()] as string | undefined;
      const o = { raw: h("Neon-Raw-Text-Output") === "true", arrayMode: h("Neon-Array-Mode") === "true" };
      const client = await poolFor(h("Neon-Connection-String") ?? "").connect();
      let broken: Error | undefined;
      try {
        if (!("queries" in body)) return reply(200, await runOne(client, body, o));
        const level = h("Neon-Batch-Isolation-Level")?.replace(/([a-z])([A-Z])/g, "$1 $2");
        await client.query(
          `begin${level ? ` isolation level ${level}` : ""}${h("Neon-Batch-Read-Only") === "true" ? " read only" : ""}${
            h("Neon-Batch-Deferrable") === "true" ? " deferrable" : ""
          }`,
        );
        try {
          const results = [];
          for (const q of body.queries) results.push(await runOne(client, q, o));
          await client.query("commit");
          reply(200, { results });
        } catch (err) {
          await client.query("rollback").catch((e: Error) => (broken = e));
          throw err;
        }
      } finally {
        client.release(broken);
      }
    } catch (err) {
      const e = err as Record<string, unknown> & Error;
      if (typeof e.code !== "string") return void res.writeHead(500).end(String(e.message ?? e));
      reply(400, Object.fromEntries([["message", e.message], ...ERROR_FIELDS.map((k) => [k, e[k] ?? null])]));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/sql`,
    get requests() {
      return requests;
    },
    stop: async () => {
      server.closeAllConnections?.();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all([...pools.values()].map((p) => p.end()));
    },
  };
}

/** Points `neon()` at the shim; returns a function restoring `neonConfig` exactly. */
export function configureNeonHttp(config: typeof NeonConfigClass, url: string): () => void {
  const restore = snapshotNeon(config);
  config.fetchEndpoint = url;
  return restore;
}
