"""rlvr.serve.protocol without a server: request checks, stop-string cuts, response objects."""

from __future__ import annotations

import pytest

from rlvr.serve.protocol import (
    RequestError,
    Row,
    chat_response,
    completion_response,
    cut_at_stop,
    parse_chat,
    parse_completion,
    stream_chunks,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "1+1="}]}


def test_defaults_are_openais_and_unknown_fields_are_ignored():
    request = parse_chat({**CHAT, "frobnicate": True, "user": "me"}, max_n=8)
    assert (request.temperature, request.top_p, request.top_k, request.n) == (1.0, 1.0, 0, 1)
    assert request.max_tokens is None and request.seed is None and request.stop == ()
    assert not request.logprobs and not request.stream


def test_max_completion_tokens_wins_over_max_tokens_and_top_k_minus_one_is_off():
    request = parse_chat({**CHAT, "max_tokens": 5, "max_completion_tokens": 7, "top_k": -1}, 8)
    assert request.max_tokens == 7 and request.top_k == 0


def test_developer_messages_are_system_messages_and_text_parts_are_joined():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "1+"}, {"type": "text", "text": "1="}],
        },
    ]
    request = parse_chat({"messages": messages}, 8)
    assert request.messages == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1="},
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", 2.5),
        ("temperature", "hot"),
        ("top_p", 0),
        ("n", 0),
        ("n", 9),  # over max_n
        ("n", True),  # a bool is not an integer here
        ("max_tokens", 0),
        ("stop", [""]),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("seed", 1.5),
        ("logprobs", 1),
        ("presence_penalty", 0.5),
        ("logit_bias", {"5": 10}),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("response_format", {"type": "json_object"}),
        ("messages", []),
        ("messages", [{"role": "tool", "content": "x"}]),
        ("messages", [{"role": "user", "content": [{"type": "image_url"}]}]),
    ],
)
def test_a_bad_chat_field_is_refused_naming_it(field, value):
    with pytest.raises(RequestError) as caught:
        parse_chat({**CHAT, field: value}, max_n=8)
    assert caught.value.param == field and caught.value.status == 400
    body = caught.value.body()["error"]
    assert body["type"] == "invalid_request_error" and body["param"] == field


def test_top_logprobs_above_zero_is_refused():
    with pytest.raises(RequestError) as caught:
        parse_chat({**CHAT, "logprobs": True, "top_logprobs": 2}, 8)
    assert caught.value.param == "top_logprobs"
    assert parse_chat({**CHAT, "logprobs": True, "top_logprobs": 0}, 8).logprobs


@pytest.mark.parametrize(
    "field, value",
    [
        ("prompt", None),
        ("prompt", []),
        ("prompt", [1, "a"]),
        ("prompt", [[1], []]),
        ("logprobs", 2),
        ("echo", True),
        ("suffix", "x"),
        ("best_of", 3),
    ],
)
def test_a_bad_completions_field_is_refused_naming_it(field, value):
    with pytest.raises(RequestError) as caught:
        parse_completion({"prompt": "1+1=", field: value}, max_n=8)
    assert caught.value.param == field


def test_completion_prompts_keep_their_shape():
    assert parse_completion({"prompt": "ab"}, 8).prompts == ("ab",)
    single = parse_completion({"prompt": [4, 5]}, 8)
    assert single.prompts == ((4, 5),) and not single.batched
    batch = parse_completion({"prompt": ["ab", [4, 5]], "logprobs": 0}, 8)
    assert batch.prompts == ("ab", (4, 5)) and batch.batched and batch.logprobs


def test_the_text_is_cut_at_the_earliest_stop_string():
    assert cut_at_stop("12 STOP 34 END", ["END", "STOP"]) == ("12 ", "STOP")
    assert cut_at_stop("no stop here", ["END"]) == ("no stop here", None)


def test_responses_carry_openai_fields_and_the_exact_tokens():
    request = parse_chat({**CHAT, "n": 2, "stop": "!", "logprobs": True}, 8)
    rows = [
        Row([7, 8, 1], [-0.5, -0.25, -0.125], "ab", "eos"),
        Row([7, 9], [-1.0, -2.0], "a!", "stop"),
    ]
    out = chat_response(request, "m", [3, 4], rows, token_text=lambda t: f"<{t}>")
    assert out["object"] == "chat.completion" and out["prompt_token_ids"] == [3, 4]
    first, second = out["choices"]
    assert first["message"] == {"role": "assistant", "content": "ab"}
    assert first["finish_reason"] == "stop" and first["stop_reason"] is None
    assert second["message"]["content"] == "a" and second["stop_reason"] == "!"
    assert second["token_ids"] == [7, 9] and second["token_logprobs"] == [-1.0, -2.0]
    assert [e["logprob"] for e in first["logprobs"]["content"]] == [-0.5, -0.25, -0.125]
    assert first["logprobs"]["content"][0]["token"] == "<7>"
    assert out["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}


def test_a_batch_completion_numbers_choices_prompt_major():
    request = parse_completion({"prompt": [[3], [4, 5]], "n": 2, "logprobs": 0}, 8)
    rows = [Row([i], [-1.0], str(i), "length") for i in range(4)]
    out = completion_response(request, "m", [[3], [4, 5]], rows, token_text=str)
    assert out["prompt_token_ids"] == [[3], [4, 5]]
    assert [c["prompt_token_ids"] for c in out["choices"]] == [[3], [3], [4, 5], [4, 5]]
    assert all(c["finish_reason"] == "length" for c in out["choices"])
    assert out["choices"][1]["logprobs"] == {
        "tokens": ["1"],
        "token_logprobs": [-1.0],
        "top_logprobs": [{"1": -1.0}],
        "text_offset": [0],
    }
    assert out["usage"]["prompt_tokens"] == 3  # each prompt counted once, whatever n


def test_a_stream_is_each_choice_then_its_finish_then_the_usage():
    request = parse_chat({**CHAT, "n": 2}, 8)
    rows = [Row([7, 1], [-0.5, -0.1], "a", "eos"), Row([8], [-0.2], "b", "length")]
    out = chat_response(request, "m", [3], rows, token_text=str)
    chunks = stream_chunks(out, include_usage=True)
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * 5
    assert chunks[0]["prompt_token_ids"] == [3]
    assert chunks[0]["choices"][0]["delta"]["content"] == "a"
    assert chunks[0]["choices"][0]["token_ids"] == [7, 1]
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[3]["choices"][0]["finish_reason"] == "length"
    assert chunks[4]["choices"] == [] and chunks[4]["usage"]["completion_tokens"] == 3
