/**
 * A local WebSocket→TCP proxy like Neon's (`/v1?address=host:port`, binary
 * frames), so @neondatabase/serverless `Pool`/`Client` can reach a plain local
 * Postgres, plus `configureNeon` to point `neonConfig` at it (and undo that).
 * Only loopback addresses are proxied.
 */
import net from "node:net";
import { WebSocket, WebSocketServer } from "ws";
import type { neonConfig as NeonConfigClass } from "@neondatabase/serverless";

/** A running proxy. */
export interface NeonProxy {
  readonly port: number;
  /** WebSocket connections proxied so far. */
  readonly connections: number;
  stop(): Promise<void>;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

/** Starts the proxy on a random 127.0.0.1 port. */
export async function startNeonProxy(): Promise<NeonProxy> {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  const open = new Set<{ ws: WebSocket; tcp: net.Socket }>();
  let connections = 0;
  wss.on("connection", (ws, req) => {
    const address = new URL(req.url ?? "/", "http://proxy").searchParams.get("address") ?? "";
    const cut = address.lastIndexOf(":");
    const host = address.slice(0, cut);
    const port = Number(address.slice(cut + 1));
    if (!LOOPBACK.has(host) || !Number.isInteger(port)) return ws.close(1008, "loopback only");
    const tcp = net.connect({ host: host.replace(/^\[|\]$/g, ""), port });
    const pair = { ws, tcp };
    connections++;
    open.add(pair);
    tcp.setNoDelay(true);
    tcp.on("data", (chunk) => ws.readyState === WebSocket.OPEN && ws.send(chunk, { binary: true }));
    ws.on("message", (data) => {
      const parts = Array.isArray(data) ? data : [data];
      for (const part of parts) tcp.write(Buffer.from(part as ArrayBuffer));
    });
    const end = () => {
      open.delete(pair);
      tcp.destroy();
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close();
    };
    tcp.on("close", end).on("error", end);
    ws.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve, reject) => wss.once("listening", resolve).once("error", reject));
  const { port } = wss.address() as net.AddressInfo;
  return {
    port,
    get connections() {
      return connections;
    },
    // Graceful: an abrupt close makes Deno's WebSocket fire "error" (Unexpected
    // EOF) on a Neon socket nobody listens to any more, which crashes the process.
    stop: async () => {
      const closing = [...open].map(({ ws }) => new Promise((resolve) => ws.once("close", resolve)));
      for (const { ws } of open) ws.close(1001, "proxy stopping");
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([Promise.all(closing), new Promise((resolve) => (timer = setTimeout(resolve, 1000)))]);
      clearTimeout(timer);
      for (const { ws, tcp } of open) {
        tcp.destroy();
        ws.terminate();
      }
      open.clear();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

type NeonConfig = typeof NeonConfigClass;

/** Puts `neonConfig.opts` back exactly as `snapshot` had it. */
function restoreOpts(config: NeonConfig, snapshot: Record<string, unknown>): void {
  const opts = config.opts as Record<string, unknown>;
  for (const key of Object.keys(opts)) delete opts[key];
  Object.assign(opts, snapshot);
}

/** Snapshot of the process-global `neonConfig`, returned as a restore function. */
export function snapshotNeon(config: NeonConfig): () => void {
  const snapshot = { ...(config.opts as Record<string, unknown>) };
  return () => restoreOpts(config, snapshot);
}

/**
 * Points Neon's WebSocket transport at the local proxy on `port`. Uses `ws` as
 * the WebSocket only where there is no global one (Node 20). Returns a
 * function that restores `neonConfig` exactly as it was.
 */
export function configureNeon(config: NeonConfig, port: number): () => void {
  const restore = snapshotNeon(config);
  config.wsProxy = (host, p) => `127.0.0.1:${port}/v1?address=${host}:${p}`;
  config.useSecureWebSocket = false;
  config.pipelineTLS = false;
  config.pipelineConnect = false; // the default pipelines a password message: breaks trust auth
  if (typeof (globalThis as { WebSocket?: unknown }).WebSocket === "undefined") {
    config.webSocketConstructor = WebSocket as unknown as NeonConfig["webSocketConstructor"];
  }
  return restore;
}
