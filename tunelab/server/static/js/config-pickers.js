/**
 * The form's two pickers that stand for several run settings at once: the method (a
 * training type, and for LoRA variants the switch that makes one) and the data source
 * (which of the data fields are shown). They are the page's own choices, so they live
 * here rather than in the server's description of a run (config-fields.js).
 */

export const METHODS = [
  { value: "lora", label: "LoRA", help: "Small trainable adapter on a frozen model. The usual choice." },
  { value: "qlora", label: "QLoRA", help: "LoRA on a 4-bit model: least memory. Needs a CUDA GPU." },
  { value: "dora", label: "DoRA", help: "LoRA that also learns weight magnitudes; a little slower, often a little better." },
  { value: "rslora", label: "rsLoRA", help: "LoRA with rank-stabilised scaling; helps at high ranks." },
  { value: "loftq", label: "LoftQ", help: "LoRA initialised to offset quantisation error." },
  { value: "full", label: "Full fine-tuning", help: "Trains every weight: most memory, no adapter." },
  { value: "continued_pretraining", label: "Continued pretraining", help: "Full training on raw text to teach the model a domain." },
];

/** Method -> the RunConfig fields that express it. */
export const METHOD_SETTINGS = {
  lora: { training_type: "lora" },
  qlora: { training_type: "qlora" },
  dora: { training_type: "lora", use_dora: true },
  rslora: { training_type: "lora", use_rslora: true },
  loftq: { training_type: "lora", use_loftq: true },
  full: { training_type: "full" },
  continued_pretraining: { training_type: "continued_pretraining" },
};

/** RunConfig fields the form expresses through the method picker rather than inputs. */
export const METHOD_FIELDS = [...new Set(Object.values(METHOD_SETTINGS).flatMap(Object.keys))];

export const ADAPTER_METHODS = new Set(["lora", "qlora", "dora", "rslora", "loftq"]);

/** Where a dataset comes from; each source shows only its own fields. */
export const DATA_SOURCES = [
  { value: "local", label: "Local files" },
  { value: "hub", label: "Hugging Face hub" },
  { value: "s3", label: "S3" },
];
