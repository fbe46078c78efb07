/**
 * Shared by the reliability tests (tests/reliability*.test.ts): an abortable
 * sleep, a driver whose server is down, overlap counting of handler calls,
 * and a COMMIT made slow on purpose.
 */
import type { TxDriver } from "../../mod.ts";
export const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });

/** A driver whose every call fails like a server that is down. */
export function downDriver(): TxDriver & { calls: number } {
  const refused = () => Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  const d = {
    name: "down",
    calls: 0,
    query: () => {
      d.calls++;
      return Promise.reject(refused());
    },
    transaction: () => {
      d.calls++;
      return Promise.reject(refused());
    },
  };
  return d;
}

export interface Call {
  who: string;
  key: string | null;
  id: string;
  start: number;
  end: number;
}

/** Pairs of calls of one key by different workers whose [start, end] intervals overlap. */
export function overlaps(calls: Call[]): number {
  let n = 0;
  for (const a of calls) {
    for (const b of calls) {
      if (a === b || a.who >= b.who || a.key !== b.key) continue;
      if (a.start < b.end && b.start < a.end) n++;
    }
  }
  return n;
}

/** Makes COMMIT take `seconds` in `f.schema`: a deferred constraint trigger on inserts into slow_commit. */
export async function slowCommit(f: { schema: string; raw: (text: string) => Promise<unknown> }, seconds: number): Promise<void> {
  await f.raw(`
    create table "${f.schema}".slow_commit (n int);
    create function "${f.schema}".slow() returns trigger language plpgsql as $$
      begin perform pg_sleep(${seconds}); return null; end $$;
    create constraint trigger slow after insert on "${f.schema}".slow_commit
      deferrable initially deferred for each row execute function "${f.schema}".slow();`);
}
