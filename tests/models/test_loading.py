import pytest

from rlvr.errors import ModelLoadError
from rlvr.models.loading import (
    PromptEncoder,
    encode_prompt,
    resolve_model_path,
    uses_chat_template,
)


def test_plain_prompt_for_base_models(char_tokenizer):
    assert not uses_chat_template(char_tokenizer, "auto")
    ids = encode_prompt(char_tokenizer, "12+3=", chat=False)
    assert char_tokenizer.decode(ids) == "12+3="


def test_chat_template_is_applied_for_instruct_models(char_tokenizer):
    tok = char_tokenizer
    old = tok.chat_template
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}a:{% endif %}"
    )
    try:
        assert uses_chat_template(tok, "auto")
        ids = encode_prompt(tok, "1+2=", chat=True, system_prompt="be exact")
        assert tok.decode(ids) == "s:be exact\nu:1+2=\na:"
    finally:
        tok.chat_template = old


def test_a_prompt_encoder_reads_the_samples_system_message_and_shots(char_tokenizer):
    tok = char_tokenizer
    old = tok.chat_template
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if tools %}t:{{ tools | length }}\n{% endif %}"
        "{% if add_generation_prompt %}a:{% endif %}"
    )
    try:
        encode = PromptEncoder(tok, chat=True, system_prompt="be exact", tools=[{"name": "f"}])
        assert tok.decode(encode({"prompt": "1+2="})) == "s:be exact\nu:1+2=\nt:1\na:"
        shot = {"prompt": "1+1=", "completion": "2"}
        own = {"prompt": "1+2=", "system": "be brief", "shots": [shot]}
        assert tok.decode(encode(own)) == "s:be brief\nu:1+1=\na:2\nu:1+2=\nt:1\na:"
        plain = PromptEncoder(tok, chat=False)
        assert tok.decode(plain({"prompt": "1+2="})) == "1+2="
    finally:
        tok.chat_template = old


def test_always_without_a_template_is_a_user_error(char_tokenizer):
    with pytest.raises(ModelLoadError, match="model.chat_template"):
        uses_chat_template(char_tokenizer, "always")


def test_model_paths_are_checked_before_loading(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        resolve_model_path(str(tmp_path / "missing"))
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_model_path(str(tmp_path / "file.bin"))
    assert resolve_model_path("org/some-model") == "org/some-model"  # a hub id passes through
