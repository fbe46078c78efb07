/**
 * Queue settings, declared once: the table below drives validation
 * (`createQueue`, `updateQueue`, consumer overrides), the conversion to the
 * engine's units (durations in seconds; the client reports milliseconds), the wording of a mismatch, and the
 * CLI's listing.
 *
 * @module
 */

import * as v from "valibot";
import { KeyqError } from "../errors.ts";
import type { QueueInfo } from "../types.ts";
import { duration, durationMs, int, parse } from "../validate.ts";

/** One setting: a count in a range, or a duration with a floor (ms). */
export interface SettingSpec {
  readonly kind: "count" | "duration";
  readonly min: number;
  /** Counts only. */
  readonly max?: number;
  /** Fixed when the queue is created. */
  readonly fixed?: boolean;
}

/** Every queue setting, in listing order. */
export const QUEUE_SETTINGS: Readonly<Record<string, SettingSpec>> = {
  tables: { kind: "count", min: 2, max: 8, fixed: true },
  maxRetries: { kind: "count", min: 0, max: 1_000_000 },
  retryBase: { kind: "duration", min: 1 },
  retryCap: { kind: "duration", min: 1 },
  rotationPeriod: { kind: "duration", min: 1 },
  tickMaxCount: { kind: "count", min: 1, max: 1_000_000_000 },
  tickMaxLag: { kind: "duration", min: 0 },
  tickIdlePeriod: { kind: "duration", min: 0 },
  retention: { kind: "duration", min: 0 },
};

/** The settings a consumer may override. */
export const CONSUMER_OVERRIDES: readonly string[] = ["maxRetries", "retryBase", "retryCap"];

/** The valibot entries of `names` (all settings by default). */
export function settingEntries(names: readonly string[] = Object.keys(QUEUE_SETTINGS)): Record<string, v.GenericSchema> {
  return Object.fromEntries(names.map((k) => {
    const spec = QUEUE_SETTINGS[k]!;
    // retention reports null when off; null is taken back as off, so the report round-trips.
    return [k, v.optional(spec.kind === "count" ? int(spec.min, spec.max!) : k === "retention" ? v.nullable(duration) : duration)];
  }));
}

const settingsSchema = v.strictObject(settingEntries());

/** Converts checked settings to the engine's units: durations in seconds. */
export function engineUnits(o: Record<string, unknown>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, val] of Object.entries(o)) {
    const spec = QUEUE_SETTINGS[k];
    if (val === undefined || !spec) continue;
    if (val === null) { // retention: none
      out[k] = 0;
      continue;
    }
    out[k] = spec.kind === "duration" ? durationMs(k, val as string | number, spec.min)! / 1000 : (val as number);
  }
  return out;
}

/** Validates queue settings and converts them for the engine; `creating` allows the settings fixed at creation. */
export function queueSettings(settings: unknown, creating: boolean): Record<string, number> {
  const s = parse(settingsSchema, settings, "queue settings") as Record<string, unknown>;
  for (const [k, spec] of Object.entries(QUEUE_SETTINGS)) {
    if (!creating && spec.fixed && s[k] !== undefined) {
      throw new KeyqError("INVALID_INPUT", `Option "${k}" is fixed when a queue is created; drop and recreate the queue to change it.`, {
        field: k,
      });
    }
  }
  return engineUnits(s);
}

/**
 * Seconds (the engine's unit) to milliseconds, to the microsecond an interval holds.
 *
 * @example
 * ```ts ignore
 * secondsToMs(1.5); // 1500
 * ```
 */
export function secondsToMs(s: number): number {
  return Math.round(s * 1e6) / 1e3;
}

/**
 * A queue as the engine reports it (durations in seconds) in the client's
 * unit: durations in milliseconds, so every reported setting can be passed
 * back to `createQueue` / `updateQueue` unchanged and means the same.
 */
export function infoInMs(info: QueueInfo): QueueInfo {
  const out = { ...info } as unknown as Record<string, unknown>;
  for (const [k, spec] of Object.entries(QUEUE_SETTINGS)) {
    if (spec.kind === "duration" && typeof out[k] === "number") out[k] = secondsToMs(out[k] as number);
  }
  return out as unknown as QueueInfo;
}

/**
 * `createQueue` of an existing queue is idempotent only with the same
 * settings: a difference would otherwise be ignored without a word.
 * `wanted` is in the engine's units, `have` as the engine reported it.
 */
export function sameSettings(name: string, wanted: Record<string, number>, have: QueueInfo): void {
  for (const [k, want] of Object.entries(wanted)) {
    const got = (have as unknown as Record<string, number>)[k]!;
    if (Math.abs(got - want) > 1e-6 * Math.max(1, Math.abs(want))) {
      const ms = QUEUE_SETTINGS[k]?.kind === "duration";
      const [g, w, unit] = ms ? [secondsToMs(got), secondsToMs(want), " ms"] : [got, want, ""];
      throw new KeyqError(
        "QUEUE_EXISTS",
        `Queue "${name}" already exists with ${k} ${g}${unit}, not ${w}${unit}; call updateQueue("${name}", { ${k}: ${w} }) to change it, ` +
          `or createQueue without settings to use it as it is.`,
        { queue: name, field: k, existing: g, requested: w },
      );
    }
  }
}
