// Type proof for issue 19: each consumer kind takes its own options, so the
// compiler refuses what a kind does not take (the run-time checks stay for
// JavaScript callers), and `signal` is typed wherever it is accepted. Every
// `@ts-expect-error` line must be an error. Checked by
// `npx tsc -p tests/types/tsconfig.json` (CI) and the main tsconfig; never run.
import * as v from "valibot";
import { keyq, type TxDriver } from "../../mod.ts";

declare const driver: TxDriver;
const q = keyq(driver, { events: { files: { FileCreated: v.object({ path: v.string() }) } } });
const signal = AbortSignal.timeout(1);
const handler = () => {};

export function factories(): void {
  // Retry overrides are common to the three kinds.
  q.consumer("other", "p", { maxRetries: 3, retryBase: "1s", retryCap: 60_000 });
  q.exclusive("other", "x", { maxRetries: 3, idempotent: true, deferDelay: "2s", fenced: true, perKey: 2, lockScope: "tenants", buckets: 32 });
  q.ordered("other", "o", { slots: 8, onFailure: "pause", helpAfter: "1m", fenced: true, retryCap: "1h" });

  // @ts-expect-error slots belong to an ordered consumer
  q.consumer("other", "p1", { slots: 4 });
  // @ts-expect-error perKey belongs to an exclusive consumer
  q.consumer("other", "p2", { perKey: 2 });
  // @ts-expect-error idempotent (drop contended keys) belongs to an exclusive consumer
  q.consumer("other", "p3", { idempotent: true });
  // @ts-expect-error a plain consumer has no fencing
  q.consumer("other", "p4", { fenced: true });
  // @ts-expect-error an exclusive consumer has no slots
  q.exclusive("other", "x1", { slots: 4 });
  // @ts-expect-error nor a failure policy (Tier B only)
  q.exclusive("other", "x2", { onFailure: "pause" });
  // @ts-expect-error nor helpAfter
  q.exclusive("other", "x3", { helpAfter: "1m" });
  // @ts-expect-error an ordered consumer needs its slot count
  q.ordered("other", "o1", {});
  // @ts-expect-error an ordered consumer has no key locks to share
  q.ordered("other", "o2", { slots: 4, lockScope: "tenants" });
  // @ts-expect-error nor perKey
  q.ordered("other", "o3", { slots: 4, perKey: 2 });
  // @ts-expect-error nor key buckets (Tier A)
  q.ordered("other", "o4", { slots: 4, buckets: 32 });
  // @ts-expect-error nor idempotent
  q.ordered("other", "o5", { slots: 4, idempotent: true });
  // @ts-expect-error the failure policy is "skip" or "pause"
  q.ordered("other", "o6", { slots: 4, onFailure: "retry" });
}

export async function calls(): Promise<void> {
  // `signal` is typed on batch(), run() and work() of every kind.
  await q.consumer("other", "p").batch({ handler, signal });
  await q.exclusive("other", "x").run({ handler, signal, budgetMs: "5s" });
  await q.ordered("other", "o", { slots: 4 }).work({ handler, signal });
  // @ts-expect-error a signal is an AbortSignal
  await q.consumer("other", "p").run({ handler, signal: true });

  // Static slot assignment (worker/workers) is for ordered consumers only.
  await q.ordered("other", "o", { slots: 4 }).run({ handler, worker: 0, workers: 2 });
  await q.ordered("other", "o", { slots: 4 }).batch({ handler, worker: 1, workers: 2 });
  await q.ordered("files", "typed", { slots: 4 }).work({ on: { FileCreated() {} }, worker: 0, workers: 2, signal });
  // @ts-expect-error a plain consumer has no slots to assign
  await q.consumer("other", "p").run({ handler, worker: 0, workers: 2 });
  // @ts-expect-error nor an exclusive one
  await q.exclusive("other", "x").work({ handler, worker: 0, workers: 2 });
  // @ts-expect-error nor a typed exclusive one
  await q.exclusive("files", "tx").batch({ on: { FileCreated() {} }, worker: 0, workers: 2 });

  // The pause policy (strict order) holds a failed key's later events back one by one: per-event handlers only.
  await q.ordered("other", "strict", { slots: 4, onFailure: "pause" }).run({ handler, worker: 0, workers: 2 });
  await q.ordered("files", "strict-typed", { slots: 4, onFailure: "pause" }).work({ on: { FileCreated() {} }, signal });
  await q.ordered("other", "skip", { slots: 4, onFailure: "skip" }).run({ handleBatch: () => {} });
  await q.ordered("other", "default", { slots: 4 }).batch({ handleBatch: () => {} });
  // @ts-expect-error handleBatch under the pause policy
  await q.ordered("other", "strict", { slots: 4, onFailure: "pause" }).run({ handleBatch: () => {} });
  // @ts-expect-error nor on a typed queue
  await q.ordered("files", "strict-typed", { slots: 4, onFailure: "pause" }).batch({ handleBatch: () => {} });

  // Options of one call are not taken by another.
  // @ts-expect-error budgetMs is a run()/work() option
  await q.consumer("other", "p").batch({ handler, budgetMs: 5 });
  // @ts-expect-error minPollMs is a work() option
  await q.consumer("other", "p").run({ handler, minPollMs: 5 });
}
