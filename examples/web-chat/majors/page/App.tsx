// The one-line integration as docs/js.md writes it: inline in the component, so every render
// builds a new transport and a new toolrefFetch(). The SDK's state is shared per endpoint, so
// each turn is still an edit of the request the backend kept (issue 32: with AI SDK 6 it sent
// the whole conversation every turn). Built once per AI SDK major (majors/ai5, ai6, ai7).
import { useChat } from "@ai-sdk/react";
import { toolrefFetch } from "@toolref/client";
import { DefaultChatTransport, type UIMessage } from "ai";
import { useEffect, useState, type FormEvent } from "react";

declare const __AI_VERSION__: string; // the ai package this page was built with (vite.shared.ts)

declare global {
  interface Window {
    chat?: { messages: UIMessage[]; status: string; error: string | null; turns: unknown[]; ai: string };
  }
}

export function App() {
  const { messages, sendMessage, status, error } = useChat({
    transport: new DefaultChatTransport({ api: "/api/chat", fetch: toolrefFetch() }),
  });
  const [input, setInput] = useState("");

  useEffect(() => {
    window.chat = { messages, status, error: error ? error.message : null, turns: [], ai: __AI_VERSION__ };
  }, [messages, status, error]);

  const busy = status === "submitted" || status === "streaming";
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const text = input.trim();
    if (!text || busy) return;
    setInput("");
    void sendMessage({ text });
  };

  return (
    <main>
      <h1>toolref, AI SDK {__AI_VERSION__}</h1>
      {messages.map((message) => (
        <p key={message.id} className={message.role}>
          {message.parts.map((part) => (part.type === "text" ? part.text : part.type.startsWith("tool-") ? `[${part.type}] ` : "")).join("")}
        </p>
      ))}
      {error && (
        <div className="error" role="alert">
          {error.message}
        </div>
      )}
      <form onSubmit={submit}>
        <input aria-label="message" value={input} onChange={(event) => setInput(event.target.value)} />
        <button type="submit" disabled={busy || !input.trim()}>
          Send
        </button>
      </form>
    </main>
  );
}
