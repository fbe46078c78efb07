/** Shared assertion of the unit tests: `fn` throws a KeyqError with `code`. */
import assert from "node:assert/strict";
import { KeyqError } from "../../src/errors.ts";

/** Calls `fn`, asserts it threw a KeyqError with `code`, returns the error. */
export function refusal(fn: () => unknown, code: string): KeyqError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof KeyqError, `expected KeyqError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected KeyqError ${code}, but the call returned`);
}
