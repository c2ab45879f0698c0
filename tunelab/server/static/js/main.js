/**
 * The page's entry point: theme, token, and the wiring between the configure form, the
 * current run panel, the history and the comparison, and the sweeps. Nothing is fetched until a token
 * is known; a 401 anywhere asks for the token again. Who the token or key is comes first,
 * so every panel offers only what its role may do.
 */

import { adoptTokenFromUrl, api, forgetToken, getToken, newRequestId, onUnauthorized, setToken } from "./api.js";
import { setUpCommandPreview } from "./command-preview.js";
import { ComparePanel } from "./compare.js";
import { ConfigForm } from "./config-form.js";
import { downloadYaml, readYamlFile, withoutSecrets } from "./config-yaml.js";
import { setUpDatasetCheck } from "./dataset-check.js";
import { ExportDialog } from "./export-dialog.js";
import { HistoryPanel } from "./history.js";
import { setUpMemoryEstimate } from "./memory-estimate.js";
import { loadModelPicker } from "./model-picker.js";
import { DataPicker } from "./data-picker.js";
import { notify } from "./notice.js";
import { PlaygroundPanel } from "./playground.js";
import { QueuePanel } from "./queue-panel.js";
import { cannotUse, guard } from "./rights.js";
import { RunPanel } from "./run-panel.js";
import { signIn } from "./signed-in.js";
import { SweepsPanel } from "./sweeps.js";
import { setUpTheme } from "./theme.js";

const $ = (id) => document.getElementById(id);
const DRAFT_KEY = "tunelab.draft";

setUpTheme($("theme-toggle"));

const configForm = new ConfigForm($("config-form"));
const compare = new ComparePanel();
const playground = new PlaygroundPanel();
const exportDialog = new ExportDialog();
const dataPicker = new DataPicker();
const history = new HistoryPanel({
  onResumed: (answer) => runPanel.follow(answer),
  onCompare: (ids) => compare.show(ids),
  onChat: (run, withBase) => playground.open(run, withBase),
  onExport: (run) => exportDialog.open(run),
});
// A run that ends may be one to continue from: the Model list is refreshed with the history.
const runPanel = new RunPanel({ onRunChanged: () => { history.refresh(); queuePanel.refresh(); loadModelPicker(); } });
const queuePanel = new QueuePanel({ onChanged: () => history.refresh(), onWatch: (runId) => runPanel.watch(runId) });
const sweepsPanel = new SweepsPanel({ readBase: () => configForm.read(), onOpenRun: (id) => history.reveal(id) });

setUpDatasetCheck(configForm);
setUpCommandPreview(configForm);
// These read the form at once, so they wait for it: it is drawn when the server's schema of a run arrives.
configForm.ready.then(() => {
  setUpMemoryEstimate(configForm);
  setUpDraft();
});
setUpConfigFile();
setUpStart();
setUpToken();

/** The form survives a reload: its settings (never its secrets) are kept as a draft. */
function setUpDraft() {
  try {
    const draft = JSON.parse(localStorage.getItem(DRAFT_KEY) || "null");
    if (draft) configForm.write(draft);
  } catch {
    localStorage.removeItem(DRAFT_KEY);
  }
  $("config-form").addEventListener("input", saveDraft);
  $("config-form").addEventListener("change", saveDraft);
  $("reset-form").addEventListener("click", () => {
    configForm.reset();
    localStorage.removeItem(DRAFT_KEY);
  });
}

function saveDraft() {
  localStorage.setItem(DRAFT_KEY, JSON.stringify(withoutSecrets(configForm.read().config)));
}

function setUpConfigFile() {
  $("save-yaml").addEventListener("click", () => {
    const { config, errors } = configForm.read();
    if (errors.length) {
      configForm.showErrors(errors);
      return;
    }
    downloadYaml(config);
  });
  $("yaml-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    event.target.value = "";  // choosing the same file again should load it again
    if (!file) return;
    try {
      const unknown = configForm.write(await readYamlFile(file));
      saveDraft();
      if (unknown.length) {
        configForm.showErrors(unknown.map((key) => ({ field: key, message: "unknown setting in the file; it was not loaded" })));
      }
      notify(`Loaded ${file.name}.`);
    } catch (err) {
      notify(err.message, "error");
    }
  });
}

/** Every problem beside its field, and a notice that names the fields (the form may be long). */
function refuseStart(errors) {
  const named = configForm.showErrors(errors);
  const shown = named.length > 4 ? [...named.slice(0, 4), `${named.length - 4} more`] : named;
  notify(named.length === 1 ? `Not started: ${errors.map((e) => configForm.describe(e)).join("; ")}.`
    : `Not started: ${named.length} settings need fixing: ${shown.join(", ")}.`, "error");
}

/** Input the page cannot read, together with what the server finds in the rest. */
async function refuseUnreadable(config, errors) {
  try {
    await api.checkConfig(config);
    refuseStart(errors);
  } catch (err) {
    const unread = new Set(errors.map((e) => e.field));
    refuseStart([...errors, ...err.fields.filter((f) => !unread.has(f.field))]);
  }
}

function setUpStart() {
  // A start retried after a network failure reuses its request id, so the server
  // answers the run it may already have started instead of starting a second one.
  let pending = null;
  $("config-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (cannotUse()) return;  // a key that only reads: Start is disabled, saying why
    const { config, errors } = configForm.read();
    if (errors.length) {
      await refuseUnreadable(config, errors);
      return;
    }
    configForm.clearErrors();
    const body = JSON.stringify(config);
    if (!pending || pending.body !== body) pending = { body, id: newRequestId() };
    const button = $("start-run");
    button.disabled = true;
    try {
      const answer = await api.start(config, pending.id);
      pending = null;
      notify(answer.duplicate ? `Run #${answer.job_id} was already started.`
        : answer.queued ? `Run #${answer.job_id} waits for its devices: position ${answer.queue_position} in the queue.`
          : `Started run #${answer.job_id}.`);
      queuePanel.refresh();
      await runPanel.follow(answer);
      // On a phone the run panel lies below the form: bring it up to watch the run.
      const panel = $("current-run");
      if (panel.getBoundingClientRect().top > innerHeight) panel.scrollIntoView({ block: "start" });
    } catch (err) {
      if (err.code !== "network") pending = null;
      if (err.status === 422 && err.fields.length) refuseStart(err.fields);
      else if (err.status !== 401) notify(`Not started: ${err.message}`, "error");
    } finally {
      guard(button, cannotUse());
    }
  });
}

function setUpToken() {
  const dialog = $("token-dialog");
  const ask = (reason) => {
    $("token-reason").textContent = reason;
    $("token-input").value = "";
    if (!dialog.open) dialog.showModal();
  };
  dialog.addEventListener("close", () => {
    const token = $("token-input").value.trim();
    if (dialog.returnValue === "save" && token) {
      setToken(token);
      load();
    }
  });
  $("token-button").addEventListener("click", () => ask("Paste the API token printed by `tunelab serve` or `tunelab token`."));
  onUnauthorized(() => {
    forgetToken();
    ask("The server did not accept the API token. Paste the one printed by `tunelab serve` or `tunelab token`.");
  });
  adoptTokenFromUrl();
  if (getToken()) load();
  else ask("This page needs the server's API token. `tunelab serve` prints a link that carries it; `tunelab token` prints the token itself.");
}

/** Who is signed in first: the panels offer only what that role may do. */
async function load() {
  if (!(await signIn())) return;  // the token was refused: the token dialog asks again
  await configForm.ready;  // the panels name settings by the form's labels, and the pickers fill its fields
  for (const id of ["start-run", "check-dataset", "chat-send"]) guard($(id), cannotUse());
  runPanel.start();
  queuePanel.start();
  history.refresh();
  sweepsPanel.start();
  loadModelPicker();
  dataPicker.mount();
  if ($("data-upload-button")) guard($("data-upload-button"), cannotUse());
}
