"""Multi-turn rollouts are token-exact: the tokens trained are the tokens sampled plus the
observation tokens, in order, with the observations masked out; chat observations are the
difference a message makes, so a template that rewrites earlier turns changes nothing."""

from __future__ import annotations

import string

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlvr.environments import StepResult
from rlvr.forward.logprobs import completion_logprobs, make_token_batch
from rlvr.rollout import FastEngine, HFEngine, RolloutBatch, SamplingParams
from rlvr.rollout.multi_turn import MultiTurnEngine, chat_observation_ids
from tests.conftest import build_char_tokenizer, build_tiny_llama

CHATML = (
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
# Qwen3-like: earlier assistant turns lose their <think> block; tool messages are user turns
# wrapped in <tool_response>.
DROPS_THINK = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- set c = m['content'] -%}"
    "{%- if not loop.last and '</think>' in c -%}{%- set c = c.split('</think>')[-1] -%}"
    "{%- endif -%}"
    "{{ '<|im_start|>assistant\\n' + c + '<|im_end|>\\n' }}"
    "{%- elif m['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>"
    "<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def ascii_chat_tokenizer(template: str) -> PreTrainedTokenizerFast:
    """One token per printable character; chat markers special, tags plain added tokens."""
    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<unk>", *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")
    tok.add_special_tokens(
        {"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]}
    )
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])
    tok.chat_template = template
    return tok


class ScriptedEngine:
    """Answers turn t of every row with `turns[t]` (its tokens, then EOS); records contexts."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tok, self.turns, self.calls = tokenizer, turns, []
        self.max_batch_size = 8

    def generate(self, prompts, n, sampling, generator=None, first_row=0, samples=None):
        turn = len(self.calls)
        self.calls.append([list(map(int, p)) for p in prompts])
        ids = self.tok.encode(self.turns[turn], add_special_tokens=False)
        ids = torch.tensor([*ids, self.tok.eos_token_id])
        rows = len(prompts) * n
        return RolloutBatch(
            prompt_ids=[torch.tensor(p) for p in prompts for _ in range(n)],
            completion_ids=[ids.clone() for _ in range(rows)],
            completion_text=[self.tok.decode(ids, skip_special_tokens=True)] * rows,
            logprobs=[torch.full((len(ids),), -0.5) for _ in range(rows)],
            finish_reason=["eos"] * rows,
            prompt_index=[i for i in range(len(prompts)) for _ in range(n)],
        )


class Calculator:
    """Answers a <tool_call> turn with '42\\n' as a tool message; any other turn ends the row."""

    def reset(self, sample):
        return None

    def step(self, text):
        if "<tool_call>" in text:
            return StepResult(observation="42\n", role="tool", tool_call=True, tool_seconds=0.01)
        return StepResult(done=True)


CALL = '<think>6 times 7</think><tool_call>{"name": "python", "arguments": {"code": "6*7"}}'
CALL += "</tool_call>"
ANSWER = "<think>the tool says 42</think>42"


@pytest.mark.parametrize(
    ("template", "delta"),
    [
        (CHATML, "\n<|im_start|>tool\n42\n<|im_end|>\n<|im_start|>assistant\n"),
        (
            DROPS_THINK,
            "\n<|im_start|>user\n<tool_response>\n42\n\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n",
        ),
    ],
    ids=["chatml", "drops-think"],
)
def test_trained_tokens_are_the_sampled_tokens_plus_the_observation_delta(template, delta):
    tok = ascii_chat_tokenizer(template)
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "6*7?"}], tokenize=False, add_generation_prompt=True
    )
    prompt = tok.encode(rendered, add_special_tokens=False)
    inner = ScriptedEngine(tok, [CALL, ANSWER])
    engine = MultiTurnEngine(inner, tok, Calculator, max_turns=3)
    batch = engine.generate([prompt], 2, SamplingParams(max_new_tokens=400))

    call = [*tok.encode(CALL, add_special_tokens=False), tok.eos_token_id]
    answer = [*tok.encode(ANSWER, add_special_tokens=False), tok.eos_token_id]
    inserted = tok.encode(delta, add_special_tokens=False)
    assert chat_observation_ids(tok, "tool", "42\n", ended_at_eos=True) == inserted
    for i in range(2):
        assert batch.completion_ids[i].tolist() == call + inserted + answer
        assert batch.loss_masks[i].tolist() == [1.0] * len(call) + [0.0] * len(inserted) + [
            1.0
        ] * len(answer)
        assert batch.logprobs[i][len(call) : len(call) + len(inserted)].eq(0).all()
        assert batch.completion_lengths[i] == len(call) + len(answer)
        assert batch.finish_reason[i] == "eos"
        record = batch.tools[i]
        assert (record.calls, record.turns, record.errors) == (1, 2, 0)
        assert [who for who, _ in record.transcript] == ["model", "env", "model"]
    # the second turn continued from exactly prompt + sampled call + inserted observation
    assert inner.calls[1] == [prompt + call + inserted] * 2

    # The pitfall avoided: re-rendering the conversation gives other tokens when the template
    # rewrites earlier turns; the trained sequence keeps the first turn's <think> as sampled.
    rerendered = tok.apply_chat_template(
        [
            {"role": "user", "content": "6*7?"},
            {"role": "assistant", "content": CALL},
            {"role": "tool", "content": "42\n"},
            {"role": "assistant", "content": ANSWER},
        ],
        tokenize=False,
    )
    ours = tok.decode(prompt + batch.completion_ids[0].tolist())
    if template is DROPS_THINK:
        assert "6 times 7" not in rerendered and "6 times 7" in ours
    else:
        assert rerendered == ours + "\n"  # chatml only adds the newline after the last turn


class Echo:
    """Ends a turn that mentions 'x' (a 'call'): shows '=7' and asks for more."""

    stop = ("x",)

    def reset(self, sample):
        return None

    def step(self, text):
        if text.endswith("x"):
            return StepResult(observation="=7\n", tool_call=True)
        return StepResult(done=True)


@pytest.mark.parametrize("engine_cls", [HFEngine, FastEngine])
def test_learner_logprobs_match_the_samplers_on_every_sampled_token(engine_cls):
    """A real engine over a tiny Llama: the update's token batch (loss masks applied) gives,
    at every sampled position, the log-prob the engine sampled with; inserted tokens are 0."""
    tok = build_char_tokenizer()
    model = build_tiny_llama(tok, seed=3)
    engine = MultiTurnEngine(engine_cls(model, tok), tok, Echo, max_turns=4, stop=Echo.stop)
    prompts = [tok.encode("12+34=", add_special_tokens=False), tok.encode("5+6=")]
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(prompts, 3, SamplingParams(max_new_tokens=40), generator=gen)
    assert any(t.calls for t in batch.tools), "no row made a call: the test exercises nothing"
    tokens = make_token_batch(
        batch.prompt_ids, batch.completion_ids, tok.pad_token_id, batch.loss_masks
    )
    learner_lp, _ = completion_logprobs(model, tokens)
    for i in range(len(batch)):
        n = batch.completion_ids[i].numel()
        mask = batch.loss_masks[i].bool()
        assert tokens.completion_mask[i, :n].bool().tolist() == mask.tolist()
        torch.testing.assert_close(
            learner_lp[i, :n][mask], batch.logprobs[i][mask], atol=2e-5, rtol=0
        )
        assert batch.logprobs[i][~mask].eq(0).all()
        assert n <= 40  # observations count against the same budget
        # an inserted observation is exactly the tokens of its text
        text = tok.decode(batch.completion_ids[i][~mask])
        assert text == "=7\n" * int((~mask).sum() // 3)


def test_a_row_wanting_a_turn_past_the_limit_ends_truncated():
    tok = ascii_chat_tokenizer(CHATML)
    engine = MultiTurnEngine(ScriptedEngine(tok, [CALL, CALL]), tok, Calculator, max_turns=2)
    batch = engine.generate([[5, 6]], 1, SamplingParams(max_new_tokens=400))
    assert batch.finish_reason == ["length"]  # the second call got no answer turn
    assert batch.tools[0].calls == 2 and batch.tools[0].turns == 2
    assert batch.loss_masks[0].sum() == batch.completion_ids[0].numel() - len(
        chat_observation_ids(tok, "tool", "42\n", ended_at_eos=True)
    )


def test_one_draw_from_the_generator_per_call_whatever_the_turns():
    tok = build_char_tokenizer()
    model = build_tiny_llama(tok, seed=1)
    engine = MultiTurnEngine(HFEngine(model, tok), tok, Echo, max_turns=4, stop=Echo.stop)
    gen, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = engine.generate([[4, 5, 6]], 4, SamplingParams(max_new_tokens=30), generator=gen)
    torch.randint(0, 2**31 - 1, (1,), generator=ref)
    assert torch.equal(gen.get_state(), ref.get_state())
    b = engine.generate(
        [[4, 5, 6]],
        4,
        SamplingParams(max_new_tokens=30),
        generator=torch.Generator().manual_seed(5),
    )
    assert [c.tolist() for c in a.completion_ids] == [c.tolist() for c in b.completion_ids]


# -- a failing environment fails its row -------------------------------------------------------


class RaisesInStep:
    def reset(self, sample):
        return None

    def step(self, text):
        raise RuntimeError("environment bug")


class RaisesADataError:
    def reset(self, sample):
        return None

    def step(self, text):
        from rlvr.errors import DataError

        raise DataError("sample has no 'board'")  # a user error, but no config error


class RaisesInReset:
    def reset(self, sample):
        raise KeyError(sample["missing"])

    def step(self, text):  # never reached
        return StepResult(done=True, reward=1.0)


class ReturnsWrong:
    def reset(self, sample):
        return None

    def step(self, text):
        return {"done": True}


class RewardsAString:
    def reset(self, sample):
        return None

    def step(self, text):
        return StepResult(done=True, reward="1")


def failing_rollout(env_class, samples=({"id": "p0"}, {"prompt": "no id"})):
    tok = ascii_chat_tokenizer(CHATML)
    engine = MultiTurnEngine(ScriptedEngine(tok, [CALL, ANSWER]), tok, env_class, max_turns=2)
    prompts = [[5, 6]] * len(samples)
    return engine.generate(prompts, 2, SamplingParams(max_new_tokens=400), samples=list(samples))


@pytest.mark.parametrize(
    ("env_class", "error", "traceback"),
    [
        (RaisesInStep, "RuntimeError: environment bug", True),
        (RaisesADataError, "DataError: sample has no 'board'", True),
        (RaisesInReset, "KeyError: 'missing'", True),
        (ReturnsWrong, "TypeError: the environment's step returned dict {'done': True}", False),
        (
            RewardsAString,
            "TypeError: the environment's step returned a StepResult whose reward is str '1'",
            False,
        ),
    ],
    ids=[
        "step-raises",
        "step-raises-data-error",
        "reset-raises",
        "not-a-step-result",
        "reward-not-a-number",
    ],
)
def test_a_failing_environment_ends_its_row_with_reward_0_and_a_record(env_class, error, traceback):
    batch = failing_rollout(env_class)
    assert [t.turns for t in batch.tools] == [1] * 4  # the row ended after its first turn
    assert [t.env_reward for t in batch.tools] == [0.0] * 4  # whatever the verifier says
    assert batch.rewards_with_env([1.0] * 4) == [0.0] * 4
    records = batch.environment_failures()
    assert [(f.kind, f.row, f.sample_id) for f in records] == [
        ("environment", 0, "p0"),
        ("environment", 1, "p0"),
        ("environment", 2, 1),
        ("environment", 3, 1),
    ]
    assert all(f.error.startswith(error) for f in records)
    # the traceback comes out of the step's thread, once per error in the batch
    assert (records[0].traceback is not None) == traceback
    assert [f.traceback for f in records[1:]] == [None] * 3
    if traceback:
        assert "test_multi_turn.py" in records[0].traceback


def test_a_config_error_in_a_step_stops_the_rollout():
    from rlvr.errors import ConfigError

    class NeedsSetup(RaisesInStep):
        def step(self, text):
            raise ConfigError("environment: the sandbox cannot start")

    with pytest.raises(ConfigError, match="cannot start"):
        failing_rollout(NeedsSetup)


def test_a_working_environment_has_no_failure():
    batch = failing_rollout(Calculator)
    assert batch.environment_failures() == [] and all(t.failure is None for t in batch.tools)
