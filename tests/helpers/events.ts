/** Events for the engine-settings tests (tests/engine-settings*.test.ts). */

/** `n` events of type "E", payloads `from`…`from + n - 1`, keyed over 300 keys (`k0`…`k299`). */
export const events = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ type: "E", payload: from + i, key: `k${(from + i) % 300}` }));
