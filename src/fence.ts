/**
 * Fenced consumers (`fenced: true`): before any handler of a batch starts,
 * the batch leases its keys (Tier A) or its slot (Tier B) in a short
 * transaction of its own on another connection, until its deadline plus a
 * margin. The lease is committed, so it survives the batch's session: when
 * that session dies while a handler still runs (and ignores its signal), no
 * other fenced worker takes the key or slot before the lease ends. The
 * batch's commit clears it. Costs two round trips per batch, none when not
 * fenced.
 *
 * @module
 */

import type { BatchHooks, ConsumerContext, Received } from "./batch.ts";
import type { Executor } from "./driver.ts";
import type { BatchLife } from "./life.ts";
import { call } from "./sql.ts";

/** Past the batch deadline, for clock skew between this process and the server. */
const LEASE_MARGIN_MS = 2_000;

const isStrings = (x: unknown): boolean => Array.isArray(x) && x.every((k) => typeof k === "string");

/** The hooks of one fenced batch: keys of a Tier A batch, or the slot of a Tier B one. */
export function fenceHooks(ctx: ConsumerContext, queue: string, consumer: string, mode: "keys" | "slot"): BatchHooks {
  const holder = crypto.randomUUID();
  let leased = false;
  return {
    async afterReceive(received: Received, _tx: Executor, life: BatchLife): Promise<boolean> {
      const live = received.events.filter((w) => w.locked !== false);
      const keys = mode === "slot"
        ? (received.events.length > 0 ? [""] : [])
        : [...new Set(live.flatMap((w) => (w.key === null ? [] : [w.key])))];
      if (keys.length === 0) return true;
      const taken = await call<string[]>(ctx.driver, ctx.schema, "fence", [
        ["queue", "text", queue],
        ["consumer", "text", consumer],
        ["s", "int", mode === "slot" ? received.slot ?? 0 : 0],
        ["keys", "text[]", `{${keys.map((k) => `"${k.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`).join(",")}}`],
        ["holder", "text", holder],
        ["ms", "float8", life.deadline.getTime() - Date.now() + LEASE_MARGIN_MS],
      ], isStrings);
      leased = true;
      if (mode === "slot") return taken.length === 0;
      const fencedOut = new Set(taken);
      for (const w of live) {
        if (w.key !== null && fencedOut.has(w.key)) Object.assign(w, { locked: false, fenced: true });
      }
      return true;
    },
    async beforeCommit(tx: Executor): Promise<void> {
      if (!leased) return;
      await call<number>(tx, ctx.schema, "unfence", [
        ["queue", "text", queue],
        ["consumer", "text", consumer],
        ["holder", "text", holder],
      ], (x) => typeof x === "number");
    },
  };
}
