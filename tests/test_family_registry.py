"""The family registry (tunelab/families): every family told from real config.json shapes,
by the parent (the raw files, torch-free) and by the child (through transformers), in the
registry's precedence, never by the model's name; and the registry imports no heavy library.

The folders hold what transformers' own config classes write (`save_pretrained`), plus the
files detection reads beside them: a tokenizer.json with Orpheus's audio tokens, and
sentence-transformers' modules.json. No weights are needed to tell a family.
"""

from __future__ import annotations

import importlib
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from typed_config import typed

import tunelab
from tunelab import events, families
from tunelab.cli import demo
from tunelab.families import tts
from tunelab.families.local_files import local_files
from tunelab.orchestrator.prechecks import mlx_model_problem


def _folder(root: Path, name: str, config: object, **extra: object) -> Path:
    """A model folder named `name` holding `config`'s config.json (with `extra` keys added)."""
    folder = root / name
    config.save_pretrained(folder)
    if extra:
        written = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**written, **extra}))
    return folder


def _orpheus_tokenizer(folder: Path) -> None:
    """The part of a tokenizer.json detection reads: Orpheus's whole audio range among the added tokens."""
    count = tts.AUDIO_BASE + tts.FRAME * tts.ORPHEUS_CODEBOOK_SIZE
    tokens = [{"id": 128256 + n, "content": tts.token_name(n), "special": True} for n in range(count)]
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": tokens}))


def _sentence_transformers(folder: Path) -> None:
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))


def _llama():
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       architectures=["LlamaForCausalLM"])


def _models(root: Path) -> dict[str, tuple[Path, str, str]]:
    """name -> (folder, the family the parent tells, the family the child tells). Each folder's
    name is another family's, so a name-based guess would be wrong."""
    from transformers import BertConfig, CsmConfig, LlavaConfig, Qwen2AudioConfig, WhisperConfig

    made = {
        "text": (_folder(root, "whisper-tiny", _llama()), "text", "text"),
        "vision": (_folder(root, "llama-3-8b", LlavaConfig()), "vision", "vision"),
        "speech": (_folder(root, "qwen2-vl", WhisperConfig()), "speech", "speech"),
        "audio_chat": (_folder(root, "bge-small", Qwen2AudioConfig()), "audio_chat", "audio_chat"),
        "csm": (_folder(root, "orpheus-3b", CsmConfig()), "csm", "csm"),
        "tts-marker": (_folder(root, "sesame-csm", _llama(), tunelab_tts={"codec": "snac", "codebook_size": 4096}), "tts", "tts"),
        "tts-tokens": (_folder(root, "llama-tokens", _llama()), "tts", "tts"),
        # A sentence-transformers folder is an embedding model to both; a bare BERT encoder
        # only to the child, which reads transformers' mappings (the parent has no transformers).
        "embedding-st": (_folder(root, "gpt2-st", BertConfig(architectures=["BertModel"])), "embedding", "embedding"),
        "embedding-encoder": (_folder(root, "gpt2-encoder", BertConfig(architectures=["BertForMaskedLM"])), "text", "embedding"),
    }
    _orpheus_tokenizer(made["tts-tokens"][0])
    _sentence_transformers(made["embedding-st"][0])
    return made


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, str]]:
    return _models(tmp_path_factory.mktemp("families"))


def test_the_registry_imports_no_heavy_library_and_the_parent_checks_no_worker_module():
    code = ("import sys, tunelab.families, tunelab.events, tunelab.orchestrator.prechecks, tunelab.export.gguf_fit, "
            "tunelab.server.app; "
            "heavy = sorted(m for m in ('torch', 'transformers', 'mlx') if m in sys.modules); "
            "worker = sorted(m for m in sys.modules if m.startswith('tunelab.worker')); "
            "assert not heavy and not worker, (heavy, worker)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["text", "vision", "speech", "audio_chat", "csm", "tts-marker", "tts-tokens",
                                  "embedding-st", "embedding-encoder"])
def test_each_family_is_told_from_its_files_by_parent_and_child(models, name):
    from tunelab.worker.families import registry

    folder, parent, child = models[name]
    assert families.detect(local_files(str(folder))).name == parent
    assert registry.family_spec(typed({"model_name": str(folder)})).name == child
    trained = type(registry.detect(typed({"model_name": str(folder)})))
    assert trained.__name__ == {"text": "TextFamily", "vision": "VisionFamily", "speech": "SpeechFamily", "tts": "TtsFamily",
                                "csm": "CsmFamily", "audio_chat": "AudioChatFamily", "embedding": "EmbeddingFamily"}[child]
    # The mlx backend refuses every family but text before the run exists, in the family's words.
    problem = mlx_model_problem(str(folder))
    if parent == "text":
        assert problem is None
    else:
        assert problem == f"{folder} {families.get(parent).refusal}" and problem.endswith("use backend=torch")


def test_precedence_decides_between_families_whose_tests_both_pass(tmp_path):
    from transformers import CsmConfig, Gemma3nConfig, LlavaConfig, VoxtralConfig

    from tunelab.worker.families import registry

    cases = {
        # CSM's config also passes the text-to-speech test: csm is asked first.
        "csm": _folder(tmp_path, "csm-marked", CsmConfig(), tunelab_tts={"codec": "snac", "codebook_size": 4096}),
        # Voxtral has an audio encoder beside a language model (audio chat's shape) but maps to
        # AutoModelForSpeechSeq2Seq: speech is asked first.
        "speech": _folder(tmp_path, "voxtral", VoxtralConfig()),
        # Seeing and listening (Gemma 3n) is vision-language, not audio chat.
        "vision": _folder(tmp_path, "gemma3n", Gemma3nConfig()),
        # A vision-language sentence-transformers folder is vision: embedding is asked after it.
        "vision-st": _folder(tmp_path, "llava-st", LlavaConfig()),
    }
    _sentence_transformers(cases["vision-st"])
    raw = json.loads((cases["speech"] / "config.json").read_text())
    assert families.audio_chat.config_dict_is_audio_chat({**raw, "model_type": "qwen2_audio"})  # it would pass alone
    for want, folder in cases.items():
        want = want.removesuffix("-st")
        assert families.detect(local_files(str(folder))).name == want, folder
        assert registry.family_spec(typed({"model_name": str(folder)})).name == want, folder


def test_an_unreadable_config_is_text_to_the_parent_and_the_mlx_check_leaves_it_to_the_worker(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    assert families.detect(local_files(str(tmp_path))) is families.DEFAULT
    assert mlx_model_problem(str(tmp_path)) is None


def test_the_registry_holds_each_family_once_and_the_house_reads_it():
    names = [spec.name for spec in families.all()]
    assert sorted(names) == sorted(spec.name for spec in families.DETECTION) and len(set(names)) == len(names) == 7
    assert families.DETECTION[-1] is families.DEFAULT  # text: what every other test leaves
    assert [families.get(name) for name in names] == list(families.all())
    with pytest.raises(KeyError, match="the families are text, vision"):
        families.get("diffusion")
    assert events.MODALITIES == families.modalities() == ("text", "vision", "embedding", "speech", "tts", "audio_chat")
    assert demo.MODALITIES == ("text", "vision", "embedding", "speech", "tts") and demo.TTS_FAMILIES == ("orpheus", "csm")
    assert families.by_modality("tts") is families.tts.SPEC and families.by_modality("nonsense") is None
    for spec in families.all():
        assert spec.trains_with("torch")
        assert spec.trains_with("mlx") == (spec is families.DEFAULT)
        assert spec.backend_refusal("m", "mlx") == (None if spec is families.DEFAULT else f"m {spec.refusal}")


def test_every_spec_names_a_class_transformers_has_and_a_setting_the_config_has():
    import transformers

    from tunelab.config.run_config import RunConfig

    for spec in families.all():
        assert hasattr(transformers, spec.auto_class), spec.name
        assert set(spec.settings) <= set(RunConfig.model_fields), spec.name
        # The modules a spec names by dotted path (imported only where used) have what their callers call.
        for module, members in ((spec.demo_builder, ("demo_run_config",)), (spec.processor, ("load_processor", "eval_rows")),
                                (spec.speaker, ("speak",))):
            assert module is None or all(hasattr(importlib.import_module(module), m) for m in members), (spec.name, module)
        assert (spec.demo is None) == (spec.demo_builder is None), spec.name
    assert {(m, t): demo.demo_spec(m, t).name for m, t in (("text", "orpheus"), ("tts", "orpheus"), ("tts", "csm"))} == {
        ("text", "orpheus"): "text", ("tts", "orpheus"): "tts", ("tts", "csm"): "csm"}


def test_the_mlx_worker_refuses_a_family_the_start_checks_could_not_tell(models):
    """A bare encoder passes the parent's checks (it has no sentence-transformers files), and
    the mlx worker refuses it before loading, naming the backend, in the family's words."""
    pytest.importorskip("mlx.core")
    from tunelab.worker.backends.mlx.train import _load_model
    from tunelab.worker.context import RunSettingError

    folder = models["embedding-encoder"][0]
    assert mlx_model_problem(str(folder)) is None
    with pytest.raises(RunSettingError) as refused:
        _load_model(typed({"model_name": str(folder)}))
    assert refused.value.field == "backend" and refused.value.message == f"{folder} {families.embedding.SPEC.refusal}"


def test_the_pages_run_rules_are_the_specs():
    """GET /api/models/families (the history's rules: who speaks, which runs have no chat or
    evaluation, and why) answers from the specs; the browser tests read it on a real page."""
    from tunelab.server.routes_models import list_families

    answer = {f.name: f for f in list_families().families}
    assert list(answer) == [spec.name for spec in families.all()]
    assert answer["tts"].serves == answer["csm"].serves == "speak" and answer["csm"].modality == "tts"
    assert answer["embedding"].no_chat.startswith("An embedding model answers with vectors") and answer["embedding"].no_eval
    assert answer["speech"].no_chat and not answer["speech"].no_eval and answer["speech"].evaluates
    assert not any(answer[name].no_chat or answer[name].no_eval for name in ("text", "vision", "audio_chat"))
    assert answer["vision"].media == "image" and answer["audio_chat"].media == "audio" and answer["text"].backends == ["torch", "mlx"]


# Where code may name the csm family: its own folder, spec and demo, and one line in each
# registry (the import and the entry in worker/families/registry.py; the import and the two
# tuples in families/__init__.py). Anything else naming it is a family chain outside the family.
CSM_OWN = ("worker/families/csm/", "families/csm.py", "demos/csm.py")
CSM_REGISTRY_LINES = {"worker/families/registry.py": 2, "families/__init__.py": 3}


def _words(identifier: str) -> list[str]:
    """An identifier's words, lower-cased: CsmFamily -> csm, family; is_csm_model -> is, csm, model."""
    return [part.lower() for part in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", identifier)]


def _code_naming(source: str, suffix: str, name: str = "csm") -> list[int]:
    """The lines of `source` whose code names `name`: in Python an identifier holding it as a
    word (any case: CsmFamily, is_csm_model; not MetricsMixin) or a string other than a docstring holding it as a
    lower-case word ("csm", a dotted module path); in JavaScript, HTML and CSS the word outside
    // comments. Comments, docstrings and prose ("Sesame CSM") are not code."""
    word = re.compile(rf"\b{name}\b")
    if suffix != ".py":
        return [n for n, line in enumerate(source.splitlines(), 1)
                if not line.lstrip().startswith(("*", "/*")) and word.search(line.split("//")[0])]
    hits, previous = set(), tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL):
            continue
        docstring = token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if (token.type == tokenize.NAME and name in _words(token.string)) or (
                token.type == tokenize.STRING and not docstring and word.search(token.string)):
            hits.add(token.start[0])
        previous = token.type
    return sorted(hits)


def test_the_scan_finds_a_family_named_in_code_and_not_in_prose():
    assert _code_naming('if spec.name == "csm":\n    pass\n', ".py") == [1]
    assert _code_naming("from tunelab.worker.families.csm import speak\nx = CsmFamily\ny = MetricsMixin\n", ".py") == [1, 2]
    assert _code_naming('"""A Sesame CSM model, or csm."""\n# csm\nx = "a Sesame CSM model"\n', ".py") == []
    assert _code_naming('if (f === "csm") go(); // csm\n// Sesame CSM\n * csm in a block comment\n', ".js") == [1]


def test_only_the_csm_folders_and_one_line_per_registry_name_the_csm_family():
    """Adding (or moving) a family is its folders plus one line in each registry: the csm
    family proves it, and this keeps it true."""
    package = Path(tunelab.__file__).parent
    found: dict[str, list[int]] = {}
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package).as_posix()
        if path.suffix not in (".py", ".js", ".html", ".css") or relative.startswith(CSM_OWN):
            continue
        lines = _code_naming(path.read_text(encoding="utf-8"), path.suffix)
        if lines:
            found[relative] = lines
    assert {name: len(lines) for name, lines in found.items()} == CSM_REGISTRY_LINES, found


class _Quiet:
    def print(self, *args: object, **kwargs: object) -> None:
        pass


def test_tunelab_demo_builds_the_config_its_spec_names(home):
    """`tunelab demo` asks the spec which module builds a demo: the text one (sft and the
    objectives on it) is built for real; a demo's own default steps come from its module."""
    from tunelab.config.run_config import ConfigError

    sft = demo.demo_run_config("torch", None, "text", "sft", "orpheus", _Quiet())
    assert sft.max_steps == demo.TEXT_DEMO_STEPS and sft.eval_holdout == 0.05 and sft.objective == "sft"
    assert demo.demo_run_config("mlx", 7, "text", "sft", "orpheus", _Quiet()).eval_holdout == 0.0
    dpo = demo.demo_run_config("torch", 5, "text", "dpo", "orpheus", _Quiet())
    assert dpo.objective == "dpo" and dpo.max_steps == 5
    assert demo.demo_run_config("torch", 5, "text", "grpo", "orpheus", _Quiet()).objective == "grpo"
    assert importlib.import_module(families.speech.SPEC.demo_builder).DEMO_STEPS == 250
    with pytest.raises(ConfigError) as refused:
        demo.demo_run_config("mlx", None, "vision", "sft", "orpheus", _Quiet())
    assert refused.value.errors[0].field == "--backend" and "trains with backend torch" in refused.value.errors[0].message


def test_a_demos_own_figures_are_printed_by_the_module_its_spec_names(tmp_path):
    """The embedding demo prints nDCG@10 and the speech demo its WER, each from the last
    checkpoint's log; a demo without figures (text, tts, csm) prints none."""
    from types import SimpleNamespace

    from checkpoint_factory import make_checkpoint

    folder = make_checkpoint(tmp_path / "run", 20)
    log = [{"step": 10, "eval_cosine_ndcg@10": 0.25, "eval_wer": 0.75}, {"step": 20, "eval_cosine_ndcg@10": 0.5, "eval_wer": 0.5}]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 20, "log_history": log}))
    outcome = SimpleNamespace(run={"output_dir": str(tmp_path / "run")})
    printed: dict[tuple[str, str], list[str]] = {}
    for modality, tts_family in (("embedding", "orpheus"), ("speech", "orpheus"), ("text", "orpheus"), ("tts", "orpheus"),
                                 ("tts", "csm")):
        lines: list[str] = []
        demo.print_demo_evals(outcome, modality, tts_family, SimpleNamespace(print=lines.append))
        printed[(modality, tts_family)] = lines
    assert printed[("embedding", "orpheus")] == ["nDCG@10:    0.250 (step 10) -> 0.500 (step 20) on held-out pairs"]
    assert printed[("speech", "orpheus")][0].startswith("WER:        0.750 (step 10) -> 0.500 (step 20) on ")
    assert not any(printed[key] for key in (("text", "orpheus"), ("tts", "orpheus"), ("tts", "csm")))
