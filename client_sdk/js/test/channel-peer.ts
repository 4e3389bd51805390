// A WebSocket server over node:net for the channel's tests (channel-websocket.test.ts,
// channel-link.test.ts): it answers each upgrade as told, then reads the client's frames
// (unmasked) one by one; `serverFrame` writes the server's.
import { createHash } from "node:crypto";
import { createServer, type Server, type Socket } from "node:net";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
export const servers: Server[] = [];

export interface Frame {
  fin: boolean;
  opcode: number;
  payload: Buffer;
  masked: boolean;
}

export interface Peer {
  socket: Socket;
  request: string;
  next(): Promise<Frame>;
}

/** A server answering each upgrade with `answer(key)`, then reading the client's frames. */
export async function serve(answer: (key: string) => string | Buffer): Promise<{ url: string; peer: Promise<Peer>; peerAt: (index: number) => Promise<Peer>; count: () => number }> {
  const peers: Peer[] = [];
  const waiting: [number, (peer: Peer) => void][] = [];
  const peerAt = (index: number): Promise<Peer> =>
    new Promise((resolve) => (index < peers.length ? resolve(peers[index]!) : waiting.push([index, resolve])));
  const found = (peer: Peer): void => {
    peers.push(peer);
    for (const [index, resolve] of waiting.filter(([at]) => at < peers.length)) resolve(peers[index]!);
    waiting.splice(0, waiting.length, ...waiting.filter(([at]) => at >= peers.length));
  };
  const server = createServer((socket) => {
    let buffer = Buffer.alloc(0);
    let upgraded = false;
    const frames: Frame[] = [];
    const waiting: ((frame: Frame) => void)[] = [];
    socket.on("error", () => undefined);
    socket.on("data", (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (!upgraded) {
        const end = buffer.indexOf("\r\n\r\n");
        if (end < 0) return;
        upgraded = true;
        const request = buffer.subarray(0, end).toString("latin1");
        buffer = buffer.subarray(end + 4);
        const key = /sec-websocket-key: (.*)/i.exec(request)?.[1]?.trim() ?? "";
        socket.write(answer(key));
        found({ socket, request, next: () => new Promise((resolve) => (frames.length ? resolve(frames.shift()!) : waiting.push(resolve))) });
      }
      for (;;) {
        if (buffer.length < 2) return;
        let length = buffer[1]! & 0x7f;
        let at = 2;
        if (length === 126) [length, at] = [buffer.readUInt16BE(2), 4];
        else if (length === 127) [length, at] = [Number(buffer.readBigUInt64BE(2)), 10];
        const masked = (buffer[1]! & 0x80) !== 0;
        const mask = buffer.subarray(at, at + 4);
        if (masked) at += 4;
        if (buffer.length < at + length) return;
        const payload = Buffer.from(buffer.subarray(at, at + length));
        if (masked) for (let index = 0; index < payload.length; index++) payload[index]! ^= mask[index % 4]!;
        const frame = { fin: (buffer[0]! & 0x80) !== 0, opcode: buffer[0]! & 0x0f, payload, masked };
        buffer = buffer.subarray(at + length);
        if (waiting.length) waiting.shift()!(frame);
        else frames.push(frame);
      }
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/v1/channel?x=1`;
  return { url, peer: peerAt(0), peerAt, count: () => peers.length };
}

export const accepting =
  (extra = "") =>
  (key: string): string =>
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
    `Sec-WebSocket-Accept: ${createHash("sha1").update(key + GUID).digest("base64")}\r\n${extra}\r\n`;

/** A server frame (unmasked). */
export function serverFrame(opcode: number, payload: Uint8Array, fin = true): Buffer {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([opcode | (fin ? 0x80 : 0), n]) : n < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
  if (n >= 126 && n < 65536) head.writeUInt8(opcode | (fin ? 0x80 : 0), 0), head.writeUInt8(126, 1), head.writeUInt16BE(n, 2);
  if (n >= 65536) head.writeUInt8(opcode | (fin ? 0x80 : 0), 0), head.writeUInt8(127, 1), head.writeBigUInt64BE(BigInt(n), 2);
  return Buffer.concat([head, payload]);
}

