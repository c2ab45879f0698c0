/**
 * "Will it fit?": while the configure form changes, asks `/api/memory/estimate` (debounced,
 * latest answer wins) and shows the estimated peak memory per device, its terms, and
 * whether a start would fit this machine's GPU (or RAM), be adjusted (memory_fit=auto)
 * or be refused, and the model's own code files with their fingerprint (for
 * approved_remote_code_fingerprint). Without a model name there is nothing to estimate and the panel hides.
 */

import { api, getToken } from "./api.js";
import { el } from "./dom.js";

const DEBOUNCE_MS = 400;
const GIB = 2 ** 30;

const gib = (bytes) => `${(bytes / GIB).toFixed(bytes < GIB ? 3 : 2)} GiB`;

export function setUpMemoryEstimate(configForm) {
  const panel = document.getElementById("memory-estimate");
  let timer = null;
  let asked = 0;

  const refresh = async () => {
    const { config } = configForm.read();
    if (!config.model_name || !getToken()) {  // nothing is fetched until a token is known
      panel.hidden = true;
      return;
    }
    const mine = ++asked;
    try {
      const answer = await api.estimateMemory(config);
      if (mine === asked) render(panel, answer);
    } catch (err) {
      if (mine !== asked) return;
      const fields = (err.fields || []).map((f) => configForm.describe(f));
      panel.hidden = false;
      panel.replaceChildren(el("h3", "", "Memory estimate"),
        el("p", "muted", fields.length ? fields.join("; ") : `No estimate: ${err.message}`));
    }
  };
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, DEBOUNCE_MS);
  };
  configForm.form.addEventListener("input", later);
  configForm.form.addEventListener("change", later);
  later();
}

function render(panel, answer) {
  const where = answer.per_device.devices > 1 ? ` per device (${answer.per_device.devices} ranks, ${answer.per_device.strategy.toUpperCase()})` : " per device";
  const title = el("h3", "", `Memory estimate: ${gib(answer.total_bytes)}${where}`);
  title.id = "memory-total";
  const terms = el("dl", "memory-terms");
  for (const term of answer.terms) {
    const row = [el("dt", "", term.name), el("dd", "", gib(term.bytes)), el("dd", "muted", term.note)];
    row[0].dataset.term = term.name;
    terms.append(...row);
  }
  const parts = [title, terms];
  const device = answer.device;
  if (device) {
    const text = device.verdict === "fits" ? `Fits: ${device.where} has ${gib(device.free_bytes)} free.` : device.message;
    const verdict = el("p", "memory-verdict", text);
    verdict.dataset.verdict = device.verdict;
    verdict.id = "memory-verdict";
    parts.push(verdict);
  }
  for (const note of answer.notes) parts.push(el("p", "muted", note));
  parts.push(...remoteCode(answer.remote_code));
  panel.hidden = false;
  panel.replaceChildren(...parts);
}

// The model's own code files (what trust_remote_code would run) and their fingerprint, to
// review before approving exactly them with approved_remote_code_fingerprint.
function remoteCode(code) {
  if (!code || !code.files.length) return [];
  const files = el("dl", "memory-terms");
  files.id = "remote-code-files";
  for (const file of code.files) files.append(el("dt", "", file.name), el("dd", "muted", file.sha256));
  const fingerprint = el("p", "", `Fingerprint: ${code.fingerprint}`);
  fingerprint.id = "remote-code-fingerprint";
  return [el("h3", "", "The model's own code"), files, fingerprint, el("p", "muted", code.note)];
}
