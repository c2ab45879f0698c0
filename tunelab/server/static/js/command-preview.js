/**
 * "Preview command": the form as the `tunelab train` config file and command that start
 * the same run from a terminal, each copyable. The YAML is the one "Save YAML" writes
 * (config-yaml.js), so the preview, the saved file and the form never disagree; the
 * server checks the config as a start would and says whether it would be accepted.
 */

import { api } from "./api.js";
import { configToYaml, yamlFileName } from "./config-yaml.js";
import { notify } from "./notice.js";

const $ = (id) => document.getElementById(id);

/** A shell snippet that writes the file and starts the run: one paste in a terminal. */
function shellSnippet(config, yaml) {
  const file = `./${yamlFileName(config)}`;
  return `cat > ${file} <<'TUNELAB_CONFIG'\n${yaml}TUNELAB_CONFIG\ntunelab train ${file}`;
}

async function copy(text, what) {
  try {
    await navigator.clipboard.writeText(text);
    notify(`Copied the ${what}.`);
  } catch {
    // No clipboard (plain http on a LAN address, or refused): the YAML is selected for Ctrl+C.
    const range = document.createRange();
    range.selectNodeContents($("command-yaml"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    notify(`The browser would not copy the ${what}; the YAML is selected: press Ctrl+C.`, "error");
  }
}

export function setUpCommandPreview(configForm) {
  const dialog = $("command-dialog");
  let snippet = "";
  let yaml = "";

  $("preview-command").addEventListener("click", async () => {
    const { config, errors } = configForm.read();
    if (errors.length) {
      configForm.showErrors(errors);
      return;
    }
    yaml = configToYaml(config);
    snippet = shellSnippet(config, yaml);
    $("command-line").textContent = `tunelab train ./${yamlFileName(config)}`;
    $("command-yaml").textContent = yaml;
    const verdict = $("command-check");
    verdict.textContent = "Checking the config…";
    delete verdict.dataset.verdict;
    dialog.showModal();
    try {
      await api.checkConfig(config);
      verdict.textContent = "The server accepts this config.";
      verdict.dataset.verdict = "ok";
    } catch (err) {
      verdict.textContent = err.fields.length
        ? `A start would be refused: ${err.fields.map((f) => `${configForm.labelOf(f.field)}: ${f.message}`).join("; ")}`
        : `Not checked: ${err.message}`;
      verdict.dataset.verdict = "refused";
    }
  });
  $("copy-command").addEventListener("click", () => copy(snippet, "file and command"));
  $("copy-yaml").addEventListener("click", () => copy(yaml, "YAML"));
}
