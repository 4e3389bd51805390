import { useChat } from "@ai-sdk/react";
import { toolrefFetch } from "@toolref/client";
import { DefaultChatTransport, type UIMessage } from "ai";
import { useEffect, useRef, useState, type FormEvent } from "react";
import { type Exchange, plainFetch } from "./exchange";
import { Messages } from "./Messages";
import { Savings } from "./Savings";
import { addExchange, type Turn } from "./turns";

// What the browser test reads: the messages useChat holds, its status and error, the turns.
declare global {
  interface Window {
    chat?: { messages: UIMessage[]; status: string; error: string | null; turns: Turn[] };
  }
}

const toolrefOn = new URLSearchParams(window.location.search).get("toolref") !== "off";

export function App() {
  const [turns, setTurns] = useState<Turn[]>([]);
  const turnRef = useRef(0);
  const [transport] = useState(() => {
    const onExchange = (exchange: Exchange) =>
      setTurns((previous) => addExchange(previous, turnRef.current, exchange));
    // The one line toolref asks of a useChat app: its fetch for the transport.
    const fetch = toolrefOn ? toolrefFetch({ onExchange }) : plainFetch(onExchange);
    return new DefaultChatTransport({ api: "/api/chat", fetch });
  });
  const { messages, sendMessage, status, error } = useChat({ transport });
  const [input, setInput] = useState("");

  useEffect(() => {
    window.chat = { messages, status, error: error ? error.message : null, turns };
  }, [messages, status, error, turns]);

  const busy = status === "submitted" || status === "streaming";
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const text = input.trim();
    if (!text || busy) return;
    turnRef.current += 1;
    setInput("");
    void sendMessage({ text });
  };

  return (
    <div className="layout">
      <main>
        <h1>toolref web chat</h1>
        <p className="hint">
          Ask anything, or <code>read src/app.py</code>, <code>list src</code>,{" "}
          <code>search cache</code>: the scripted model calls tools on the server and every
          turn resends the whole conversation, tool results included.{" "}
          {toolrefOn ? "toolref sends only what changed." : "toolref is off (?toolref=off)."}
        </p>
        <Messages messages={messages} />
        {error && (
          <div className="error" role="alert">
            {error.message}
          </div>
        )}
        <form onSubmit={submit}>
          <input
            aria-label="message"
            value={input}
            onChange={(event) => setInput(event.target.value)}
            placeholder="read src/core/cache.py"
            autoFocus
          />
          <button type="submit" disabled={busy || !input.trim()}>
            Send
          </button>
        </form>
        <p className="status" data-status={status}>
          {status}
        </p>
      </main>
      <Savings turns={turns} />
    </div>
  );
}
