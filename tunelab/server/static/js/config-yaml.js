/**
 * Saving the form's config as a YAML file and loading one back (the same files
 * `tunelab train CONFIG` reads). Secrets are left out of saved files on purpose: a
 * config file gets shared and committed; tokens should not travel with it.
 */

import { dump, load } from "../vendor/js-yaml.esm.min.js";

const SECRET_KEYS = ["hf_token", "wandb_token"];
const S3_SECRET_KEYS = ["access_key_id", "secret_access_key", "session_token"];

/** A copy of the config with every secret removed. */
export function withoutSecrets(config) {
  const copy = structuredClone(config);
  for (const key of SECRET_KEYS) delete copy[key];
  if (copy.s3) for (const key of S3_SECRET_KEYS) delete copy.s3[key];
  return copy;
}

/** The config as YAML text, without secrets. */
export function configToYaml(config) {
  return dump(withoutSecrets(config), { lineWidth: -1 });
}

/** The file name a config is saved under: the run's name, made safe for a file system and a shell. */
export function yamlFileName(config) {
  return `${(config.display_name || "tunelab-config").replace(/[^A-Za-z0-9._-]+/g, "-")}.yaml`;
}

/** Offer the config as a download named after the run. */
export function downloadYaml(config) {
  const blob = new Blob([configToYaml(config)], { type: "application/yaml" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = yamlFileName(config);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

/** Parse a YAML (or JSON, which is YAML) file into a config mapping, or throw a readable Error. */
export async function readYamlFile(file) {
  const text = await file.text();
  let data;
  try {
    data = load(text);
  } catch (err) {
    throw new Error(`${file.name} is not valid YAML: ${err.message.split("\n")[0]}`);
  }
  if (data === null || data === undefined) return {};
  if (typeof data !== "object" || Array.isArray(data)) {
    throw new Error(`${file.name} must hold a mapping of setting: value`);
  }
  return data;
}
