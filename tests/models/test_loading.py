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


def _fake_gguf_loader(monkeypatch, source_dir, calls):
    """transformers' GGUF loading stood in by loading `source_dir` (a tiny saved model), counting
    the conversions: the cache logic is under test here; tests/models/test_smollm2.py compares
    a real GGUF file's conversion with transformers' own loading of it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    real_model, real_tokenizer = (
        AutoModelForCausalLM.from_pretrained,
        AutoTokenizer.from_pretrained,
    )

    def model(path, gguf_file=None, **kwargs):
        if gguf_file:
            calls.append(("model", gguf_file))
            path = source_dir
        return real_model(path, **kwargs)

    def tokenizer(path, gguf_file=None, **kwargs):
        if gguf_file:
            calls.append(("tokenizer", gguf_file))
            path = source_dir
        return real_tokenizer(path, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", model)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", tokenizer)


def test_a_gguf_file_is_converted_once_and_loaded_from_the_cache(
    tmp_path, tiny_model_dir, monkeypatch
):
    import os

    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.config import ModelConfig
    from rlvr.models.loading import converted_gguf, load_model, load_tokenizer

    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    _fake_gguf_loader(monkeypatch, tiny_model_dir, calls)
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / "m.gguf").write_bytes(b"GGUF")
    cfg = ModelConfig(name_or_path=str(holder), gguf_file="m.gguf")

    tokenizer = load_tokenizer(str(holder), gguf_file="m.gguf")  # converts the whole file
    model = load_model(cfg, torch.device("cpu"), torch.float32)
    assert calls == [("tokenizer", "m.gguf"), ("model", "m.gguf")]
    first = converted_gguf(str(holder), "m.gguf")
    assert first.parent == tmp_path / "cache" / "gguf" and first.name.startswith("m-")
    assert not hasattr(model, "_rlvr_from_gguf")  # a plain model: saveable as it is
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for name, tensor in original.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert (
        tokenizer("12+3=")["input_ids"] == load_tokenizer(str(tiny_model_dir))("12+3=")["input_ids"]
    )
    load_model(cfg, torch.device("cpu"), torch.float32)
    assert len(calls) == 2  # served from the cache
    os.utime(holder / "m.gguf", ns=(1, 1))  # a changed file is converted anew
    second = converted_gguf(str(holder), "m.gguf")
    assert second != first and len(calls) == 4
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no scratch left


def test_an_unwritable_gguf_cache_falls_back_to_reading_the_file(
    tmp_path, tiny_model_dir, monkeypatch
):
    import torch

    from rlvr.config import ModelConfig
    from rlvr.models.loading import load_model

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("RLVR_CACHE_DIR", str(blocker))
    calls = []
    _fake_gguf_loader(monkeypatch, tiny_model_dir, calls)
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / "m.gguf").write_bytes(b"GGUF")
    with pytest.warns(UserWarning, match="not caching the conversion"):
        model = load_model(
            ModelConfig(name_or_path=str(holder), gguf_file="m.gguf"),
            torch.device("cpu"),
            torch.float32,
        )
    assert calls == [("model", "m.gguf")] and model._rlvr_from_gguf


def test_an_unreadable_gguf_file_is_a_one_line_error_and_leaves_no_scratch(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from rlvr.models.loading import load_tokenizer

    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / "m.gguf").write_bytes(b"GGUF\x03\x00")  # a header and nothing else
    with pytest.raises(ModelLoadError, match=r"^model.gguf_file: cannot read .*m.gguf: ") as e:
        load_tokenizer(str(holder), gguf_file="m.gguf")
    assert "\n" not in str(e.value)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []
