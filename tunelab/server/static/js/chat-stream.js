/**
 * One streamed answer from the server's OpenAI-style `/v1/chat/completions` route (the
 * same generation `tunelab chat` and OpenAI clients use). The body arrives as Server-Sent
 * Events; each chunk's text is handed to `onPiece` as it comes. Aborting `signal` closes
 * the connection, and the server stops a generation whose client has gone.
 */

import { ApiError, getToken } from "./api.js";

/**
 * @returns {Promise<{text: string, finish: string|null}>} the whole answer and why it
 *   ended ("stop", "length"); rejects with ApiError (an AbortError when aborted).
 */
export async function streamChat({ model, messages, sampling, signal, onPiece }) {
  let response;
  try {
    response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { Authorization: `Bearer ${getToken()}`, "Content-Type": "application/json" },
      body: JSON.stringify({ model, messages, stream: true, ...sampling }),
      signal,
    });
  } catch (cause) {
    if (cause.name === "AbortError") throw cause;
    throw new ApiError(0, { error: { code: "network", message: "cannot reach the tunelab server; is `tunelab serve` still running?" } });
  }
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new ApiError(response.status, body);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let text = "";
  let finish = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return { text, finish };
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk);
        const choice = (chunk.choices || [])[0];
        if (!choice) continue;
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          text += piece;
          onPiece(piece);
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
  }
  return { text, finish };
}
