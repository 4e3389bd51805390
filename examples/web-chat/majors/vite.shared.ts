// The Vite build of the page (majors/page) for one AI SDK major: its root is the major's
// folder, whose node_modules hold that major's `ai` and `@ai-sdk/react`. The page's source
// sits beside, in ../page, so its imports are resolved from the major's folder (dedupe),
// never from examples/web-chat's own (AI SDK 5). Vite and its React plugin are the demo's.
import react from "@vitejs/plugin-react";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { defineConfig, type UserConfig } from "vite";

export function majorConfig(folder: string, major: string): UserConfig {
  const ai = JSON.parse(readFileSync(join(folder, "node_modules", "ai", "package.json"), "utf8")) as { version: string };
  if (!ai.version.startsWith(major + ".")) throw new Error(`${folder} holds ai ${ai.version}, not ${major}.x: npm ci there`);
  return defineConfig({
    root: folder,
    base: `/ai${major}/`,
    plugins: [react()],
    define: { __AI_VERSION__: JSON.stringify(ai.version) },
    resolve: { dedupe: ["ai", "@ai-sdk/react", "react", "react-dom", "@toolref/client", "zod"] },
    build: { outDir: join(folder, "..", "dist", `ai${major}`), emptyOutDir: true, sourcemap: false },
    logLevel: "warn",
  });
}
