"""A preallocated key/value cache whose rows (slots) each hold one sequence at its own length.

Unlike a `DynamicCache`, nothing grows or is concatenated while decoding: every layer owns two
buffers of shape [slots, kv_heads, max_len, head_dim], allocated once and reused by later
`generate` calls whose shapes fit. Slot `s` holds the keys/values of positions 0..len_s-1 of its
sequence; positions at or beyond len_s hold stale values that attention masks out.
"""

from __future__ import annotations

import torch


class SlotKVCache:
    """Per-layer K/V buffers [slots, kv_heads, max_len, head_dim] for continuous batching."""

    def __init__(
        self,
        num_layers: int,
        slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (slots, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.slots, self.max_len = slots, max_len
        self._rows = torch.arange(slots, device=device)

    def fits(
        self,
        num_layers: int,
        slots: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> bool:
        """True when these buffers can serve a call needing at most `slots` x `max_len`."""
        k = self.keys[0]
        return (
            len(self.keys) == num_layers
            and self.slots >= slots
            and self.max_len >= max_len
            and k.shape[1] == kv_heads
            and k.shape[3] == head_dim
            and k.dtype == dtype
            and k.device == torch.device(device)
        )

    def write(
        self, layer: int, positions: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> None:
        """Store one new token per slot: key/value [W, kv_heads, head_dim] of slots 0..W-1,
        each at its own position `positions[s]` (a [W] long tensor)."""
        rows = self._rows[: key.shape[0]]
        self.keys[layer][rows, :, positions] = key
        self.values[layer][rows, :, positions] = value

    def view(self, layer: int, width: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of slots 0..width-1, positions 0..length-1 (views, no copy)."""
        return (
            self.keys[layer][:width, :, :length],
            self.values[layer][:width, :, :length],
        )

    def load_prefix(
        self, slots: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]
    ) -> None:
        """Copy one prompt's cache (per layer [kv_heads, P, head_dim]) into positions 0..P-1 of
        every slot in `slots`: the prompt was prefilled once and is shared by its samples."""
        length = keys[0].shape[1]
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.keys[layer][slots, :, :length] = k.unsqueeze(0)
            self.values[layer][slots, :, :length] = v.unsqueeze(0)

    def compact(self, source_slots: torch.Tensor, length: int) -> None:
        """Move slots `source_slots` (ascending) to slots 0..len-1, positions 0..length-1, so a
        shrinking batch can decode with a narrower width."""
        count = source_slots.numel()
        for buffers in (self.keys, self.values):
            for buffer in buffers:
                buffer[:count, :, :length] = buffer[source_slots, :, :length]
