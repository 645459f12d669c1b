/** The package's version; package.json's "version" says the same (a test checks it). */
export const VERSION = "0.1.0";
