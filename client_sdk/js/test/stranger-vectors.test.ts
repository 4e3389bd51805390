// JS's rule for an answer to an edit from no receiver of edits (src/stranger.ts) against the
// vectors Python's `toolref.sending.stranger` computed (tests/js_stranger_vectors.py): for each
// status, whether the request goes again as it is, and how edits pause (Python's seconds, ms
// here). Then the rule at work over a real socket: a firewall in front of a receiver of edits
// refusing every edit 400 unread, two hours of turns a minute apart (the page's clock), and a
// proxy's 504 to an edit, handed on, not sent again.
import { createServer, type Server } from "node:http";
import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEDIA_TYPE, ToolReferenceManager, forgetSharedState, toolrefFetch } from "../src/index.js";
import { resent, strangerPause } from "../src/stranger.js";

interface Vector {
  status: number;
  resent: boolean;
  pause: [number, number] | null;
}

const vectors = (JSON.parse(readFileSync(new URL("./vectors.json", import.meta.url), "utf8")) as { stranger: Vector[] }).stranger;

afterEach(() => {
  forgetSharedState();
  vi.useRealTimers();
});

describe("stranger vectors: an answer to an edit from no receiver of edits", () => {
  it("has every status from 100 to 599", () => {
    expect(vectors.map((vector) => vector.status)).toEqual(Array.from({ length: 500 }, (_, i) => i + 100));
  });

  it("resends and pauses as Python's rule does", () => {
    for (const vector of vectors) {
      expect([resent(vector.status), strangerPause(vector.status)], String(vector.status)).toEqual([
        vector.resent,
        vector.pause === null ? null : vector.pause.map((seconds) => seconds * 1000),
      ]);
    }
  });
});

/** A receiver of edits (its answers say `Toolref-Edits: 6`) behind a proxy whose answer to an
 * edit is `edits` ("400": refused unread; "504": forwarded, then timed out); `kinds` in order. */
async function behindAProxy(edits: "400" | "504"): Promise<{ url: string; kinds: string[]; calls: () => number; server: Server }> {
  const kinds: string[] = [];
  let calls = 0;
  const server = createServer((request, response) => {
    const edit = request.headers["content-type"] === MEDIA_TYPE;
    kinds.push(edit ? "edit" : "as it is");
    request.resume();
    request.on("end", () => {
      if (edit && edits === "400") {
        response.writeHead(400, { "content-type": "text/html" }).end("<html>400 Bad Request</html>");
        return;
      }
      calls += 1; // the provider called (an edit forwarded, then timed out, included)
      if (edit) response.writeHead(504, { "content-type": "text/html" }).end("<html>504 Gateway Time-out</html>");
      else response.writeHead(200, { "content-type": "application/json", "Toolref-Edits": "6" }).end('{"id":"r"}');
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/api/chat`, kinds, calls: () => calls, server };
}

function body(turn: number): string {
  const messages = Array.from({ length: turn }, (_, i) => ({ role: "user", content: `turn ${i}: ` + "why ".repeat(200) }));
  return JSON.stringify({ model: "m", messages });
}

describe("the rule over a real socket", () => {
  it("behind a firewall refusing edits 400, a few refused edits in two hours, not one a turn", async () => {
    const proxy = await behindAProxy("400");
    let now = 0;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const send = toolrefFetch({ manager: new ToolReferenceManager() });
    try {
      for (let turn = 1; turn <= 120; turn++) {
        now += 60_000;
        const answer = await send(proxy.url, { method: "POST", headers: { "content-type": "application/json" }, body: body(turn) });
        expect(answer.status).toBe(200);
        await answer.arrayBuffer();
      }
    } finally {
      proxy.server.close();
      vi.restoreAllMocks();
    }
    const refused = proxy.kinds.filter((kind) => kind === "edit").length;
    expect(refused).toBe(5); // minutes 2, 7, 17, 37, 77 (before: 119, one a turn)
    expect(proxy.kinds.length).toBe(120 + refused);
  });

  it("hands a proxy's 504 to an edit on as it came, the provider called once", async () => {
    const proxy = await behindAProxy("504");
    const send = toolrefFetch({ manager: new ToolReferenceManager() });
    const post = (turn: number) => send(proxy.url, { method: "POST", headers: { "content-type": "application/json" }, body: body(turn) });
    try {
      expect((await post(1)).status).toBe(200);
      const answer = await post(2);
      expect([answer.status, await answer.text()]).toEqual([504, "<html>504 Gateway Time-out</html>"]);
      expect(proxy.kinds).toEqual(["as it is", "edit"]);
      expect(proxy.calls()).toBe(2);
    } finally {
      proxy.server.close();
    }
  });
});
