"""`rlvr serve`: OpenAI-compatible endpoints over an rlvr rollout engine, with the exact token
ids and sampler log-probs beside the text (docs/guides/serve.md).

`config` (the `ServeConfig` tree), `protocol` (requests checked, responses built: pure),
`model` (`ServedModel`: tokenizer, engine and prompt encoding, one request at a time),
`server` (`Server`: the HTTP endpoints, in-process or for the CLI).
"""

from rlvr.serve.config import ServeConfig
from rlvr.serve.model import ServedModel
from rlvr.serve.protocol import GenerationRequest, RequestError
from rlvr.serve.server import Server

__all__ = ["GenerationRequest", "RequestError", "ServeConfig", "ServedModel", "Server"]
