import type { UIMessage } from "ai";
import { formatBytes } from "./sizes";

const encoder = new TextEncoder();

function size(value: unknown): string {
  return formatBytes(encoder.encode(JSON.stringify(value) ?? "").length);
}

function Part({ part }: { part: UIMessage["parts"][number] }) {
  if (part.type === "text") return <p className="text">{part.text}</p>;
  if (part.type.startsWith("tool-") && "toolCallId" in part) {
    const name = part.type.slice("tool-".length);
    const done = part.state === "output-available";
    return (
      <details className="tool" data-state={part.state}>
        <summary>
          <span className="tool-name">{name}</span> <code>{JSON.stringify(part.input)}</code>{" "}
          <span className="tool-size">{done ? `→ ${size(part.output)}` : part.state}</span>
        </summary>
        {done && <pre>{JSON.stringify(part.output, null, 2)}</pre>}
      </details>
    );
  }
  return null;
}

export function Messages({ messages }: { messages: UIMessage[] }) {
  return (
    <ol className="messages">
      {messages.map((message) => (
        <li key={message.id} className={`message ${message.role}`} data-role={message.role}>
          {message.parts.map((part, index) => (
            <Part key={index} part={part} />
          ))}
        </li>
      ))}
    </ol>
  );
}
