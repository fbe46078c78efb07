/**
 * slot_of(key, n) as Postgres 15 computed it once (src/sql/migrations/004_ordered.sql),
 * committed so that a change to the function shows up as a failing test:
 * slot indexes and every ordered consumer's routing depend on these values
 * staying the same across releases. `hash` is hashtextextended(key, 0).
 *
 * Regenerate only on purpose (it breaks existing ordered consumers):
 *   select k, hashtextextended(k, 0)::text, json_object_agg(n, slot_of(k, n))
 */
export interface SlotRow {
  key: string;
  hash: string;
  slots: Record<number, number>;
}

/** Keys chosen for spread: empty, one byte, multi-byte UTF-8, emoji, longer than a lookup3 block. */
export const SLOT_VALUES: readonly SlotRow[] = [
  { key: "", hash: "-6939563903564495251", slots: { 1: 0, 2: 1, 7: 1, 16: 13, 1000: 749 } },
  { key: "a", hash: "3591986179850072241", slots: { 1: 0, 2: 1, 7: 6, 16: 1, 1000: 241 } },
  {
    key: "a much longer key that spans several lookup3 blocks of twelve bytes each",
    hash: "7169254687774028627",
    slots: { 1: 0, 2: 1, 7: 1, 16: 3, 1000: 627 },
  },
  { key: "b", hash: "-1633062336851484768", slots: { 1: 0, 2: 0, 7: 2, 16: 0, 1000: 232 } },
  { key: "key-1", hash: "-7639180196400528624", slots: { 1: 0, 2: 0, 7: 5, 16: 0, 1000: 376 } },
  { key: "key-2", hash: "-3180804325330368151", slots: { 1: 0, 2: 1, 7: 5, 16: 9, 1000: 849 } },
  { key: "order:42", hash: "8062238451227541211", slots: { 1: 0, 2: 1, 7: 1, 16: 11, 1000: 211 } },
  { key: "tenant/7/user/99", hash: "6320924617334972864", slots: { 1: 0, 2: 0, 7: 2, 16: 0, 1000: 864 } },
  { key: "Ünïcødé", hash: "-4957807571643586448", slots: { 1: 0, 2: 0, 7: 2, 16: 0, 1000: 552 } },
  { key: "😀", hash: "-9149796522330800166", slots: { 1: 0, 2: 0, 7: 2, 16: 10, 1000: 834 } },
];

/** slot_of(null, n) is 0 for every n (keyless events all go to slot 0). */
export const NULL_KEY_SLOT = 0;

/** The engine's formula on a known hash: the non-negative remainder of `hash` by `n`. */
export function slotFromHash(hash: string, n: number): number {
  const r = BigInt(hash) % BigInt(n); // truncated, like SQL's %: negative for a negative hash
  return Number((r + BigInt(n)) % BigInt(n));
}
