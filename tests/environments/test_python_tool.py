"""Hostile tool calls against the built-in python tool, the tool-call formats, and multi-turn
rollouts around environments that hang or raise.

Every attack goes through `PythonTool.step` with the `tags` format, as a model's turn would.
Each step must end within its limit plus `SLACK_S`, never raise, and return an observation that
says what happened, with `tool_error` / `tool_timeout` set accordingly. Every bomb here runs
only inside the sandbox, under rlimits. The sandbox tests skip when bwrap is unavailable; the
format tests and the multi-turn tests (a scripted fake engine: no model, and but for one test
no sandbox) always run.

Several tests here first pinned defects found in review (a busy loop reported as a signal,
not a timeout; a silent non-zero exit; an error lost behind long output; an unclosed fence;
hung steps outnumbering the workers; a missing sandbox counted as tool errors); each now
guards its fix.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from rlvr.environments import FORMATS, StepResult, environment_factory, tool_format
from rlvr.environments.python_tool import PythonTool
from rlvr.errors import ConfigError
from rlvr.isolation import sandbox as sandbox_module
from rlvr.isolation.sandbox import Program, SandboxUnavailable
from rlvr.rollout.multi_turn import MultiTurnEngine
from rlvr.rollout.types import RolloutBatch, SamplingParams

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 1.0
MAX_CHARS = 300
SLACK_S = 3.0  # a step costs at most its time limit plus this (sandbox start, kill, reap)
CUT = re.compile(r"\n\.\.\.\[output cut: (at least )?\d+ more characters\]\n")


def make_factory(timeout_s: float = TIMEOUT_S):
    return environment_factory(
        "python", format="tags", timeout_s=timeout_s, memory_mb=256, max_output_chars=MAX_CHARS
    )


@pytest.fixture(scope="module")
def new_tool():
    """A function making a fresh python tool (1 s, 256 MB, 300 characters); skips the module's
    sandbox tests when bwrap cannot start here."""
    factory = make_factory()
    try:
        factory().settings.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return factory


@pytest.fixture
def tool(new_tool) -> PythonTool:
    t = new_tool()
    assert t.reset({"prompt": "2+2=", "answer": "4"}) is None
    return t


def call(tool: PythonTool, code: str, *, limit_s: float = TIMEOUT_S) -> StepResult:
    """One model turn ending in a tool call of `code`; asserts the step's cost and shape."""
    turn = "Let me compute it.\n<python>\n" + textwrap.dedent(code).strip() + "\n</python>"
    started = time.monotonic()
    result = tool.step(turn)
    wall = time.monotonic() - started
    assert wall < limit_s + SLACK_S, f"step took {wall:.2f} s (limit {limit_s} s): {result}"
    assert result.tool_call and not result.done and result.role is None
    assert result.observation is not None
    assert result.observation.startswith("<output>") and result.observation.endswith("</output>")
    assert 0.0 < result.tool_seconds <= wall
    return result


def shown(result: StepResult) -> str:
    """The observation's text between <output> and </output>."""
    assert result.observation is not None
    return result.observation.removeprefix("<output>").removesuffix("</output>")


def host_processes_with(marker: str) -> list[str]:
    """Host processes whose command line holds `marker` (other than this test run)."""
    hits = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path("/proc", pid, "cmdline").read_bytes()
        except OSError:
            continue
        line = raw.replace(b"\0", b" ").decode(errors="replace")
        if marker in line and "pytest" not in line:
            hits.append(f"{pid}: {line[:80]}")
    return hits


# --- ordinary calls --------------------------------------------------------------------------


def test_a_call_runs_and_shows_what_it_printed(tool):
    result = call(tool, "print(6 * 7)")
    assert result.observation == "<output>42\n</output>"
    assert not result.tool_error and not result.tool_timeout
    assert tool.calls == 1


def test_a_turn_without_a_call_ends_the_row_without_running_anything(tool):
    result = tool.step("The answer is 42.")
    assert result == StepResult(done=True)
    assert tool.calls == 0


# --- time ------------------------------------------------------------------------------------


def test_sleeping_past_the_limit_is_a_timeout(tool):
    result = call(tool, "import time\ntime.sleep(60)\nprint('done')")
    assert result.tool_timeout and result.tool_error
    assert shown(result) == "TimeoutError: the program ran past its 1 s limit\n"


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "for _ in range(8):\n    threading.Thread(target=spin).start()",
    ],
    ids=["busy-loop", "sigxcpu-ignored", "busy-threads"],
)
def test_an_infinite_loop_is_stopped_within_the_limit(tool, code):
    result = call(tool, code)
    assert result.tool_error
    assert "done" not in shown(result)
    # stopped by the wall clock ("TimeoutError: ...") or by RLIMIT_CPU ("killed by signal 24")
    assert "TimeoutError" in shown(result) or "killed by signal" in shown(result)
    assert call(tool, "print('next')").observation == "<output>next\n</output>"


def test_a_busy_loop_is_reported_as_a_timeout(tool):
    result = call(tool, "while True:\n    pass")
    assert result.tool_timeout
    assert "limit" in shown(result)


# --- processes -------------------------------------------------------------------------------


def test_a_python_fork_bomb_is_contained_and_the_next_call_works(tool):
    code = """
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
    """
    result = call(tool, code)
    assert result.tool_error
    # the wall clock, or RLIMIT_CPU of the looping parent on a machine with many idle cores
    assert "TimeoutError" in shown(result) or "killed by signal" in shown(result)
    assert call(tool, "print(6 * 7)").observation == "<output>42\n</output>"


def test_a_shell_fork_bomb_leaves_nothing_on_the_host(tool):
    marker = f"bomb{secrets.token_hex(4)}"
    code = f"""
    import os
    os.execv("/bin/sh", ["sh", "-c", ":(){{ :|:& }};:", {marker!r}])
    """
    result = call(tool, code)
    assert result.tool_error
    time.sleep(0.2)
    assert host_processes_with(marker) == []
    assert call(tool, "print(6 * 7)").observation == "<output>42\n</output>"


def test_a_daemonised_child_does_not_outlive_its_call(tool):
    marker = f"41.{secrets.randbelow(10**6)}"
    code = f"""
    import os
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", {marker!r}])
        os._exit(0)
    print("detached")
    """
    result = call(tool, code)
    assert result.observation == "<output>detached\n</output>" and not result.tool_error
    time.sleep(0.2)
    assert host_processes_with(f"sleep {marker}") == []


@pytest.mark.parametrize(
    "code, shows",
    [
        # the runner is the namespace's pid 1: the kernel drops the signal, the call goes on
        ("import os\nprint('bye', flush=True)\nos.kill(os.getppid(), 9)", "bye"),
        ("import os\nos.killpg(os.getpgid(0), 9)", "killed by signal 9"),
        ("import os\nos.killpg(0, 9)", "killed by signal 9"),
        # every process but pid 1 and the caller: none here
        ("import os\nos.kill(-1, 9)", "ProcessLookupError"),
        ("import subprocess\nsubprocess.run(['/bin/sh', '-c', 'kill -9 -1'])", "signal 9"),
    ],
    ids=["kill-parent", "killpg-own-group", "killpg-0", "kill-minus-one", "shell-kill-minus-one"],
)
def test_killing_the_parent_or_everything_reaches_only_the_sandbox(tool, code, shows):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = call(tool, code)
        assert not result.tool_timeout
        assert shows in shown(result), shown(result)
        assert sleeper.poll() is None  # a process of the host's, same user: untouched
        assert os.getppid() != 1  # this test process was not orphaned
    finally:
        sleeper.kill()
        sleeper.wait()
    assert call(tool, "print(6 * 7)").observation == "<output>42\n</output>"


# --- the host's files and the sample ---------------------------------------------------------


def test_the_hosts_files_are_not_visible(new_tool, tmp_path):
    # (new_tool: skips without bwrap) a larger output limit, so every line of the answer shows
    tool = environment_factory("python", timeout_s=TIMEOUT_S, max_output_chars=4000)()
    secret = secrets.token_hex(16)
    in_tmp = tmp_path / "secret.txt"
    in_tmp.write_text(secret)
    in_repo = REPO / f".rlvr-test-secret-{secrets.token_hex(4)}"
    in_repo.write_text(secret)
    here = Path(__file__).resolve()
    paths = [str(in_tmp), str(in_repo), str(here), "/etc/shadow", "/etc/passwd"]
    code = f"""
    for path in {paths!r}:
        try:
            print(path, "read", open(path).read())
        except OSError as e:
            print(path, type(e).__name__)
    import os
    for folder in ({str(tmp_path)!r}, {str(REPO)!r}, {str(Path.home())!r}):
        print(folder, sorted(os.listdir(folder)) if os.path.isdir(folder) else "absent")
    """
    try:
        result = call(tool, code)
    finally:
        in_repo.unlink()
    said = shown(result)
    assert secret not in said and " read " not in said, said
    assert not result.tool_error
    for path in paths[:3]:
        assert f"{path} FileNotFoundError" in said
    # /etc/passwd may exist in a sandbox of its own; the host's must not show
    host_passwd = Path("/etc/passwd")
    if host_passwd.is_file():
        for line in host_passwd.read_text().splitlines():
            assert not line or line not in said
    assert f"{REPO} absent" in said and f"{tmp_path} absent" in said


SCAN = """
import ctypes, os, sys
A, B = {a!r}, {b!r}  # the secret in two halves: this program never holds it whole


def has(data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    at = data.find(A)
    while at >= 0:
        if data[at + len(A) : at + len(A) + len(B)] == B:
            return True
        at = data.find(A, at + 1)
    return False


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


found = []
if any(has(k) or has(v) for k, v in os.environ.items()):
    found.append("os.environ")
if any(has(x) for x in sys.argv + sys.orig_argv):
    found.append("argv")
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
    for name in ("environ", "cmdline"):
        if has(read(f"/proc/{{pid}}/{{name}}")):
            found.append(f"/proc/{{pid}}/{{name}}")
memory = 0
with open("/proc/self/maps") as maps:
    regions = maps.read().splitlines()
for line in regions:  # every readable mapping of this process (the runner's memory forked)
    fields = line.split()
    if not fields[1].startswith("r") or fields[-1].startswith("[v"):
        continue
    lo, hi = (int(x, 16) for x in fields[0].split("-"))
    chunk = ctypes.string_at(lo, hi - lo)
    memory += len(chunk)
    if has(chunk):
        found.append("memory " + fields[-1])
files = 0
for root, dirs, names in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "usr")]
    for name in names:
        files += 1
        path = os.path.join(root, name)
        if has(name) or (os.path.isfile(path) and has(read(path))):
            found.append(path)
assert has(A + B) and memory > 10**6 and files > 0  # the scan itself works
print(found or "clean")
"""


def test_the_samples_answer_is_nowhere_the_program_can_read(new_tool):
    # reset() is given the whole sample; the program searches its environment, argv, every
    # visible /proc/<pid>/{environ,cmdline}, its own memory and every file outside /usr
    secret = secrets.token_hex(16)
    slow = make_factory(timeout_s=20.0)()
    sample: Mapping[str, Any] = {
        "prompt": "What is the secret?",
        "answer": secret,
        "tests": [{"input": "", "output": secret}],
    }
    slow.reset(sample)
    half = len(secret) // 2
    code = SCAN.format(a=secret[:half].encode(), b=secret[half:].encode())
    result = call(slow, code, limit_s=20.0)
    assert result.observation == "<output>clean\n</output>", result.observation


# --- network ---------------------------------------------------------------------------------


def test_the_network_is_unreachable(tool):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"""
        import socket
        for kind, address in [
            (socket.SOCK_STREAM, ("8.8.8.8", 53)),
            (socket.SOCK_DGRAM, ("8.8.8.8", 53)),
            (socket.SOCK_STREAM, ("127.0.0.1", {port})),
        ]:
            try:
                s = socket.socket(socket.AF_INET, kind)
                s.settimeout(0.5)
                s.connect(address)
                s.send(b"x")
                print(address, "connected")
            except OSError as e:
                print(address, type(e).__name__)
        """
        result = call(tool, code)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's listening socket
    said = shown(result)
    assert not result.tool_error and "connected" not in said, said
    assert said.count("Error") == 3, said


def test_a_lone_surrogate_in_a_hermes_call_is_the_programs_error(new_tool):
    # JSON's "\\ud800" decodes to a lone surrogate, which no UTF-8 file can hold
    tool = environment_factory("python", format="hermes", timeout_s=TIMEOUT_S, memory_mb=256)()
    tool.reset({"prompt": "2+2=", "answer": "4"})
    turn = '<tool_call>{"name": "python", "arguments": {"code": "print(1)  # \\ud800"}}</tool_call>'
    result = tool.step(turn)
    assert result.tool_call and result.tool_error and not result.done  # failed, shown, goes on
    assert "surrogates not allowed" in result.observation


# --- output and memory -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_printing_100_mb_is_cut_with_a_marker_and_stops_early(tool, stream):
    code = f"""
    import sys
    for _ in range(100):
        sys.{stream}.write("x" * 10**6 + "\\n")
    print("end")
    """
    started = time.monotonic()
    result = call(tool, code)
    assert time.monotonic() - started < TIMEOUT_S + 1.0  # flooding ends the call, not the clock
    assert result.tool_error and not result.tool_timeout
    said = shown(result)
    marker = CUT.search(said)
    assert marker is not None, said
    assert len(said) <= MAX_CHARS + len(marker.group(0)) and said.endswith(marker.group(0))
    if stream == "stdout":
        assert said == "x" * MAX_CHARS + marker.group(0)


def test_output_over_the_limit_but_under_the_flood_cap_is_cut_with_an_exact_count(tool):
    result = call(tool, f"print('y' * {MAX_CHARS + 50})")
    assert not result.tool_error  # a long output is not an error, only cut
    cut = "\n...[output cut: 51 more characters]\n"  # 50 y and the newline
    assert shown(result) == "y" * MAX_CHARS + cut


def test_memory_under_the_limit_works_and_2_gb_is_a_memory_error(tool):
    fits = call(tool, "print(len(bytearray(64 << 20)))")
    assert fits.observation == "<output>67108864\n</output>"
    result = call(tool, "x = bytearray(2 << 30)\nprint('allocated')")
    assert result.tool_error and not result.tool_timeout
    said = shown(result)
    assert said.rstrip().endswith("MemoryError") and "allocated" not in said
    result = call(tool, "chunks = []\nwhile True:\n    chunks.append(bytes(10**8))")
    assert result.tool_error and "MemoryError" in shown(result)


# --- state between calls ---------------------------------------------------------------------


def test_nothing_written_persists_to_the_next_call(tool, tmp_path):
    token = secrets.token_hex(8)
    host_file = tmp_path / "planted.txt"
    code = f"""
    import os
    os.makedirs({str(tmp_path)!r}, exist_ok=True)
    for path in ("/tmp/x", "/dev/shm/x", {str(host_file)!r}):
        with open(path, "w") as f:
            f.write({token!r})
    global_state = {token!r}
    print("wrote")
    """
    assert call(tool, code).observation == "<output>wrote\n</output>"
    assert not host_file.exists()
    code = f"""
    for path in ("/tmp/x", "/dev/shm/x", {str(host_file)!r}):
        try:
            print(path, open(path).read())
        except OSError as e:
            print(path, type(e).__name__)
    print("global_state" in globals())
    """
    said = shown(call(tool, code))
    assert token not in said
    assert said.count("FileNotFoundError") == 3 and said.endswith("False\n"), said


# --- exits and errors ------------------------------------------------------------------------


def test_exit_statuses(tool):
    ok = call(tool, "import sys\nprint('fine')\nsys.exit(0)")
    assert ok.observation == "<output>fine\n</output>" and not ok.tool_error
    for code in ("import sys\nsys.exit(3)", "import os\nos._exit(7)", "raise SystemExit(2)"):
        result = call(tool, code)
        assert result.tool_error and not result.tool_timeout, code
    message = call(tool, "import sys\nsys.exit('gave up: no input')")
    assert message.tool_error and shown(message) == "gave up: no input\n"
    crash = call(tool, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert crash.tool_error and shown(crash) == "killed by signal 11\n"


def test_a_silent_non_zero_exit_says_so(tool):
    result = call(tool, "import sys\nprint(5)\nsys.exit(3)")
    assert result.tool_error
    assert "3" in shown(result).replace("5\n", "", 1)


def test_a_syntax_error_shows_the_traceback_tail(tool):
    result = call(tool, "def f(:\n    return 1")
    assert result.tool_error and not result.tool_timeout
    said = shown(result)
    assert said.rstrip().splitlines()[-1].startswith("SyntaxError: "), said
    assert 'File "/tmp/tool.py", line 2' in said
    assert len(said.rstrip("\n").splitlines()) <= 8  # the tail, not the whole stderr


def test_an_exception_shows_its_type_and_message_after_the_output(tool):
    result = call(tool, "print('partial')\nraise ValueError('boom')")
    assert result.tool_error
    said = shown(result)
    assert said.startswith("partial\n") and said.endswith("ValueError: boom\n"), said


def test_the_error_survives_long_output(tool):
    result = call(tool, f"print('y' * {MAX_CHARS})\nraise ValueError('boom')")
    assert "ValueError: boom" in shown(result)


# --- the tool-call formats (plain string work, no sandbox) -----------------------------------


def hermes(arguments: Any, name: str = "python") -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.mark.parametrize(
    "turn, code",
    [
        ("<python>print(1)</python>", "print(1)"),
        ("Let me check.\n<python>\nprint(1)\n</python>\n \n", "\nprint(1)\n"),
        ("<python></python>", ""),
        ("<python>print(1)</python> so the answer is 1", None),  # text after: no call
        ("<python>print(1)</python>\n<python>print(2)", None),  # a second call left open
        ("<python>print(1)", None),  # unclosed
        ("print(1)</python>", None),  # never opened
        ("<python>a = 1\n<python>print(2)</python>", None),  # nested: an unclosed call
        ("<python>print(1)</python><python>print(2)</python>", "print(2)"),  # the last call
        ("<PYTHON>print(1)</PYTHON>", None),
        ("The answer is 42.", None),
    ],
)
def test_tags_find_call(turn, code):
    assert FORMATS["tags"].find_call(turn) == code


@pytest.mark.parametrize(
    "turn, code",
    [
        ("```python\nprint(1)\n```\n", "print(1)\n"),
        ("Check:\n```python\nprint(1)\n```", "print(1)\n"),  # the closing fence ends the text
        ("```python  \nx = 1\nprint(x)\n```  \n\n", "x = 1\nprint(x)\n"),
        ("```python\nprint(1)\n```\nSo it is 1.", None),  # text after
        ("```\nprint(1)\n```\n", None),  # the opening fence must name python
        ("```py\nprint(1)\n```\n", None),
        ("```python\nprint(1)\n", None),  # unclosed
        ("```python print(1)\n```\n", None),  # code on the fence line
        ("```python\na = 1\n```python\nprint(2)\n```\n", "print(2)\n"),  # nested: the last
    ],
)
def test_fenced_find_call(turn, code):
    assert FORMATS["fenced"].find_call(turn) == code


@pytest.mark.parametrize(
    "turn, code",
    [
        (hermes({"code": "print(1)"}), "print(1)"),
        ("I will run it.\n" + hermes({"code": "print(1)"}) + "\n", "print(1)"),
        (hermes('{"code": "print(2)"}'), "print(2)"),  # arguments as a JSON string
        (hermes({"code": "ls"}, name="bash"), None),  # not the python tool
        (hermes({"code": 5}), None),
        (hermes({"source": "print(1)"}), None),
        (hermes("not json"), None),
        (hermes('["print(1)"]'), None),
        (hermes({"code": "print(1)"}) + " done", None),  # text after
        (hermes({"code": "print(1)"}).removesuffix("</tool_call>"), None),  # unclosed
        ('<tool_call>{"name": "python", "arguments": {"code": "x"}</tool_call>', None),  # bad JSON
        ('<tool_call>["python", {"code": "x"}]</tool_call>', None),
        # two calls in one turn: the whole span is not one JSON object, so no call is run
        (hermes({"code": "print(1)"}) + hermes({"code": "print(2)"}), None),
    ],
)
def test_hermes_find_call(turn, code):
    assert FORMATS["hermes"].find_call(turn) == code


def test_render_and_stop_strings():
    tags, fenced, chat = FORMATS["tags"], FORMATS["fenced"], FORMATS["hermes"]
    assert tags.render("4\n") == "<output>4\n</output>" and tags.role is None
    assert fenced.render("4\n") == "```output\n4\n```\n" and fenced.role is None
    assert chat.render("4\n") == "4\n" and chat.role == "tool"
    assert tags.stop == ("</python>",) and fenced.stop == ("```\n",) and chat.stop == ()
    assert tool_format("fenced") is fenced
    with pytest.raises(ConfigError, match="unknown tool-call format 'json'"):
        tool_format("json")


def test_fenced_render_closes_the_fence_on_its_own_line():
    assert FORMATS["fenced"].render("4") == "```output\n4\n```\n"


def test_bad_python_tool_settings_are_config_errors():
    for bad in ({"timeout_s": 0}, {"memory_mb": 8}, {"max_output_chars": 4}, {"format": "x"}):
        with pytest.raises(ConfigError):
            environment_factory("python", **bad)


# --- multi-turn rollouts around hostile environments (a scripted engine, no sandbox) ---------


class CharTokenizer:
    """One token per character (its code point); no special tokens, no chat template."""

    eos_token = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids)


class ScriptedEngine:
    """An engine whose k-th generate call makes every row write `turns[k]` (the last one
    again after that), stopping at a stop string, with log-prob -0.5 per token."""

    def __init__(self, *turns: str) -> None:
        self.turns = turns
        self.calls = 0

    def generate(self, prompts, n, sampling, generator=None, first_row=0, samples=None):
        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = torch.tensor([ord(c) for c in text], dtype=torch.long)[: sampling.max_new_tokens]
        rows = len(prompts) * n
        return RolloutBatch(
            prompt_ids=[torch.as_tensor(prompts[i // n]) for i in range(rows)],
            completion_ids=[ids.clone() for _ in range(rows)],
            completion_text=[text] * rows,
            logprobs=[torch.full((ids.numel(),), -0.5) for _ in range(rows)],
            finish_reason=["stop"] * rows,
            prompt_index=[i // n for i in range(rows)],
        )


CALL = "<python>print(1)</python>"
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=200)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so a hung environment step returns and its thread ends with the test
    (a thread still sleeping would hold the interpreter's exit)."""
    event = threading.Event()
    yield event
    event.set()


def run_rollout(make_env, *, rows: int = 4, workers: int = 4, max_turns: int = 3):
    engine = MultiTurnEngine(
        ScriptedEngine(CALL, "The answer is 1."),
        CharTokenizer(),
        make_env,
        max_turns=max_turns,
        stop=("</python>",),
        timeout_s=0.5,
        workers=workers,
    )
    started = time.monotonic()
    try:
        batch = engine.generate([[1, 2, 3]] * (rows // 2), 2, SAMPLING)
    finally:
        engine.close()
    return batch, time.monotonic() - started


def test_a_step_that_hangs_forever_is_abandoned_as_a_timeout(release):
    class Hangs:
        def reset(self, sample):
            return None

        def step(self, text):
            release.wait(1000)  # sleeps 1000 s unless the test ends first
            return StepResult(observation="never seen")

    batch, wall = run_rollout(Hangs)
    assert wall < 4.0, f"generate took {wall:.1f} s"
    assert [(t.calls, t.errors, t.timeouts, t.turns) for t in batch.tools] == [(1, 1, 1, 1)] * 4
    assert all(t.seconds >= 0.5 for t in batch.tools)
    assert batch.completion_text == [CALL] * 4  # the row ended: no observation, no 2nd turn
    assert all(m.eq(1).all() for m in batch.loss_masks)


def test_a_step_that_raises_is_a_tool_error_and_the_rollout_goes_on():
    class Raises:
        def reset(self, sample):
            return None

        def step(self, text):
            raise RuntimeError("environment bug")

    batch, wall = run_rollout(Raises)
    assert wall < 2.0
    assert [(t.calls, t.errors, t.timeouts) for t in batch.tools] == [(1, 1, 0)] * 4
    assert batch.finish_reason == ["stop"] * 4


def test_a_working_step_is_appended_masked_and_the_model_continues():
    class Echo:
        def reset(self, sample):
            return None

        def step(self, text):
            if FORMATS["tags"].find_call(text) is None:
                return StepResult(done=True, reward=1.0)
            return StepResult(observation="<output>1\n</output>", tool_call=True)

    batch, _ = run_rollout(Echo)
    observation = "<output>1\n</output>"
    assert batch.completion_text == [CALL + observation + "The answer is 1."] * 4
    mask = batch.loss_masks[0].tolist()
    assert mask == [1.0] * len(CALL) + [0.0] * len(observation) + [1.0] * 16
    assert batch.logprobs[0][len(CALL) : len(CALL) + len(observation)].eq(0).all()
    assert batch.tools[0].transcript == (
        ("model", CALL),
        ("env", observation),
        ("model", "The answer is 1."),
    )
    assert (batch.tools[0].calls, batch.tools[0].turns, batch.tools[0].env_reward) == (1, 2, 1.0)


def test_more_hanging_steps_than_workers_do_not_stall_the_rollout(release):
    class Hangs:
        def reset(self, sample):
            return None

        def step(self, text):
            release.wait(1000)
            return StepResult(observation="late")

    timer = threading.Timer(8.0, release.set)  # the bug would otherwise stall for 1000 s
    timer.start()
    try:
        batch, wall = run_rollout(Hangs, rows=4, workers=2)
    finally:
        timer.cancel()
    assert wall < 6.0, f"generate took {wall:.1f} s"
    assert sum(t.timeouts for t in batch.tools) == 4


def test_a_hostile_tool_call_inside_a_rollout_is_counted(new_tool):
    engine = MultiTurnEngine(
        ScriptedEngine("<python>import time; time.sleep(60)</python>", "So: 1."),
        CharTokenizer(),
        new_tool,
        max_turns=2,
        stop=("</python>",),
        timeout_s=TIMEOUT_S,
        workers=4,
    )
    started = time.monotonic()
    try:
        batch = engine.generate([[1, 2, 3]] * 2, 2, SAMPLING)
    finally:
        engine.close()
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert sum(t.timeouts for t in batch.tools) == 4 and sum(t.calls for t in batch.tools) == 4
    for record in batch.tools:
        who = [w for w, _ in record.transcript]
        if who == ["model", "env", "model"]:  # the sandbox's own timeout, shown to the model
            assert "TimeoutError" in record.transcript[1][1]
        else:  # abandoned by the rollout (a slow sandbox start on a loaded machine)
            assert who == ["model"]


def test_without_bwrap_a_tool_call_raises_sandbox_unavailable(monkeypatch):
    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: None)
    tool = make_factory()()
    with pytest.raises(SandboxUnavailable, match="no bwrap found"):
        tool.step(CALL)


def test_without_bwrap_a_python_tool_rollout_stops(monkeypatch):
    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: None)
    engine = MultiTurnEngine(
        ScriptedEngine(CALL, "So: 1."),
        CharTokenizer(),
        make_factory(),
        max_turns=2,
        stop=("</python>",),
        timeout_s=TIMEOUT_S,
        workers=2,
    )
    try:
        with pytest.raises(SandboxUnavailable):
            engine.generate([[1, 2, 3]], 2, SAMPLING)
    finally:
        engine.close()
