"""The chat template a run trains and chats with when its model's tokenizer has none.

The worker sets it on such a tokenizer (`worker/data/tokenization.py`), so the run is saved
with it and every later reader renders chats the same way; the chat route shows it for a
run whose saved tokenizer holds no template. Here, beside the run's settings, so that the
server reads it without importing a worker module.
"""

FALLBACK_CHAT_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
