/**
 * The package version `keyq --version` prints. A constant, so it works from
 * the npm package, JSR and the repository alike; tests/cli.test.ts fails when
 * it differs from package.json.
 *
 * @module
 */

/** This build's version (package.json "version"). */
export const VERSION: string = "0.1.0";
