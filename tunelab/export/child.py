"""The heavy half of an export, run as `python -m tunelab.export.child REQUEST.json` in a
short-lived process so the CLI and the server never import torch.

`merged`: an adapter run's base model (the stored `model_name`) is loaded, the adapter
applied with PEFT and folded into the weights (PEFT's merge, in float32 per layer); a
base stored quantised is refused, and a LoftQ run's adapted layers are first put back
as it trained against them (`run_facts.LOFTQ_BASE`). A full run's weights are loaded as
they are. The model is cast to the requested dtype and saved with its tokenizer, ready
for `AutoModelForCausalLM.from_pretrained` — or, for a vision-language or speech-to-text
model (told from its config), with its processor, ready for `AutoModelForImageTextToText`
or `AutoModelForSpeechSeq2Seq` (and the automatic-speech-recognition pipeline, which transcribes
with the language and task the run trained on: `speech_prefix.carry_to_generation`) + `AutoProcessor`
(an audio chat model: `AutoModelForMultimodalLM`); a Sesame CSM model as
`CsmForConditionalGeneration` (its Mimi codec inside) + its `CsmProcessor`.
The parent hides the GPUs: all of it runs on the CPU (and a training worker calling
`export` in its own process, where the GPUs stay visible, gets the same CPU-only loads).
`gguf`: the same merged model, written as one GGUF file by llama.cpp's converter and,
for a k-quant, quantised by llama.cpp (`gguf_convert`, `gguf_quantize`), with an Ollama
Modelfile (`modelfile`). `gguf-adapter`: a LoRA run's adapter alone as a GGUF (`gguf_adapter`).
The answer goes to the request's `result` file: `{"ok": true}` or `{"error", "field"?}`;
exit code 0 on success, 2 for an option that cannot be honoured, 1 for anything else.
"""

from __future__ import annotations

import json
import shutil
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

from tunelab.export.codec import carry_codec, note_builtin_codec
from tunelab.export.plan import ExportError, ExportFailed, ExportInputError


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    result_file = Path(request["result"])
    try:
        export(request)
    except ExportError as exc:
        result_file.write_text(json.dumps({"error": str(exc), "field": exc.field}))
        return 2 if exc.field else 1
    except Exception as exc:  # noqa: BLE001 - any failure becomes a message for the parent
        traceback.print_exc()
        result_file.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    result_file.write_text(json.dumps({"ok": True}))
    return 0


def export(request: dict[str, Any]) -> None:
    _quiet_libraries()
    dest = Path(request["dest"])
    if request["format"] == "gguf":
        _export_gguf(request, dest)
    elif request["format"] == "gguf-adapter":
        _export_gguf_adapter(request, dest)
    else:
        from tunelab.worker.families.speech.prefix import carry_to_generation

        model, processing = _merged_model(request)
        # The run trained without the KV cache; whoever loads the export wants it back.
        model.config.use_cache = True
        # A speech-to-text run's transcripts' language, from the tokenizer saved with it (an adapter's base knows nothing of it).
        carry_to_generation(model, processing)
        model.save_pretrained(dest)
        processing.save_pretrained(dest)
        carry_codec(Path(request["source"]), dest)
        note_builtin_codec(dest)


def _quiet_libraries() -> None:
    from tunelab.worker.bnb_import import import_bitsandbytes

    import_bitsandbytes()  # before peft imports it (see bnb_import.py)
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _dtype(name: str) -> Any:
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def _model_class(config_source: str, remote_code: bool) -> Any:
    """The class the model's family spec names (told from its config, as the worker tells it)."""
    import transformers

    from tunelab import families

    config = transformers.AutoConfig.from_pretrained(config_source, trust_remote_code=remote_code)
    spec = families.detect(families.ModelFiles(config=config.to_dict(), transformers=True, model_config=config))
    return getattr(transformers, spec.auto_class)


def _processing(source: str, remote_code: bool) -> Any:
    """The run's processor where it saved one (a vision-language run), else its tokenizer."""
    from transformers import AutoTokenizer

    from tunelab.worker.families.vision.model import auto_processor
    from tunelab.worker.run_config import model_reference

    if any((Path(source) / name).is_file() for name in ("processor_config.json", "preprocessor_config.json")):
        return auto_processor(model_reference(source, trust_remote_code=remote_code))
    return AutoTokenizer.from_pretrained(source, trust_remote_code=remote_code)


def _merged_model(request: dict[str, Any]) -> tuple[Any, Any]:
    source = request["source"]
    remote_code = bool(request["trust_remote_code"])
    dtype = _dtype(request["dtype"])
    model_class = _model_class(request["base_model"] if request["kind"] == "adapter" else source, remote_code)
    if request["kind"] == "adapter":
        from peft import PeftModel

        _refuse_quantized_base(request["base_model"], remote_code)
        # The base loads in the dtype it was saved in: exact, and no larger than on disk.
        base = model_class.from_pretrained(request["base_model"], dtype="auto", trust_remote_code=remote_code)
        if request.get("base_weights"):
            _use_trained_against_weights(base, request["base_weights"])
        # torch_device: PEFT would load the adapter onto cuda:0 when it sees one; the merge is
        # a CPU job (the parent hides the GPUs from the child; a training worker cannot).
        model = _merge_in_float32(PeftModel.from_pretrained(base, source, torch_device="cpu"), dtype)
    else:
        model = model_class.from_pretrained(source, dtype="auto", trust_remote_code=remote_code)
    model = model.to(dtype)
    model.eval()
    return model, _processing(source, remote_code)


def _use_trained_against_weights(base: Any, path: str) -> None:
    """Put back the adapted layers as a LoftQ adapter was trained against them; merged into
    the original weights it would be off by LoftQ's quantisation error."""
    from safetensors.torch import load_file

    result = base.load_state_dict(load_file(path), strict=False)
    if result.unexpected_keys:
        raise ExportFailed(f"{path} holds weights the base model does not have ({', '.join(result.unexpected_keys[:3])}); "
                           "was the run trained on another base?")


def _refuse_quantized_base(base_model: str, remote_code: bool) -> None:
    """An adapter merged into already-quantised weights is rounded away; QLoRA runs on a
    16-bit base are fine, as the base is loaded here in 16 bits, not as they trained."""
    from transformers import AutoConfig

    quantization = getattr(AutoConfig.from_pretrained(base_model, trust_remote_code=remote_code), "quantization_config", None)
    if quantization:
        method = quantization.get("quant_method", "quantised") if isinstance(quantization, dict) else "quantised"
        raise ExportInputError("format", f"the base model {base_model} is stored {method}-quantised, and merging an adapter into "
                                         "quantised weights would round it away; export format adapter (and load it on that base), "
                                         "or train against a 16-bit copy of the base to export merged weights")


def _merge_in_float32(peft_model: Any, dtype: Any) -> Any:
    """Fold the adapter into the base, one layer at a time in float32, so each merged
    weight is rounded once, into the export dtype; only one layer is float32 at a time."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in peft_model.modules():
        if isinstance(module, BaseTunerLayer):
            layer = module.get_base_layer()
            layer.to(torch.float32)
            module.merge()
            layer.to(dtype)
    # Every layer is merged already; unloading only removes the adapter wrappers.
    return peft_model.unload()


def _export_gguf(request: dict[str, Any], dest: Path) -> None:
    """The merged model saved as a Hugging Face folder, turned into GGUF by llama.cpp's
    converter (float types and q8_0), then by llama.cpp's quantizer for a k-quant; an
    Ollama Modelfile beside it."""
    from transformers import AutoConfig

    from tunelab.export import gguf_convert, gguf_quantize

    remote_code = bool(request["trust_remote_code"])
    config_source = request["base_model"] if request["kind"] == "adapter" else request["source"]
    # Refuse an architecture the converter lacks before spending time on the weights.
    gguf_convert.architecture_of(AutoConfig.from_pretrained(config_source, trust_remote_code=remote_code).to_dict())
    quant = request.get("quant")
    float_type = GGUF_FLOAT_TYPES[request["dtype"]]
    out_file = dest / f"model-{quant or float_type}.gguf"
    name = f"{Path(request['base_model']).name or request['base_model']} (tunelab run {request['run_id']})"
    model, processing = _merged_model(request)
    # Hidden working files inside the staging folder: on the export's disk, and removed with it on failure.
    merged_dir = dest / ".merged"
    model.config.use_cache = True
    model.save_pretrained(merged_dir)
    processing.save_pretrained(merged_dir)
    del model
    if quant in gguf_quantize.K_QUANTS:
        unquantised = gguf_convert.convert(merged_dir, dest / f".model-{float_type}.gguf", float_type, name)
        gguf_quantize.quantize(unquantised, out_file, quant)
        unquantised.unlink()
    else:
        gguf_convert.convert(merged_dir, out_file, quant or float_type, name)
    _write_modelfile(dest, out_file.name, processing, request["run_id"])
    shutil.rmtree(merged_dir)


GGUF_FLOAT_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _export_gguf_adapter(request: dict[str, Any], dest: Path) -> None:
    """The run's LoRA adapter alone as a GGUF (`gguf_adapter`), with a Modelfile applying
    it to the base model."""
    from tunelab.export import gguf_adapter

    base = request["base_model"]
    name = f"{Path(base).name or base} LoRA (tunelab run {request['run_id']})"
    out = gguf_adapter.convert_adapter(Path(request["source"]), _local_folder(base), dest / "adapter.gguf", name)
    _write_modelfile(dest, out.name, _processing(request["source"], bool(request["trust_remote_code"])), request["run_id"], base=base)


def _local_folder(model: str) -> Path:
    """The folder holding `model`: itself, or its copy in the Hugging Face cache (offline)."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, local_files_only=True))


def _write_modelfile(dest: Path, gguf_name: str, processing: Any, run_id: int, base: str | None = None) -> None:
    from tunelab.export import modelfile

    tokenizer = getattr(processing, "tokenizer", processing)  # a processor holds the tokenizer

    def render(messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    pieces = modelfile.turn_pieces(render) if getattr(tokenizer, "chat_template", None) else None
    stops = modelfile.stop_tokens(pieces, tokenizer.eos_token, list(tokenizer.all_special_tokens))
    (dest / modelfile.NAME).write_text(modelfile.modelfile_text(gguf_name, pieces, stops, run_id, base))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
