/**
 * Speak with a finished text-to-speech run, in the history: its "Speak" action (in place of
 * Chat) opens a fold-out with a text box; the server synthesises the text
 * (POST /api/runs/{id}/speak?stream=true) and an <audio> element plays it. Speaking takes
 * seconds to a minute, so while it works the fold-out shows a spinner, the seconds spent
 * (counted here, so they move while the model loads and says nothing), the stage the server
 * reports and, once the model speaks, a bar of the audio tokens written of at most how
 * many (generation may end sooner, at the model's end of speech). Cancel aborts the request;
 * the server ends the speaking when its client goes. The wav comes back behind the token,
 * so it is handed to the player as an object URL.
 */

import { api } from "./api.js";
import { fmtInt } from "./format.js";
import { notify } from "./notice.js";
import { button, el } from "./dom.js";
import { cannotUse, guard } from "./rights.js";

const TICK_MS = 250;
const STAGES = { "loading the model": "Loading the model…" };

/** What the server's progress line says, in the page's words. */
function stageText(line) {
  if (Number.isInteger(line.tokens) && Number.isInteger(line.max_tokens)) {
    return `Speaking: ${fmtInt(line.tokens)} of at most ${fmtInt(line.max_tokens)} audio tokens`;
  }
  if (line.message?.startsWith("speaking on ")) return "Speaking…"; // a model that counts no tokens (Sesame CSM)
  return STAGES[line.message] || "Starting…";
}

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

  // While speaking: spinner, stage, seconds, a bar, and Cancel.
  const working = el("div", "speak-progress");
  working.hidden = true;
  working.setAttribute("role", "status");
  working.setAttribute("aria-label", `Speaking progress of ${name}`);
  const stage = el("span", "speak-stage");
  const seconds = el("span", "speak-elapsed");
  const bar = el("progress");
  bar.setAttribute("aria-label", "Audio tokens written");
  let controller = null;
  const cancel = button("Cancel", "quiet", `Cancel speaking with ${name}`, () => controller?.abort());
  working.append(el("span", "spinner"), stage, seconds, bar, cancel);

  const audio = el("audio");
  audio.controls = true;
  audio.hidden = true;
  audio.setAttribute("aria-label", `Speech of ${name}`);
  const error = el("p", "run-error-line");
  form.append(text, go, working, audio, error);
  details.append(el("summary", "", "Speak"), form);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    controller = new AbortController();
    const started = performance.now();
    const tick = () => { seconds.textContent = `${Math.floor((performance.now() - started) / 1000)} s`; };
    tick();
    const timer = setInterval(tick, TICK_MS);
    go.disabled = true;
    go.textContent = "Speaking…";
    error.textContent = "";
    stage.textContent = "Starting…";
    bar.removeAttribute("value"); // indeterminate until the model writes tokens
    working.hidden = false;
    const onProgress = (line) => {
      stage.textContent = stageText(line);
      if (Number.isInteger(line.tokens) && line.max_tokens > 0) {
        bar.max = line.max_tokens;
        bar.value = line.tokens;
      }
    };
    try {
      const wav = await api.speak(run.id, text.value, { signal: controller.signal, onProgress });
      if (audio.src) URL.revokeObjectURL(audio.src);
      audio.src = URL.createObjectURL(wav);
      audio.hidden = false;
    } catch (err) {
      if (err.name === "AbortError") {
        error.textContent = "Cancelled.";
      } else {
        error.textContent = err.message;
        notify(`Cannot speak with ${name}: ${err.message}`, "error");
      }
    } finally {
      clearInterval(timer);
      controller = null;
      working.hidden = true;
      guard(go, cannotUse());
      go.textContent = "Speak";
    }
  });

  const open = el("button", "secondary", "Speak");
  open.type = "button";
  open.setAttribute("aria-label", `Speak with ${name}`);
  guard(open, cannotUse());
  open.addEventListener("click", () => {
    details.open = true;
    text.focus();
  });
  return { button: open, details };
}
