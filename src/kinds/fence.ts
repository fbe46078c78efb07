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

import type { BatchHooks, ConsumerContext } from "../batch/batch.ts";
import type { Executor } from "../driver.ts";
import { engine, type Received } from "../engine/calls.ts";
import type { BatchLife } from "../batch/life.ts";

/** Past the batch deadline, for clock skew between this process and the server. */
const LEASE_MARGIN_MS = 2_000;

/** The hooks of one fenced batch: keys of a Tier A batch, or the slot of a Tier B one. */
export function fenceHooks(ctx: ConsumerContext, queue: string, consumer: string, mode: "keys" | "slot"): BatchHooks {
  const holder = crypto.randomUUID();
  let leased = false;
  let sent = 0; // fence calls on the pool, outside the batch's transaction
  return {
    statements: () => sent,
    async afterReceive(received: Received, _tx: Executor, life: BatchLife): Promise<boolean> {
      const live = received.events.filter((w) => w.locked !== false);
      const keys = mode === "slot" ? (received.events.length > 0 ? [""] : []) : [...new Set(live.flatMap((w) => (w.key === null ? [] : [w.key])))];
      if (keys.length === 0) return true;
      sent++;
      const taken = await engine(ctx.driver, ctx.schema).fence({
        queue,
        consumer,
        slot: mode === "slot" ? received.slot ?? 0 : 0,
        keys,
        holder,
        ms: life.deadline.getTime() - Date.now() + LEASE_MARGIN_MS,
      });
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
      await engine(tx, ctx.schema).unfence({ queue, consumer, holder });
    },
  };
}
