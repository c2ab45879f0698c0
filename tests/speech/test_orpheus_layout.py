"""Orpheus's prompt and row layout, token id for token id.

The expected ids are laid out by hand from Orpheus's published preparation (its finetune
data script and its inference engine): 128259 <start_of_human>, the text as Llama 3's
tokenizer writes it (BOS 128000 first), 128009 <|eot_id|>, 128260 <end_of_human>, then
128261 <start_of_ai> 128257 <start_of_speech>, the audio as 128266 + place * 4096 + code,
128258 <end_of_speech> 128262 <end_of_ai>. The tokenizer here has Llama 3's ids for the
tokens that matter (BOS, <|eot_id|>, <custom_token_N> = 128256 + N) and adds its BOS as
Llama 3's does, so tunelab's rows and speak prompts must come out as those very ids."""

from __future__ import annotations

from tunelab.worker.families.tts import layout as tts_layout

WORDS = {"tara": 1, ":": 2, "hello": 3, "world": 4}


def _llama3_shaped_tokenizer(adds_bos: bool = True, has_eot: bool = True):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **WORDS, "<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, **({"<|eot_id|>": 128009} if has_eot else {})}
    vocab.update({tts_layout.token_name(n): 128256 + n for n in range(tts_layout.AUDIO_BASE + 7 * 4096)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if adds_bos:
        backend.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 128000)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", unk_token="<unk>")


def test_prompts_and_rows_are_laid_out_as_orpheus_lays_them():
    from tunelab.worker.families.tts.data import prompt_ids, speech_ids
    from tunelab.worker.families.tts.model import layout_of

    tokenizer = _llama3_shaped_tokenizer()
    layout = layout_of(tokenizer, {})  # Orpheus's codebook: 4096
    # Orpheus's engine, voice "tara": [128259] + tokenizer("tara: hello world") + [128009, 128260, 128261, 128257].
    prompt = [128259, 128000, 1, 2, 3, 4, 128009, 128260, 128261, 128257]
    assert prompt_ids(tokenizer, layout, "tara: hello world") == prompt
    # Its finetune script appends one SNAC frame (coarse 5; mid 6, 7; fine 8, 9, 10, 11) in its interleaving.
    offsets = tts_layout.frames_to_offsets([5], [6, 7], [8, 9, 10, 11], 4096)
    audio = [128266 + 5, 128266 + 4096 + 6, 128266 + 2 * 4096 + 8, 128266 + 3 * 4096 + 9,
             128266 + 4 * 4096 + 7, 128266 + 5 * 4096 + 10, 128266 + 6 * 4096 + 11]
    assert prompt + speech_ids(layout, offsets) == prompt + audio + [128258, 128262]
    # A tokenizer that adds no BOS gets its BOS put first all the same; without <|eot_id|> its EOS ends the text.
    plain = _llama3_shaped_tokenizer(adds_bos=False)
    assert prompt_ids(plain, layout_of(plain, {}), "hello") == [128259, 128000, 3, 128009, 128260, 128261, 128257]
    no_eot = _llama3_shaped_tokenizer(has_eot=False)
    assert prompt_ids(no_eot, layout_of(no_eot, {}), "hello") == [128259, 128000, 3, 128001, 128260, 128261, 128257]
