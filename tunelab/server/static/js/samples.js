/**
 * The spoken sample of a text-to-speech run, played beside the loss chart.
 *
 * A TTS run's worker writes samples/step-N.wav at each eval; the API lists them
 * (GET /api/runs/{id}/samples) and serves each behind the token, so the newest is
 * fetched as a blob and handed to the <audio> element as an object URL. While the run
 * trains the list is asked again every few seconds (a sample lands just after its eval).
 */

import { api } from "./api.js";
import { modalityRules } from "./history.js";

const FOLLOW_MS = 5000;

export class SamplePlayer {
  constructor(box, audio, caption) {
    this.box = box;
    this.audio = audio;
    this.caption = caption;
    this.runId = null;
    this.shown = null; // "<run>/<name>" of the sample in the player
    this.asked = 0; // the latest follow(): an older one's answer from the rules is dropped
    this.url = null;
    this.timer = null;
  }

  /** Follow `runId`: shown for a run whose family speaks (text-to-speech) only, refreshed while it trains. */
  follow(runId, modality, running) {
    clearTimeout(this.timer);
    if (runId !== this.runId) this.#clear();
    this.runId = runId;
    const asked = ++this.asked;
    // Whether its family speaks is the families' rules (GET /api/models/families); unanswered, no player.
    modalityRules().catch(() => ({})).then((rules) => {
      if (asked !== this.asked) return; // followed again meanwhile
      if (runId === null || !rules[modality]?.speaks) {
        this.box.hidden = true;
        return;
      }
      this.#load(runId);
      if (running) this.timer = setTimeout(() => this.follow(runId, modality, running), FOLLOW_MS);
    });
  }

  async #load(runId) {
    let newest;
    try {
      const { samples } = await api.listSamples(runId);
      newest = samples[samples.length - 1];
    } catch {
      return; // a deleted run, or the server restarting: the next follow asks again
    }
    if (!newest || runId !== this.runId || this.shown === `${runId}/${newest.name}`) return;
    try {
      const blob = await api.sampleBlob(runId, newest.name);
      if (runId !== this.runId) return;
      this.#clear();
      this.url = URL.createObjectURL(blob);
      this.audio.src = this.url;
      this.shown = `${runId}/${newest.name}`;
      this.caption.textContent = `Spoken sample at step ${newest.step}`;
      this.box.hidden = false;
    } catch {
      // the next follow tries again
    }
  }

  #clear() {
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    this.shown = null;
    this.audio.removeAttribute("src");
    this.box.hidden = true;
  }
}
