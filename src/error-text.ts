/**
 * Reduces whatever a handler threw to text the engine can always store, so
 * recording a failure never fails: any value, NUL bytes, a message cut inside
 * a surrogate pair, a huge message, a cyclic object, a getter that throws.
 *
 * @module
 */

/** An error as the engine stores it. */
export interface ErrorText {
  message: string;
  code?: string;
  name?: string;
}

/** Longest stored message, in UTF-16 code units. */
export const MAX_MESSAGE = 2000;

/** Storable text: no NUL, no unpaired surrogate, at most `max` code units. */
export function storable(s: string, max: number): string {
  let out = s.length > max ? `${s.slice(0, max)}… (${s.length - max} more characters)` : s;
  // Replacing (not dropping) keeps the position of what was wrong visible.
  out = out.replace(/\0/g, "\\u0000").replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
  return out;
}

function read(err: unknown, prop: string): unknown {
  try {
    return (err as Record<string, unknown>)[prop];
  } catch {
    return undefined;
  }
}

function text(err: unknown): string {
  if (typeof err === "string") return err;
  try {
    const m = read(err, "message");
    if (typeof m === "string") return m;
    if (err !== null && typeof err === "object" && (Object.getPrototypeOf(err) === null || Object.getPrototypeOf(err) === Object.prototype)) {
      return JSON.stringify(err, (_k, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(err);
    }
    return String(err);
  } catch {
    return Object.prototype.toString.call(err);
  }
}

/**
 * Describes a thrown value for the retry and dead-letter rows: its message,
 * and `code`/`name` when present, each reduced to storable bounded text.
 *
 * @example
 * ```ts
 * import { describeError } from "./error-text.ts";
 * console.log(describeError(Object.create(null))); // { message: "{}" }
 * ```
 */
export function describeError(err: unknown): ErrorText {
  let message: string;
  try {
    message = text(err);
  } catch {
    message = "(an error that could not be described)";
  }
  const out: ErrorText = { message: storable(message, MAX_MESSAGE) };
  const code = read(err, "code");
  if (typeof code === "string" || typeof code === "number") out.code = storable(String(code), 200);
  const name = read(err, "name");
  if (typeof name === "string") out.name = storable(name, 200);
  return out;
}
