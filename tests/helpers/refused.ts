/**
 * The one module for "this call is refused with KeyqError `code`", shared by
 * the unit tests, the input-contract tests and the driver suites: `refused`
 * awaits a promise (or an async call), `refusal` asserts that a call throws
 * synchronously (before it returns anything). No database: safe to import
 * from tests/unit.
 *
 * @example
 * ```ts
 * const err = await refused(q.send("bad name!", event), "INVALID_INPUT");
 * assert.match(err.message, /queue/);
 * refusal(() => checkText("key", "k\0", "send()"), "INVALID_INPUT");
 * ```
 */
import assert from "node:assert/strict";
import { KeyqError } from "../../mod.ts";

/** Asserts that `err` is a KeyqError with `code` and returns it. */
function checked(err: unknown, code: string): KeyqError {
  assert.ok(err instanceof KeyqError, `expected KeyqError ${code}, got ${String(err)}`);
  assert.equal(err.code, code, err.message);
  return err;
}

/** Awaits `p` (or calls it) and returns the KeyqError it threw, checking the code. */
export async function refused(p: Promise<unknown> | (() => unknown), code: string): Promise<KeyqError> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (err) {
    return checked(err, code);
  }
  assert.fail(`expected KeyqError ${code}, but the call succeeded`);
}

/** Calls `fn`, asserts it threw (synchronously) a KeyqError with `code`, returns the error. */
export function refusal(fn: () => unknown, code: string): KeyqError {
  try {
    fn();
  } catch (err) {
    return checked(err, code);
  }
  assert.fail(`expected KeyqError ${code}, but the call returned`);
}
