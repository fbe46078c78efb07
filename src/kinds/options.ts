/**
 * Options of the three consumer kinds, parsed once into what the kind and
 * the engine need.
 *
 * @module
 */

import * as v from "valibot";
import type { ExclusiveSettings, OrderedSettings } from "./kinds.ts";
import { CONSUMER_OVERRIDES, engineUnits, settingEntries } from "../ops/queue-settings.ts";
import type { Duration } from "../types.ts";
import { duration, durationMs, int, OBJECT_NAME, parse } from "../validate.ts";
import { KeyqError } from "../errors.ts";

/** Per-consumer overrides of the queue's retry policy. */
export interface ConsumerOptions {
  /** Failed deliveries before dead-lettering (overrides the queue's). */
  maxRetries?: number;
  /** First retry delay (overrides the queue's). */
  retryBase?: Duration;
  /** Longest retry delay (overrides the queue's). */
  retryCap?: Duration;
}

/** Options of a Tier B ordered consumer. */
export interface OrderedOptions extends ConsumerOptions {
  /** N, the fixed slot count (1–1024): the parallelism and the read-index key. */
  slots: number;
  /**
   * `"skip"` (default): a failed event is retried in its slot and later
   * events of its key may overtake it. `"pause"`: nothing later of that key is
   * delivered until the failed head is acked or dead-lettered; then the held
   * events go out in order, exactly once, without spending retries.
   */
  onFailure?: "skip" | "pause";
  /** A static worker also reads any slot not polled for this long (default 30 s). */
  helpAfter?: Duration;
  /**
   * Lease each batch's slot until the batch's deadline, committed outside
   * the batch: when a batch's session dies while a handler still runs, no
   * other worker reads the slot before that deadline (takeover waits for it
   * instead of being instant). Give it to every worker of the consumer; it
   * needs a pool of at least 2 connections. Default false.
   */
  fenced?: boolean;
}

/** Options of a Tier A exclusive consumer. */
export interface ExclusiveOptions extends ConsumerOptions {
  /**
   * Handlers are idempotent: an event whose key another worker holds is
   * acked and dropped without a handler call.
   * Otherwise it is deferred and delivered again later, without spending a retry.
   */
  idempotent?: boolean;
  /** How long a deferred event waits before it is offered again (default 1 s). */
  deferDelay?: Duration;
  /**
   * Lease each batch's keys until the batch's deadline, committed outside
   * the batch: when a batch's session dies while a handler still runs (an
   * admin kill, a failover), no other worker takes those keys before that
   * deadline, so calls of one key never overlap even for handlers that
   * ignore their signal. Takeover waits for the deadline instead of being
   * instant. Give it to every worker of the consumer; it needs a pool of at
   * least 2 connections. Default false.
   */
  fenced?: boolean;
  /**
   * At most this many handlers of one key run at once (1–64, default 1).
   * Exactly k under contention: the key has k transaction-scoped locks and a
   * batch takes the first free one; a batch that finds all k held defers
   * (or, `idempotent`, drops) the key's events. Fixed when the consumer is
   * created (`CONSUMER_OPTION_MISMATCH` on a later call with another value).
   */
  perKey?: number;
  /**
   * Share key locks with every exclusive consumer of this scope name, of
   * this queue or others: a key is then held by at most `perKey` batches of
   * all of them together. Default: the consumer's own scope. Letters,
   * digits, "_", ".", ":" or "-", starting with a letter, up to 63 bytes.
   * Fixed when the consumer is created.
   */
  lockScope?: string;
  /**
   * Key buckets of each window: how many batches one window feeds at once
   * (a power of two, 16–256). Unset, the count starts at 16 and doubles
   * whenever workers starve for buckets (docs/tier-a.md). Set, it is fixed
   * when the consumer is created and never grown: at least the number of
   * workers you run, and enough that a bucket of a window fits in a batch
   * (a batch's first bucket is read in parts when it holds more than
   * `maxEvents`, and its rest waits for that batch). Each count builds one
   * more index on the queue's log.
   */
  buckets?: number;
}

const consumerSchema = v.strictObject(settingEntries(CONSUMER_OVERRIDES));

const exclusiveSchema = v.strictObject({
  ...consumerSchema.entries,
  idempotent: v.optional(v.boolean("expected true or false")),
  deferDelay: v.optional(duration),
  fenced: v.optional(v.boolean("expected true or false")),
  perKey: v.optional(int(1, 64)),
  lockScope: v.optional(v.pipe(
    v.string('expected a name like "tenant-work"'),
    v.regex(OBJECT_NAME, 'expected 1–63 letters, digits, "_", ".", ":" or "-", starting with a letter'),
    v.maxBytes(63, 'expected 1–63 letters, digits, "_", ".", ":" or "-", starting with a letter'),
  )),
  buckets: v.optional(v.pipe(
    int(16, 256),
    v.check((n) => (n & (n - 1)) === 0, "expected a power of two from 16 to 256"),
  )),
});

const orderedSchema = v.strictObject({
  ...consumerSchema.entries,
  slots: int(1, 1024),
  onFailure: v.optional(v.picklist(["skip", "pause"], 'expected "skip" or "pause"')),
  helpAfter: v.optional(duration),
  fenced: v.optional(v.boolean("expected true or false")),
});

/** The overrides persisted with a consumer, in the engine's units. */
function overrides(o: Record<string, unknown>): Record<string, unknown> {
  return engineUnits(Object.fromEntries(CONSUMER_OVERRIDES.map((k) => [k, o[k]])));
}

/** A plain consumer's options: its persisted overrides. */
export function plainOptions(options: unknown): Record<string, unknown> {
  return overrides(parse(consumerSchema, options ?? {}, "consumer options"));
}

/**
 * An exclusive consumer's options: overrides, the persisted key settings
 * (perKey and lockScope only when they differ from the defaults, so a
 * consumer created before they existed keeps matching; buckets whenever it
 * is set, since a set count never grows), and its contention policy.
 */
export function exclusiveOptions(options: unknown): { settings: Record<string, unknown>; kind: ExclusiveSettings } {
  const o = parse(exclusiveSchema, options ?? {}, "consumer options");
  const deferMs = durationMs("deferDelay", o.deferDelay ?? 1000, 1)!;
  if (o.fenced && ((o.perKey ?? 1) > 1 || o.lockScope !== undefined)) {
    throw new KeyqError(
      "INVALID_INPUT",
      `Option "fenced" leases keys to one batch of this consumer only, so it cannot be combined with ${
        o.lockScope !== undefined ? `lockScope "${o.lockScope}"` : `perKey ${o.perKey}`
      }; remove fenced or that option.`,
      { field: "fenced" },
    );
  }
  const keys = {
    ...(o.perKey !== undefined && o.perKey !== 1 ? { perKey: o.perKey } : {}),
    ...(o.lockScope !== undefined ? { lockScope: o.lockScope } : {}),
    ...(o.buckets !== undefined ? { buckets: o.buckets } : {}),
  };
  return {
    settings: { ...overrides(o), ...keys },
    kind: { idempotent: o.idempotent ?? false, deferDelayS: deferMs / 1000, fenced: o.fenced ?? false },
  };
}

/** An ordered consumer's options: overrides (with the failure policy) and its slots. */
export function orderedOptions(options: unknown): { settings: Record<string, unknown>; kind: OrderedSettings } {
  const o = parse(orderedSchema, options, "ordered consumer options");
  return {
    settings: { ...overrides(o), onFailure: o.onFailure ?? "skip" },
    kind: {
      slots: o.slots,
      pause: o.onFailure === "pause",
      helpAfterS: durationMs("helpAfter", o.helpAfter ?? 30_000, 1)! / 1000,
      fenced: o.fenced ?? false,
    },
  };
}
