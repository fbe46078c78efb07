/**
 * A counting TCP proxy between a driver and Postgres (node:net, so it runs
 * under Node, Deno and Bun). It forwards bytes unchanged both ways and parses
 * the client's side of the wire protocol (after the startup packet and any
 * SSLRequest/GSSENCRequest) into message counts.
 *
 * Two measures of round trips:
 * - `waits` = Sync + Query + Flush messages: the points where a client asks
 *   for answers (Sync ends an extended-protocol exchange, a simple Query is
 *   answered on its own, Flush asks for the answers so far: postgres.js sends
 *   Parse/Describe/Flush and waits for the types before it binds).
 * - `roundTrips` = turns: client data that follows server data on the same
 *   connection (or opens it). Messages written together (pipelined) are one
 *   turn, so this is the number of times the client waited for the network.
 * Parse and Bind counts show whether statements were prepared (a named
 * statement is parsed once per connection).
 *
 * @example
 * ```ts
 * const proxy = await startWireProxy("postgres://postgres@127.0.0.1:5432/test");
 * const sql = postgres(proxy.url);
 * await sql`select 1`;
 * proxy.reset();
 * await sql`select 1`;
 * console.log(proxy.counts()); // { roundTrips: 1, waits: 1, parse: 0, bind: 1, … }
 * await sql.end();
 * await proxy.stop();
 * ```
 */
import { connect as netConnect, createServer, type Server, type Socket } from "node:net";

/** Messages the clients sent since the last `reset()`. */
export interface WireCounts {
  /** Turns: client data sent after the server answered (pipelined messages count once). */
  roundTrips: number;
  /** Sync + Query + Flush messages: the points where a client asks for answers. */
  waits: number;
  sync: number;
  query: number;
  flush: number;
  parse: number;
  bind: number;
  execute: number;
  describe: number;
  /** Socket data events from clients (TCP writes as they arrived). */
  writes: number;
}

/** A running proxy. */
export interface WireProxy {
  /** `url` with host and port pointing at the proxy. */
  readonly url: string;
  readonly port: number;
  /** Counts since the last reset. */
  counts(): WireCounts;
  /** Zeroes the counts (and the turns' log). */
  reset(): void;
  /**
   * The client's messages per turn since the last reset, each turn as its
   * message letters with the text of each Parse and Query (for reading a
   * count, not for asserting it).
   */
  turns(): string[][];
  /** Closes the listener and every proxied connection. */
  stop(): Promise<void>;
}

const zero = (): WireCounts => ({ roundTrips: 0, waits: 0, sync: 0, query: 0, flush: 0, parse: 0, bind: 0, execute: 0, describe: 0, writes: 0 });

const PROTOCOL_3 = 196608;

/** Parses one client stream incrementally and adds to `c`. */
function clientParser(get: () => WireCounts, log: (m: string) => void): (chunk: Uint8Array) => void {
  let buf = new Uint8Array(0);
  let startup = true;
  return (chunk) => {
    const c = get();
    c.writes++;
    const joined = new Uint8Array(buf.length + chunk.length);
    joined.set(buf);
    joined.set(chunk, buf.length);
    buf = joined;
    const view = () => new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    for (;;) {
      if (startup) {
        if (buf.length < 8) return;
        const len = view().getInt32(0);
        if (buf.length < len) return;
        if (view().getInt32(4) === PROTOCOL_3) startup = false; // SSLRequest/GSSENC: another startup follows
        buf = buf.subarray(len);
        continue;
      }
      if (buf.length < 5) return;
      const len = view().getInt32(1);
      if (buf.length < 1 + len) return;
      const letter = String.fromCharCode(buf[0]!);
      log(letter === "P" || letter === "Q" ? `${letter}:${textOf(buf, letter, len)}` : letter);
      switch (letter) {
        case "S":
          c.sync++, c.waits++;
          break;
        case "Q":
          c.query++, c.waits++;
          break;
        case "H":
          c.flush++, c.waits++;
          break;
        case "P":
          c.parse++;
          break;
        case "B":
          c.bind++;
          break;
        case "E":
          c.execute++;
          break;
        case "D":
          c.describe++;
          break;
      }
      buf = buf.subarray(1 + len);
    }
  };
}

/** A Parse's statement text (after its name) or a Query's text, shortened. */
function textOf(buf: Uint8Array, letter: string, len: number): string {
  const body = new TextDecoder().decode(buf.subarray(5, 1 + len));
  const parts = body.split("\0");
  return (letter === "P" ? `${parts[0]}|${parts[1]}` : parts[0]!).replace(/\s+/g, " ").slice(0, 120);
}

/** Starts a proxy on 127.0.0.1 (a free port) in front of `url`'s server. */
export async function startWireProxy(url: string): Promise<WireProxy> {
  const target = new URL(url);
  let counts = zero();
  let turns: string[][] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = netConnect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    let turn: string[] = [];
    const parse = clientParser(() => counts, (m) => turn.push(m));
    let answered = true; // the connection's first data is a turn
    client.on("data", (d: Uint8Array) => {
      if (answered) counts.roundTrips++, turns.push(turn = []);
      answered = false;
      parse(d);
      upstream.write(d);
    });
    upstream.on("data", (d: Uint8Array) => {
      answered = true;
      client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end).on("error", end);
    upstream.on("close", end).on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const u = new URL(url);
  u.hostname = "127.0.0.1";
  u.port = String(port);
  return {
    url: u.toString(),
    port,
    counts: () => ({ ...counts }),
    reset: () => void (counts = zero(), turns = []),
    turns: () => turns.map((t) => [...t]),
    stop: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
