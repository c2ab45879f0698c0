/**
 * A text-to-speech run's spoken samples in the history: a fold-out "Spoken samples" that
 * lists every samples/step-N.wav its evals wrote (GET /api/runs/{id}/samples: step, name,
 * size), oldest step first, each playable in place, and all of them as one zip. The wav
 * files sit behind the token, which an <audio src> cannot send, so each is fetched when
 * first played and handed to its player as an object URL. The list is read when the
 * fold-out opens (and again on each opening: a training run adds one per eval), never
 * for rows nobody looks at.
 */

import { api } from "./api.js";
import { formatBytes, fmtInt } from "./format.js";
import { notify } from "./notice.js";
import { button, el } from "./dom.js";

/** Hand the browser a blob as a file named `name`. */
function save(blob, name) {
  const link = el("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

function sampleRow(run, name, sample) {
  const row = el("li", "run-sample");
  row.dataset.step = String(sample.step);
  const audio = el("audio");
  audio.controls = true;
  audio.hidden = true;
  audio.setAttribute("aria-label", `Spoken sample of ${name} at step ${sample.step}`);
  const play = button(`Play step ${fmtInt(sample.step)}`, "quiet", `Play the sample of ${name} at step ${sample.step}`, async () => {
    play.disabled = true;
    try {
      const blob = await api.sampleBlob(run.id, sample.name);
      audio.src = URL.createObjectURL(blob);
      audio.hidden = false;
      play.hidden = true;
      await audio.play().catch(() => {}); // autoplay may be refused; the controls are there
    } catch (err) {
      play.disabled = false;
      notify(`Cannot load ${sample.name} of ${name}: ${err.message}`, "error");
    }
  });
  row.append(el("span", "run-sample-step", `Step ${fmtInt(sample.step)}`), play, audio,
             el("span", "run-sample-file", `${sample.name} · ${formatBytes(sample.size_bytes)}`));
  return row;
}

export function samplesSection(run, name) {
  const details = el("details", "run-samples");
  const summary = el("summary", "", "Spoken samples");
  const body = el("div", "run-samples-body");
  details.append(summary, body);
  details.addEventListener("toggle", async () => {
    if (!details.open) return;
    let samples;
    try {
      ({ samples } = await api.listSamples(run.id));
    } catch (err) {
      body.replaceChildren(el("p", "run-error-line", `Cannot list the samples: ${err.message}`));
      return;
    }
    summary.textContent = `Spoken samples (${samples.length})`;
    if (!samples.length) {
      body.replaceChildren(el("p", "help", "No spoken samples: a text-to-speech run speaks one at each eval (Eval every > 0)."));
      return;
    }
    const list = el("ul", "run-sample-list");
    list.append(...samples.map((sample) => sampleRow(run, name, sample)));
    const all = button("Download all (.zip)", "quiet", `Download every spoken sample of ${name}`, async () => {
      try {
        save(await api.samplesZipBlob(run.id), `run-${run.id}-samples.zip`);
      } catch (err) {
        notify(`Cannot download the samples of ${name}: ${err.message}`, "error");
      }
    });
    body.replaceChildren(list, all);
  });
  return details;
}
