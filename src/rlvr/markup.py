"""The markup completions are written in and read by, defined once: the reasoning block, the
answer tags, and the python tool's call, output and Hermes-style call tags. Verifiers, tasks,
tool formats and the trainer's metrics import these names; the standard library only, nothing
of rlvr, so anything may import it."""

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # the reasoning; an answer is read after it
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"  # the final answer, where a task asks
PYTHON_OPEN, PYTHON_CLOSE = "<python>", "</python>"  # a tool call: generation stops at the close
OUTPUT_OPEN, OUTPUT_CLOSE = "<output>", "</output>"  # the tool's observation: what the code printed
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"  # the hermes format's JSON call
