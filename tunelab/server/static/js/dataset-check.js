/**
 * "Check dataset": sends the form's data fields to `/api/datasets/preview` and shows the
 * detected format, the columns, the row count and the first rows as the model will read
 * them — for image data also the image count and each shown image's thumbnail and size
 * (or why it cannot be read). Problems come back with the field at fault and are shown beside it.
 */

import { api } from "./api.js";
import { el } from "./dom.js";
import { cannotUse, guard } from "./rights.js";

// The fields the preview route takes (DatasetPreviewRequest in tunelab/server/schemas.py).
const PREVIEW_FIELDS = [
  "model_name", "training_type", "dataset", "local_datasets", "s3", "subset", "train_split",
  "slice_start", "slice_end", "format", "column_mapping", "role_mapping",
];
const PREVIEW_ROWS = 3;

export function setUpDatasetCheck(configForm) {
  const button = document.getElementById("check-dataset");
  const out = document.getElementById("dataset-preview");

  button.addEventListener("click", async () => {
    const { config, errors } = configForm.read();
    const bad = errors.filter((e) => PREVIEW_FIELDS.includes(e.field.split(".")[0]));
    if (bad.length) {
      configForm.showErrors(bad);
      return;
    }
    const request = { rows: PREVIEW_ROWS };
    for (const key of PREVIEW_FIELDS) if (config[key] !== undefined) request[key] = config[key];
    configForm.clearErrors();
    out.hidden = false;
    out.replaceChildren(el("p", "muted", "Reading the dataset…"));
    button.disabled = true;
    try {
      out.replaceChildren(...render(await api.previewDataset(request)));
    } catch (err) {
      out.replaceChildren(el("p", "preview-error", `Cannot read the dataset: ${err.message}`));
      if (err.fields.length) configForm.showErrors(err.fields);
    } finally {
      guard(button, cannotUse());
    }
  });
}

function render(preview) {
  const facts = el("dl", "preview-facts");
  const fact = (label, value, id) => {
    const wrap = el("div");
    const dd = el("dd", "", value);
    if (id) dd.id = id;
    wrap.append(el("dt", "", label), dd);
    facts.append(wrap);
  };
  fact("Detected format", preview.format, "preview-format");
  fact("Rows", preview.row_count === null ? "unknown (streaming)" : preview.row_count.toLocaleString("en-US"), "preview-rows");
  if (preview.image_count != null) fact("Images", preview.image_count.toLocaleString("en-US"), "preview-images");
  if (preview.bad_image_rows) {
    const of = preview.image_rows_checked < preview.row_count ? ` (of the first ${preview.image_rows_checked.toLocaleString("en-US")})` : "";
    fact("Rows with a bad image", `${preview.bad_image_rows.toLocaleString("en-US")}${of}: training stops on them unless skip_bad_images is on`, "preview-bad-images");
  }
  if (preview.bad_audio_rows) {
    const of = preview.audio_rows_checked < preview.row_count ? ` (of the first ${preview.audio_rows_checked.toLocaleString("en-US")})` : "";
    fact("Rows with a bad clip", `${preview.bad_audio_rows.toLocaleString("en-US")}${of}: training stops on them unless skip_bad_audio is on`, "preview-bad-audio");
  }
  fact("Columns", preview.columns.join(", "), "preview-columns");
  fact("Rendered with", preview.rendered_with === "chat_template" ? "the model's chat template" : "plain text");
  const rows = el("ol", "preview-rows");
  for (const row of preview.rows) {
    const item = el("li");
    item.append(el("p", "muted", `Row ${row.index}`));
    if (row.images && row.images.length) item.append(imageStrip(row.images));
    item.append(el("pre", "preview-text", row.text));
    rows.append(item);
  }
  return [facts, el("h4", "", `First ${preview.rows.length} rows as the model reads them`), rows];
}

function imageStrip(images) {
  const strip = el("div", "preview-images");
  for (const image of images) {
    const figure = el("figure", "preview-image");
    if (image.thumbnail) {
      const img = el("img");
      img.src = image.thumbnail;
      img.alt = image.name;
      figure.append(img, el("figcaption", "muted", `${image.width}×${image.height}`));
    } else {
      figure.append(el("figcaption", "preview-error", `${image.name}: ${image.error}`));
    }
    figure.title = image.name;
    strip.append(figure);
  }
  return strip;
}
