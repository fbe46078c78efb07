// runLoop with a chain (Driver.chain): the next batch starts once the
// previous one's COMMIT is held, a batch counts only once its COMMIT
// answered, the last COMMIT goes by the chain's end, maxBatches counts held
// batches, and a failed COMMIT rejects the run with its error.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { BatchSettings } from "../../src/batch/settings.ts";
import { type LoopLink, runLoop } from "../../src/kinds/loop.ts";
import type { BatchReport } from "../../src/types.ts";

const settings = (over: Partial<BatchSettings> = {}): BatchSettings => ({ maxBatches: 100, budgetMs: 60_000, signal: undefined, ...over } as BatchSettings);
const report = (events: number): BatchReport => ({ events, retried: 0, deadLettered: 0, dropped: 0, deferred: 0, statements: 3, roundTrips: 3, busy: false });

/**
 * A fake chain: batch i holds its COMMIT with `sizes[i]` events; its COMMIT
 * is sent by batch i + 1's start (after awaiting nothing here) or by end(),
 * and answers with `fails(i)` as an error, else success.
 */
function fake(sizes: number[], fails: (i: number) => Error | undefined = () => undefined) {
  const log: string[] = [];
  let pending: (() => void) | undefined;
  let i = 0;
  const batch = (_until: number, link?: LoopLink): Promise<BatchReport> => {
    const n = i++;
    pending?.(); // this batch's first write carries the previous COMMIT
    pending = undefined;
    log.push(`start ${n}`);
    return (async () => {
      if (link?.previous) await link.previous; // as batch.ts does after its receive
      log.push(`handled ${n}`);
      const r = report(sizes[n] ?? 0);
      return await new Promise<BatchReport>((resolve, reject) => {
        pending = () => {
          log.push(`commit ${n}`);
          const e = fails(n);
          if (e) reject(e);
          else resolve(r);
        };
        link!.held(r);
      });
    })();
  };
  const chain = { end: () => (log.push("end"), pending?.(), pending = undefined, Promise.resolve()) };
  return { batch, chain, log };
}

describe("runLoop with a chain", () => {
  test("each COMMIT is sent by the next batch's start; the last by end(); each batch counted once committed", async () => {
    const f = fake([2, 3, 0]);
    const r = await runLoop(settings(), () => Promise.resolve({ ticked: true, statements: 1 }), f.batch, f.chain);
    assert.deepEqual(f.log, ["start 0", "handled 0", "commit 0", "start 1", "handled 1", "commit 1", "start 2", "handled 2", "end", "commit 2"]);
    assert.equal(r.batches, 2);
    assert.equal(r.events, 5);
    assert.equal(r.statements, 1 + 3 * 3);
  });

  test("maxBatches counts a batch whose COMMIT is held", async () => {
    const f = fake([1, 1, 1, 1]);
    const r = await runLoop(settings({ maxBatches: 2 }), () => Promise.resolve({ ticked: false, statements: 1 }), f.batch, f.chain);
    assert.equal(r.batches, 2);
    assert.deepEqual(f.log.filter((l) => l.startsWith("start")), ["start 0", "start 1"]);
  });

  test("a failed COMMIT rejects the run with its error, and the batch after it handles nothing", async () => {
    const boom = Object.assign(new Error("deferred constraint"), { code: "23505" });
    const f = fake([1, 1, 1], (i) => (i === 0 ? boom : undefined));
    await assert.rejects(runLoop(settings(), () => Promise.resolve({ ticked: false, statements: 1 }), f.batch, f.chain), (e) => e === boom);
    assert.ok(!f.log.includes("handled 1"), f.log.join(", "));
  });
});
