"""`rlvr serve` over HTTP on the embedded model: an openai client's answers carry exactly the
tokens a direct engine call gives, seeds reproduce, errors name the field, the CLI answers."""

from __future__ import annotations

import copy
import json
import queue
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import openai
import pytest
import torch

from rlvr.cli import main
from rlvr.models.loading import encode_prompt
from rlvr.rollout import HFEngine, SamplingParams, build_engine
from rlvr.serve import ServeConfig, ServedModel, Server

ADDITION = "347+285="  # the embedded model answers 522 and stops (EOS) under greedy decoding
OPEN = "9"  # the embedded model writes digits on and on: varied at T=1, cut by max_tokens
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@pytest.fixture(scope="module")
def served() -> ServedModel:
    return ServedModel.from_config(ServeConfig())


@pytest.fixture(scope="module")
def server(served):
    with Server(served) as running:
        yield running


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def reference(served) -> HFEngine:
    """The reference engine over the same weights: what rlvr's own decode gives."""
    return HFEngine(served.engine.model, served.tokenizer)


def direct(reference, prompt_ids, n=1, seed=0, **params):
    """The reference engine's completions of one prompt, keyed by `seed` as the server keys."""
    batch = reference.generate(
        [prompt_ids], n, SamplingParams(**params), generator=torch.Generator().manual_seed(seed)
    )
    return [c.tolist() for c in batch.completion_ids], [lp.tolist() for lp in batch.logprobs]


def post(server, path: str, body) -> tuple[int, dict]:
    """(status, JSON body) of a raw POST (no client-side checks in the way)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    url = server.url.removesuffix("/v1") + path
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_greedy_chat_tokens_equal_the_engines_own_decode(client, served, reference):
    reply = client.chat.completions.create(
        model="anything",
        messages=[{"role": "user", "content": ADDITION}],
        temperature=0,
        max_tokens=8,
        logprobs=True,
    )
    prompt_ids = encode_prompt(served.tokenizer, ADDITION, chat=False)  # no chat template
    assert reply.model_extra["prompt_token_ids"] == prompt_ids
    ids, logprobs = direct(reference, prompt_ids, temperature=0, max_new_tokens=8)
    choice = reply.choices[0]
    assert choice.model_extra["token_ids"] == ids[0]
    assert choice.model_extra["token_logprobs"] == pytest.approx(logprobs[0], abs=1e-5)
    assert [e.logprob for e in choice.logprobs.content] == choice.model_extra["token_logprobs"]
    assert choice.logprobs.content[-1].token == "<eos>"  # the EOS token the engine sampled
    assert choice.message.content == "522" and choice.finish_reason == "stop"
    assert reply.model == "embedded" and reply.object == "chat.completion"
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert reply.usage.completion_tokens == len(ids[0])


def test_seeded_sampling_is_reproducible_and_is_the_engines(client, served, reference):
    def sample(seed, n):
        reply = client.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": OPEN}],
            temperature=1.0,
            max_tokens=12,
            n=n,
            seed=seed,
        )
        return [c.model_extra["token_ids"] for c in reply.choices]

    first = sample(7, 3)
    assert sample(7, 3) == first
    assert sample(7, 1) == first[:1]  # choice i depends on the seed and i, not on n
    assert sample(8, 3) != first
    prompt_ids = encode_prompt(served.tokenizer, OPEN, chat=False)
    assert direct(reference, prompt_ids, 3, seed=7, max_new_tokens=12)[0] == first


def test_a_plain_model_reads_a_conversation_as_training_renders_it(client, served):
    messages = [
        {"role": "system", "content": "ignored by a plain model"},
        {"role": "user", "content": "1+1="},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": ADDITION},
    ]
    reply = client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    expected = served.tokenizer(f"1+1=2\n\n{ADDITION}")["input_ids"]
    assert reply.model_extra["prompt_token_ids"] == expected


def test_a_chat_template_renders_the_messages_with_the_generation_prompt(served):
    tokenizer = copy.deepcopy(served.tokenizer)
    tokenizer.chat_template = TEMPLATE
    engine = build_engine("fast", served.engine.model, tokenizer, max_batch_size=8)
    templated = ServedModel(
        engine, tokenizer, name="templated", chat=True, device=served.device, context_length=128
    )
    messages = [{"role": "system", "content": "Add."}, {"role": "user", "content": ADDITION}]
    with Server(templated) as running:
        reply = openai.OpenAI(base_url=running.url, api_key="x").chat.completions.create(
            model="templated", messages=messages, max_tokens=4, temperature=0
        )
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert reply.model_extra["prompt_token_ids"] == list(expected)
    assert tokenizer.decode(list(expected)).endswith("assistant: ")
    assert reply.model == "templated"


def test_completions_take_text_token_ids_and_batches(client, served):
    prompt_ids = encode_prompt(served.tokenizer, ADDITION, chat=False)
    text = client.completions.create(model="m", prompt=ADDITION, temperature=0, max_tokens=8)
    ids = client.completions.create(model="m", prompt=prompt_ids, temperature=0, max_tokens=8)
    assert text.model_extra["prompt_token_ids"] == ids.model_extra["prompt_token_ids"] == prompt_ids
    assert text.choices[0].text == ids.choices[0].text == "522"
    assert text.choices[0].model_extra["token_ids"] == ids.choices[0].model_extra["token_ids"]

    batch = client.completions.create(
        model="m", prompt=[ADDITION, [12]], n=2, temperature=1.0, seed=3, max_tokens=6
    )
    assert batch.model_extra["prompt_token_ids"] == [prompt_ids, [12]]
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert [c.model_extra["prompt_token_ids"] for c in batch.choices][1:3] == [prompt_ids, [12]]
    assert batch.usage.prompt_tokens == len(prompt_ids) + 1


def test_a_stop_string_cuts_the_text_and_the_tokens_stay(client):
    reply = client.completions.create(
        model="m", prompt=ADDITION, temperature=0, max_tokens=8, stop=["2"], logprobs=0
    )
    choice = reply.choices[0]
    assert choice.text == "5" and choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] == "2"
    assert choice.model_extra["token_ids"] == [8, 5]  # "5", then the "2" that completed the stop
    assert choice.logprobs.tokens == ["5", "2"]
    assert choice.logprobs.token_logprobs == choice.model_extra["token_logprobs"]
    assert choice.logprobs.text_offset == [0, 1]


def test_max_tokens_ends_a_completion_with_finish_reason_length(client):
    reply = client.completions.create(model="m", prompt=OPEN, temperature=0, max_tokens=3)
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and len(choice.model_extra["token_ids"]) == 3
    assert reply.usage.completion_tokens == 3 and reply.usage.total_tokens == 4
    default = client.completions.create(model="m", prompt=OPEN, temperature=0)
    assert len(default.choices[0].model_extra["token_ids"]) == 16  # OpenAI's default


@pytest.mark.parametrize(
    "path, patch, param",
    [
        ("/v1/chat/completions", {"temperature": 3}, "temperature"),
        ("/v1/chat/completions", {"n": 0}, "n"),
        ("/v1/chat/completions", {"max_tokens": 1000}, "max_tokens"),  # past the 128 context
        ("/v1/chat/completions", {"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 5}, "top_logprobs"),
        ("/v1/completions", {"prompt": [5, 999]}, "prompt"),  # not a token of the vocabulary
        ("/v1/completions", {"prompt": "9" * 200}, "prompt"),  # no room in the context
        ("/v1/completions", {"logprobs": 3}, "logprobs"),
        ("/v1/completions", {"echo": True}, "echo"),
    ],
)
def test_a_bad_field_is_a_400_naming_it(server, path, patch, param):
    body = {"model": "m", "messages": [{"role": "user", "content": "1"}], "prompt": "1"}
    status, reply = post(server, path, {**body, **patch})
    assert status == 400
    assert reply["error"]["param"] == param and reply["error"]["type"] == "invalid_request_error"
    assert param in reply["error"]["message"]


def test_the_openai_client_sees_a_bad_request_with_its_field(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "1"}], top_p=0
        )
    assert caught.value.status_code == 400 and caught.value.param == "top_p"


def test_bad_json_unknown_paths_and_methods(server):
    assert post(server, "/v1/completions", b"{not json")[0] == 400
    assert post(server, "/v1/embeddings", {"input": "x"})[0] == 404
    assert post(server, "/v1/models", {})[0] == 405
    status, reply = post(server, "/v1/completions", {"prompt": "1", "max_tokens": 1, "x": [1]})
    assert status == 200 and reply["object"] == "text_completion"  # unknown fields ignored


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == ["embedded"]
    health = server.url.removesuffix("/v1") + "/health"
    with urllib.request.urlopen(health, timeout=30) as response:
        assert json.loads(response.read()) == {"status": "ok", "model": "embedded"}


def test_two_clients_at_once_are_both_answered_as_alone(server):
    def ask(seed):
        own = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        reply = own.completions.create(model="m", prompt=OPEN, max_tokens=24, seed=seed, n=2)
        return [c.model_extra["token_ids"] for c in reply.choices]

    results: dict[int, list] = {}
    threads = [threading.Thread(target=lambda s=s: results.update({s: ask(s)})) for s in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results) == [1, 2]
    assert results[1] == ask(1) and results[2] == ask(2)


def test_a_stream_carries_the_same_completion_as_chunks(client):
    common = {"model": "m", "messages": [{"role": "user", "content": OPEN}], "max_tokens": 6}
    whole = client.chat.completions.create(**common, seed=5)
    chunks = list(
        client.chat.completions.create(
            **common, seed=5, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert (
        chunks[0].choices[0].model_extra["token_ids"] == whole.choices[0].model_extra["token_ids"]
    )
    assert chunks[0].model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 6


def test_the_cli_serves_until_interrupted():
    process = subprocess.Popen(
        [sys.executable, "-m", "rlvr", "serve", "--port", "0", "rollout.engine=hf"],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()  # stderr, read in a thread: a hung child fails

    def read() -> None:
        for text in process.stderr:
            lines.put(text)
        lines.put("")  # the child closed stderr: it ended

    threading.Thread(target=read, daemon=True).start()
    try:
        line = lines.get(timeout=120)
        while " at http://" not in line:
            assert line, "rlvr serve ended before it listened"
            line = lines.get(timeout=120)
        url = line.split(" at ", 1)[1].split()[0]
        reply = openai.OpenAI(base_url=url, api_key="x", max_retries=0).completions.create(
            model="embedded", prompt=ADDITION, temperature=0, max_tokens=8
        )
        assert reply.choices[0].text == "522"
        assert "POST /v1/completions" in lines.get(timeout=30)  # one line per request
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_config_key_is_a_one_line_error(capsys):
    assert main(["serve", "serve.max_m=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlvr: error: unknown config key 'serve.max_m'") and "\n" not in err


@pytest.mark.parametrize("length", ["-5", "abc", "1e3", " +7"])
def test_a_content_length_that_is_no_byte_count_is_a_400_and_no_hang(server, length):
    """A negative length once read the socket to its end (a keep-alive client then waited
    forever); a non-number raised in the handler. Both are a 400 on a closed connection now."""
    import http.client
    from urllib.parse import urlparse

    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", length)
    conn.endheaders()
    conn.send(b'{"prompt": "1+1="}')
    response = conn.getresponse()
    body = json.loads(response.read())
    assert response.status == 400 and "Content-Length" in body["error"]["message"]
    assert response.getheader("Connection", "").lower() == "close"
    conn.close()


def test_json_nested_too_deeply_is_a_400_not_a_500(server):
    status, body = post(server, "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "nested too deeply" in body["error"]["message"]
