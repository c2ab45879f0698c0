/**
 * The Chat and Compare panel for one finished or stopped run. Chat streams the
 * fine-tune's answers; Compare sends each message to the base model and the fine-tune
 * side by side, each side keeping its own conversation (for an adapter run the server
 * switches the adapter off for the base: one copy of the weights). Any valid checkpoint
 * of the run can answer instead of its final weights. Generation is the server's
 * OpenAI-style route (chat-stream.js); Stop closes the connections, which stops the
 * generation on the server. A run whose family reads media besides text (its spec's `media`,
 * from GET /api/models/families) takes one with a message, an image or an audio clip: the
 * file is read here into the message as OpenAI's content part (`image_url` with a data:
 * URI, `input_audio` with base64 data), and shown in the log.
 */

import { api } from "./api.js";
import { streamChat } from "./chat-stream.js";
import { modalityRules, runName } from "./history.js";
import { notify } from "./notice.js";
import { el } from "./dom.js";
import { cannotUse, guard } from "./rights.js";

const $ = (id) => document.getElementById(id);
// [input id, request field, label, lowest, highest, whole number?]; bounds as the server checks them.
// What a message may attach, by the media the run's family reads: [label, accepted files, help].
const ATTACH = {
  image: ["Image", "image/png,image/jpeg,image/gif,image/bmp,image/webp",
    "Sent with your next message; the model sees it shrunk as its training images were."],
  audio: ["Audio clip", ".wav,.mp3,.flac,.ogg,audio/wav,audio/mpeg,audio/flac,audio/ogg",
    "Sent with your next message (wav, mp3, flac or ogg)."],
};
const AUDIO_FORMATS = ["wav", "mp3", "flac", "ogg"];

/** A file's contents as a data: URI. */
function dataUri(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/** The OpenAI content part for an attached file of `media` (image or audio). */
async function mediaPart(file, media) {
  const uri = await dataUri(file);
  if (media === "image") return { type: "image_url", image_url: { url: uri } };
  const ext = (file.name.split(".").pop() || "").toLowerCase();
  const format = AUDIO_FORMATS.includes(ext) ? ext : (file.type.split("/")[1] || "").replace("mpeg", "mp3").replace("x-wav", "wav");
  return { type: "input_audio", input_audio: { data: uri.slice(uri.indexOf(",") + 1), format } };
}

const SETTINGS = [
  ["chat-temperature", "temperature", "Temperature", 0, 2, false],
  ["chat-top-p", "top_p", "Top-p", Number.MIN_VALUE, 1, false],
  ["chat-max-tokens", "max_tokens", "Max new tokens", 1, 4096, true],
];

export class PlaygroundPanel {
  constructor() {
    this.run = null;
    this.target = null;
    this.sides = [];
    this.media = null; // image or audio: what the run's family reads besides text (#attachFor)
    this.history = {};
    this.controller = null;
    $("chat-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.#send();
    });
    $("chat-input").addEventListener("keydown", (event) => {
      // Enter sends, Shift+Enter starts a new line, as in most chat boxes.
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        $("chat-form").requestSubmit();
      }
    });
    $("chat-stop").addEventListener("click", () => this.stop());
    // Other weights are another model: the conversation starts over with them.
    $("chat-weights").addEventListener("change", (event) => {
      this.stop();
      this.#load(event.target.value === "" ? null : Number(event.target.value));
    });
    $("chat-clear").addEventListener("click", () => this.#clear());
    $("chat-close").addEventListener("click", () => {
      this.stop();
      $("playground").hidden = true;
    });
  }

  /** Open the panel on `run`; `compare` puts the base model beside the fine-tune. */
  async open(run, compare) {
    this.stop();
    this.run = run;
    this.sides = compare ? ["base", "tuned"] : ["tuned"];
    if (!(await this.#load(null))) return;
    const weights = $("chat-weights");
    const latest = this.target.step === null ? "final weights" : `saved checkpoint (step ${this.target.step})`;
    weights.replaceChildren(new Option(latest, ""), ...this.target.checkpoints.map((step) => new Option(`checkpoint ${step}`, String(step))));
    $("playground-title").textContent = compare ? `Compare ${runName(run)} with its base` : `Chat with ${runName(run)}`;
    await this.#attachFor(run.modality);
    $("chat-side-base").hidden = !compare;
    $("chat-sides").classList.toggle("compare", compare);
    $("playground").hidden = false;
    $("playground").scrollIntoView({ block: "start" });
    $("chat-input").focus();
  }

  /** Ask the server which model ids and template answer for the run (at `checkpoint`, or its default weights). */
  async #load(checkpoint) {
    let target;
    try {
      target = await api.chatTarget(this.run.id, checkpoint);
    } catch (err) {
      if (err.status !== 401) notify(`Cannot chat with ${runName(this.run)}: ${err.message}`, "error");
      return false;
    }
    this.target = target;
    const weights = target.step === null ? "its final weights" : `its checkpoint at step ${target.step}`;
    const base = target.kind === "adapter"
      ? "the base is the same model with the adapter switched off"
      : "the base model is loaded beside it";
    $("chat-about").textContent = `Answers from ${target.model} (${weights}), trained on ${target.base_model}`
      + (this.sides.includes("base") ? `; ${base}.` : ".");
    $("chat-template").textContent = target.chat_template;
    $("chat-template-source").textContent = target.template_source === "tokenizer"
      ? "the template the run saved with its tokenizer"
      : "tunelab's fallback template (the run saved none)";
    this.#clear();
    return true;
  }

  /** Offer a file input for the media the run's family reads (none for a text model). */
  async #attachFor(modality) {
    // The families' rules are the history's, asked already; unanswered, no file is offered.
    const rules = await modalityRules().catch(() => ({}));
    this.media = rules[modality]?.media ?? null;
    const attach = ATTACH[this.media];
    $("chat-attach").hidden = !attach;
    $("chat-media").value = "";
    $("chat-media-error").textContent = "";
    if (!attach) return;
    $("chat-media-label").textContent = attach[0];
    $("chat-media").accept = attach[1];
    $("chat-media-help").textContent = attach[2];
  }

  /** Stop the answers in progress (the server stops generating when the connection closes). */
  stop() {
    if (this.controller) this.controller.abort();
  }

  #clear() {
    this.stop();
    this.history = Object.fromEntries(this.sides.map((side) => [side, []]));
    for (const side of ["base", "tuned"]) $(`chat-log-${side}`).replaceChildren();
    $("chat-status").textContent = "";
  }

  /** The sampling fields, or null after marking the first bad one. */
  #sampling() {
    const values = {};
    for (const [id, field, label, low, high, whole] of SETTINGS) {
      const input = $(id);
      const error = $(`${id}-error`);
      const value = Number(input.value);
      const bad = input.value.trim() === "" || !Number.isFinite(value) || value < low || value > high
        || (whole && !Number.isInteger(value));
      const range = low === Number.MIN_VALUE ? `above 0 and at most ${high}` : `from ${low} to ${high}`;
      error.textContent = bad ? `${label} must be ${whole ? "a whole number" : "a number"} ${range}.` : "";
      input.setAttribute("aria-invalid", bad ? "true" : "false");
      if (bad) {
        input.focus();
        return null;
      }
      values[field] = value;
    }
    return values;
  }

  async #send() {
    const text = $("chat-input").value.trim();
    const file = $("chat-attach").hidden ? null : $("chat-media").files[0] || null;
    // Enter submits the form itself, past the disabled Send of a key that only reads.
    if ((!text && !file) || this.controller || !this.target || cannotUse()) return;
    const sampling = this.#sampling();
    if (!sampling) return;
    // Taken before the file is read, so a second Enter meanwhile sends nothing.
    const controller = new AbortController();
    this.controller = controller;
    let content = text;
    if (file) {
      try {
        content = [await mediaPart(file, this.media), ...(text ? [{ type: "text", text }] : [])];
      } catch (err) {
        $("chat-media-error").textContent = `Cannot read ${file.name}: ${err.message}`;
        this.controller = null;
        return;
      }
    }
    $("chat-media-error").textContent = "";
    const system = $("chat-system").value.trim();
    $("chat-input").value = "";
    $("chat-media").value = "";
    this.#busy(true);
    $("chat-status").textContent = "Generating… (the first answer may wait while the model loads)";
    const answers = this.sides.map((side) => this.#answer(side, content, system, sampling, controller.signal));
    const outcomes = await Promise.all(answers);
    this.controller = null;
    this.#busy(false);
    $("chat-status").textContent = outcomes.includes("stopped") ? "Stopped." : "";
    $("chat-input").focus();
  }

  /** One side's answer to `content` (text, or parts with an image or clip): streamed into its log, then kept in its conversation. */
  async #answer(side, content, system, sampling, signal) {
    const log = $(`chat-log-${side}`);
    const asked = { role: "user", content };
    const messages = [...(system ? [{ role: "system", content: system }] : []), ...this.history[side], asked];
    log.append(userTurn(content));
    const reply = el("li", "chat-turn assistant");
    reply.dataset.state = "streaming";
    const body = el("span", "chat-text");
    reply.append(body);
    log.append(reply);
    const model = side === "base" ? this.target.base_model_id : this.target.model;
    let outcome;
    try {
      const { finish } = await streamChat({
        model, messages, sampling, signal,
        onPiece: (piece) => {
          body.textContent += piece;
          log.scrollTop = log.scrollHeight;
        },
      });
      outcome = finish === "length" ? "length" : "done";
      if (finish === "length") reply.append(el("span", "chat-note", " [max new tokens reached]"));
    } catch (err) {
      outcome = err.name === "AbortError" ? "stopped" : "error";
      reply.append(el("span", "chat-note", outcome === "stopped" ? " [stopped]" : ` [error: ${err.message}]`));
    }
    reply.dataset.state = outcome;
    if (outcome !== "error") {
      this.history[side].push(asked, { role: "assistant", content: body.textContent });
    }
    return outcome;
  }

  #busy(busy) {
    guard($("chat-send"), cannotUse(), busy);
    $("chat-stop").disabled = !busy;
  }
}

/** The log entry of a user turn: its text, below the image or clip it carried. */
function userTurn(content) {
  if (typeof content === "string") return el("li", "chat-turn user", content);
  const turn = el("li", "chat-turn user");
  for (const part of content) {
    if (part.type === "image_url") {
      const image = el("img", "chat-media");
      image.src = part.image_url.url;
      image.alt = "Attached image";
      turn.append(image);
    } else if (part.type === "input_audio") {
      const audio = el("audio", "chat-media");
      audio.controls = true;
      audio.src = `data:audio/${part.input_audio.format};base64,${part.input_audio.data}`;
      turn.append(audio);
    } else {
      turn.append(el("span", "", part.text));
    }
  }
  return turn;
}
