/**
 * Speak with a finished text-to-speech run, in the history: its "Speak" action (in place of
 * Chat) opens a fold-out with a text box; the server synthesises the text
 * (POST /api/runs/{id}/speak answers audio/wav) and an <audio> element plays it. The wav
 * comes back behind the token, so it is handed to the player as an object URL.
 */

import { api } from "./api.js";
import { notify } from "./notice.js";
import { el } from "./dom.js";
import { cannotUse, guard } from "./rights.js";

export function speakSection(run, name) {
  const details = el("details", "run-speak");
  const form = el("form", "run-speak-body");
  const text = el("textarea");
  text.rows = 2;
  text.maxLength = 2000;
  text.required = true;
  text.placeholder = "Words to speak";
  text.setAttribute("aria-label", `Text for ${name} to speak`);
  const go = el("button", "secondary", "Speak");
  go.type = "submit";
  guard(go, cannotUse());
  const audio = el("audio");
  audio.controls = true;
  audio.hidden = true;
  audio.setAttribute("aria-label", `Speech of ${name}`);
  const error = el("p", "run-error-line");
  form.append(text, go, audio, error);
  details.append(el("summary", "", "Speak"), form);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    go.disabled = true;
    go.textContent = "Speaking…";
    error.textContent = "";
    try {
      const wav = await api.speak(run.id, text.value);
      if (audio.src) URL.revokeObjectURL(audio.src);
      audio.src = URL.createObjectURL(wav);
      audio.hidden = false;
    } catch (err) {
      error.textContent = err.message;
      notify(`Cannot speak with ${name}: ${err.message}`, "error");
    } finally {
      guard(go, cannotUse());
      go.textContent = "Speak";
    }
  });

  const button = el("button", "secondary", "Speak");
  button.type = "button";
  button.setAttribute("aria-label", `Speak with ${name}`);
  guard(button, cannotUse());
  button.addEventListener("click", () => {
    details.open = true;
    text.focus();
  });
  return { button, details };
}
