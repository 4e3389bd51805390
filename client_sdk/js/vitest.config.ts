import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The integration suite starts the Python service once per file: give it time.
    testTimeout: 30_000,
    hookTimeout: 120_000,
  },
});
