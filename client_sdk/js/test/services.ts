// The real Python service for the integration tests: a registry (`toolref-server serve`,
// embedded valkey, or TOOLREF_TEST_REDIS_URL) and the chat backend of tests/js_backend.py.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
const BIN = join(ROOT, ".venv", "bin");

/** Why the Python service cannot run here; null when it can. */
export function missingPython(): string | null {
  if (!existsSync(join(BIN, "python")) || !existsSync(join(BIN, "toolref-server"))) {
    return `${BIN}/python and toolref-server are missing: run \`make lint\` (or \`make js-test\`) at the repository root first`;
  }
  return null;
}

export async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => done(port));
    });
  });
}

export class Service {
  private child: ChildProcess | null = null;
  private output = "";

  constructor(
    readonly name: string,
    readonly command: string[],
    readonly url: string,
    readonly probe: string,
    readonly env: Record<string, string> = {},
  ) {}

  async start(timeoutMs = 60_000): Promise<void> {
    const [program, ...args] = this.command;
    this.output = "";
    const child = spawn(program!, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...this.env } });
    this.child = child;
    child.stdout?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`${this.name} exited with ${child.exitCode}:\n${this.output}`);
      try {
        const answer = await fetch(this.url + this.probe);
        if (answer.ok) return;
      } catch {
        // not listening yet
      }
      await new Promise((done) => setTimeout(done, 100));
    }
    throw new Error(`${this.name} did not answer ${this.url + this.probe} within ${timeoutMs} ms:\n${this.output}`);
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (child === null || child.exitCode !== null) return;
    const exited = new Promise((done) => child.once("exit", done));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

/** A registry on a free port with its own data folder (or the Redis the tests name, unless
 * `embedded`: a restart then loses what it held). */
export async function registry(
  port?: number,
  embedded = false,
  env: Record<string, string> = {},
): Promise<{ service: Service; cleanup: () => Promise<void> }> {
  const chosen = port ?? (await freePort());
  const data = mkdtempSync(join(tmpdir(), "toolref-js-"));
  const redis = embedded ? undefined : process.env["TOOLREF_TEST_REDIS_URL"];
  const args = ["serve", "--port", String(chosen), "--data-dir", data];
  if (redis) args.push("--redis-url", redis);
  const service = new Service("registry", [join(BIN, "toolref-server"), ...args], `http://127.0.0.1:${chosen}`, "/readyz", env);
  await service.start();
  return {
    service,
    cleanup: async () => {
      await service.stop();
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** The chat backend of tests/js_backend.py (behind ToolRefMiddleware unless `plain`). */
export async function backend(registryUrl: string, plain = false): Promise<Service> {
  const port = await freePort();
  const args = ["-m", "tests.js_backend", "--registry", registryUrl, "--port", String(port)];
  if (plain) args.push("--plain");
  const service = new Service("backend", [join(BIN, "python"), ...args], `http://127.0.0.1:${port}`, "/seen");
  await service.start();
  return service;
}
