import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The backend (examples/web_chat_backend.py) serves dist/ and /api; `vite dev` proxies /api to it.
export default defineConfig({
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: { proxy: { "/api": "http://127.0.0.1:8770" } },
});
