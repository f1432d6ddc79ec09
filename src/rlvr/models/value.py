"""PPO's value model: a causal LM's decoder with a scalar head, V(s_t) = w · h_t + b.

h_t is the decoder's last hidden state (after the final norm) at the position that predicts
completion token y_t, i.e. the state the policy chooses y_t in, the same positions the policy's
log-probs are read at (rlvr.forward). The language-model head is dropped: a critic never makes
logits, and a tied head would leave the input embedding with only the sparse gradient of its
lookup. The scalar head starts at zero (V = 0 everywhere, so the first advantages are the
rewards themselves, and no random head adds noise to them) and runs in fp32 outside autocast,
like the policy's log-softmax: a value is a regression target in reward units, and bf16 keeps
3 significant digits.

Other libraries do the same with `AutoModelForTokenClassification(num_labels=1)` (verl) or a
`value_head` on the base model (OpenRLHF, TRL's experimental PPO); this module keeps the
decoder of the model class the policy already loads (`load_model`), so GGUF, LoRA, gradient
checkpointing, the packed forward and FSDP's per-layer sharding all apply to it unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ValueModel(nn.Module):
    """`decoder` (a transformers base model: embeddings, layers, final norm) and `value_head`."""

    def __init__(self, decoder: Any, hidden_size: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.config = decoder.config  # the attention paths read the implementation from it
        param = next(decoder.parameters())
        self.value_head = nn.Linear(hidden_size, 1, device=param.device, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    # what rlvr.forward's hidden-state passes ask of a model
    def get_decoder(self) -> Any:
        return self.decoder

    def get_input_embeddings(self) -> Any:
        return self.decoder.get_input_embeddings()

    def get_output_embeddings(self) -> None:
        return None  # no LM head: the embedding's gradient stays dense

    def values(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] hidden states -> [...] float32 values, the head in fp32 outside autocast."""
        with torch.autocast(hidden.device.type, enabled=False):
            head = self.value_head
            return nn.functional.linear(hidden.float(), head.weight.float(), head.bias.float())[
                ..., 0
            ]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("ValueModel: call rlvr.forward's value passes (PackedForward.values)")


def value_model_from_lm(lm: Any) -> ValueModel:
    """The value model of a loaded causal LM (peft-wrapped too: its adapters stay in the layers):
    its decoder and a new zero head; the LM head is left behind."""
    decoder = lm.get_decoder()
    return ValueModel(decoder, int(decoder.config.hidden_size))
