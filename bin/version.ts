/**
 * The package version `keyq --version` prints. A constant, so it works from
 * the npm package, JSR and the repository alike; written from package.json by
 * scripts/version.ts (`npm version` runs it), checked by check:exports.
 *
 * @module
 */

/** This build's version (package.json "version"). */
export const VERSION: string = "0.1.0";
